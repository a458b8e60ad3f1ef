#include "capture/op_selection.h"

#include "format/glob.h"

namespace lingprobe::capture {
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

std::string OpSelection::parse(const std::string& ops, const std::string& deny, const std::string& option) {
  global_.clear();
  per_stage_.clear();
  deny_.clear();
  for (const std::string& segment : split(ops, ';')) {
    const size_t colon = segment.find(':');
    const bool has_stage = colon != std::string::npos && (colon + 1 >= segment.size() || segment[colon + 1] != ':');
    std::vector<std::string> globs = split(has_stage ? segment.substr(colon + 1) : segment, ',');
    for (const auto& g : globs) {
      std::string err = check_glob(g);
      if (!err.empty()) return option + ": " + err;
    }
    if (has_stage) {
      std::string stage = trim(segment.substr(0, colon));
      if (stage.empty()) return option + ": empty stage name before ':' in '" + segment + "'";
      if (globs.empty()) return option + ": stage '" + stage + "' has no op patterns";
      per_stage_.push_back({stage, globs});
    } else {
      global_.insert(global_.end(), globs.begin(), globs.end());
    }
  }
  for (const auto& g : split(deny, ',')) {
    std::string err = check_glob(g);
    if (!err.empty()) return "LINGPROBE_OPS_DENY: " + err;
    deny_.push_back(g);
  }
  return "";
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

}  // namespace lingprobe::capture
