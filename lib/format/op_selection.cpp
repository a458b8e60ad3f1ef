#include "format/op_selection.h"

#include "format/glob.h"

#include <algorithm>
#include <cctype>

namespace lingprobe::format {
namespace {

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t pos = s.find(sep, start);
    std::string part = trim(s.substr(start, pos == std::string::npos ? std::string::npos : pos - start));
    if (!part.empty()) out.push_back(part);
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

// A glob must name a namespace ("aten::linear", "*conv*" is refused: say
// "aten::*conv*") so that a stage prefix can never be mistaken for one.
// Op names hold letters, digits, '_', '.' and "::": a pattern with anything
// else ('[', a single ':', a space) can never match and is refused.
std::string check_glob(const std::string& g) {
  if (g.find("::") == std::string::npos && g != "*")
    return "op pattern '" + g + "' has no namespace; write it as ns::name, e.g. aten::" + g;
  for (size_t i = 0; i < g.size(); ++i) {
    const char c = g[i];
    if (c == ':' && i + 1 < g.size() && g[i + 1] == ':') {
      ++i;
      continue;
    }
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '*' || c == '?';
    if (!ok)
      return "op pattern '" + g + "' has '" + std::string(1, c) +
             "', which no op name has (names: letters, digits, '_', '.', '::'; wildcards: * and ?)";
  }
  return "";
}

}  // namespace

namespace {

// One ';'-separated segment of OPS syntax: "stage:glob,glob" (a single ':' names a stage) or "glob,glob".
struct Segment {
  bool has_stage = false;
  std::string stage;
  std::vector<std::string> globs;
};

Segment read_segment(const std::string& segment) {
  Segment s;
  const size_t colon = segment.find(':');
  s.has_stage = colon != std::string::npos && (colon + 1 >= segment.size() || segment[colon + 1] != ':');
  if (s.has_stage) s.stage = trim(segment.substr(0, colon));
  s.globs = split(s.has_stage ? segment.substr(colon + 1) : segment, ',');
  return s;
}

}  // namespace

std::string op_patterns_error(const std::string& patterns, bool stages) {
  if (!stages) {
    for (const auto& g : split(patterns, ','))
      if (std::string err = check_glob(g); !err.empty()) return err;
    return "";
  }
  for (const std::string& segment : split(patterns, ';')) {
    const Segment s = read_segment(segment);
    for (const auto& g : s.globs) {
      if (s.has_stage && g.find("::") == std::string::npos && g != "*")  // "aten:linear": one ':' is a stage's
        return "'" + segment + "' reads as stage '" + s.stage + "' with op pattern '" + g +
               "', which has no namespace; did you mean '" + s.stage + "::" + g +
               "'? (stage:ns::name selects per stage)";
      if (std::string err = check_glob(g); !err.empty()) return err;
    }
    if (s.has_stage && s.stage.empty()) return "empty stage name before ':' in '" + segment + "'";
    if (s.has_stage && s.globs.empty()) return "stage '" + s.stage + "' has no op patterns";
  }
  return "";
}

std::string OpSelection::parse(const std::string& ops, const std::string& deny, const std::string& option) {
  global_.clear();
  per_stage_.clear();
  deny_.clear();
  if (std::string err = op_patterns_error(ops, true); !err.empty()) return option + ": " + err;
  if (std::string err = op_patterns_error(deny, false); !err.empty()) return "LINGPROBE_OPS_DENY: " + err;
  for (const std::string& segment : split(ops, ';')) {
    Segment s = read_segment(segment);
    if (s.has_stage)
      per_stage_.push_back({std::move(s.stage), std::move(s.globs)});
    else
      global_.insert(global_.end(), s.globs.begin(), s.globs.end());
  }
  deny_ = split(deny, ',');
  return "";
}

std::vector<std::string> OpSelection::rule_stages() const {
  std::vector<std::string> out;
  for (const auto& rule : per_stage_)
    if (std::find(out.begin(), out.end(), rule.stage) == out.end()) out.push_back(rule.stage);
  return out;
}

std::vector<std::string> OpSelection::unmatched(const std::vector<std::pair<std::string, std::string>>& ops_met) const {
  auto met = [&](const std::string& glob) {
    for (const auto& [name, with_overload] : ops_met)
      if (any_match({glob}, name, with_overload)) return true;
    return false;
  };
  std::vector<std::string> out;
  for (const auto& g : global_)
    if (!met(g)) out.push_back(g);
  for (const auto& rule : per_stage_)
    for (const auto& g : rule.globs)
      if (!met(g)) out.push_back(rule.stage + ":" + g);
  return out;
}

namespace {

std::string lowered_without_wildcards(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != '*' && c != '?') out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string op_pattern_glob(const std::string& pattern) {
  const size_t colon = pattern.find(':');
  const bool staged = colon != std::string::npos && pattern.compare(colon, 2, "::") != 0;
  return staged ? pattern.substr(colon + 1) : pattern;
}

std::vector<std::string> closest_op_names(const std::string& pattern, const std::vector<std::string>& names, size_t n) {
  const std::string want = lowered_without_wildcards(op_pattern_glob(pattern));
  auto split_name = [](const std::string& s) {  // (namespace, name)
    const size_t sep = s.rfind("::");
    return sep == std::string::npos ? std::make_pair(std::string(), s)
                                    : std::make_pair(s.substr(0, sep), s.substr(sep + 2));
  };
  const auto [want_ns, want_name] = split_name(want);
  std::vector<std::pair<size_t, std::string>> scored;
  for (const auto& name : names) {
    const std::string have = lowered_without_wildcards(name);
    const auto [have_ns, have_name] = split_name(have);
    // A glob's literal part inside a name counts as close ("*Conv*" and aten::conv2d).
    const size_t d = have.find(want) != std::string::npos || have_name.find(want_name) != std::string::npos
                         ? (have_ns == want_ns ? 0 : 1)
                         : edit_distance(want_name, have_name) + (have_ns == want_ns ? 0 : 1);
    if (d <= std::max<size_t>(1, want_name.size() / 3)) scored.emplace_back(d, name);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (const auto& [d, name] : scored) {
    if (out.size() == n) break;
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  }
  return out;
}

bool OpSelection::any_match(const std::vector<std::string>& globs, const std::string& a, const std::string& b) {
  for (const auto& g : globs)
    if (format::glob_match(g.c_str(), a.c_str()) || format::glob_match(g.c_str(), b.c_str())) return true;
  return false;
}

bool OpSelection::selected(const std::string& name, const std::string& with_overload, const std::string& stage) const {
  if (any_match(deny_, name, with_overload)) return false;
  if (global_.empty() && per_stage_.empty()) return true;
  if (any_match(global_, name, with_overload)) return true;
  for (const auto& rule : per_stage_)
    if (rule.stage == stage && any_match(rule.globs, name, with_overload)) return true;
  return false;
}

}  // namespace lingprobe::format
