#include "capture/nvtx_stages.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <memory>
#include <mutex>
#include <regex>
#include <unordered_map>
#include <vector>

#include "capture/stages.h"

namespace lingprobe::capture {
namespace {

struct Rule {
  StageId stage;
  std::regex pattern;
};

struct Map {
  std::vector<Rule> rules;
};

// libstdc++'s std::regex compiles and matches recursively, and overflows a
// signed int on long repetition counts and back-references: patterns are
// bounded in length, counts and back-references in digits (fuzz/fuzz_parsers
// found the overflow), and names are matched on their first kMaxMatchedName bytes.
constexpr size_t kMaxPattern = 512;
constexpr size_t kMaxMatchedName = 512;

// "" or why `pattern` is refused before std::regex sees it.
std::string check_pattern(const std::string& pattern) {
  if (pattern.size() > kMaxPattern) return "is longer than " + std::to_string(kMaxPattern) + " characters";
  auto digits_at = [&pattern](size_t i) {
    size_t n = 0;
    while (i + n < pattern.size() && std::isdigit(static_cast<unsigned char>(pattern[i + n]))) ++n;
    return n;
  };
  // Wherever a number could be read as a count or a back-reference, whatever
  // the context (a class, an unclosed brace): more than 4 digits is refused.
  for (size_t i = 0; i < pattern.size(); ++i)
    if ((pattern[i] == '{' || pattern[i] == ',' || pattern[i] == '\\') && digits_at(i + 1) > 4)
      return "has a repetition count or back-reference of more than 4 digits";
  // Repetition of a repetition backtracks exponentially in libstdc++ (a hang on
  // the calling thread): a quantifier right after a quantifier ('a**'; a lazy
  // '?' excepted), or after a group that repeats or alternates inside ('(a+)*',
  // '(a|b)+'), is refused (fuzz/fuzz_parsers found 'vae_****').
  struct Group {
    bool repeats_or_alternates = false;
  };
  std::vector<Group> groups;
  bool after_quantifier = false, lazy_taken = false, after_risky_group = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    const bool quantifier = c == '*' || c == '+' || c == '?' || (c == '{' && digits_at(i + 1) > 0);
    if (quantifier) {
      if (after_quantifier && c == '?' && !lazy_taken) {
        lazy_taken = true;
        continue;
      }
      if (after_quantifier || after_risky_group)
        return "repeats a repetition (nested quantifiers can take exponential time); write it without";
      for (auto& g : groups) g.repeats_or_alternates = true;
      if (c == '{') i = std::min(pattern.find('}', i), pattern.size());  // the count, checked above
      after_quantifier = true;
      lazy_taken = false;
      after_risky_group = false;
      continue;
    }
    after_quantifier = after_risky_group = false;
    if (c == '\\') {
      ++i;                  // the escaped character (or the first digit)
    } else if (c == '[') {  // a class: its characters are literals
      size_t j = i + 1;
      if (j < pattern.size() && pattern[j] == '^') ++j;  // (ECMAScript: "[]" is an empty class, no literal ']')
      while (j < pattern.size() && pattern[j] != ']') j += pattern[j] == '\\' ? 2 : 1;
      i = j;
    } else if (c == '(') {
      groups.push_back({});
    } else if (c == '|') {
      for (auto& g : groups) g.repeats_or_alternates = true;
    } else if (c == ')' && !groups.empty()) {
      after_risky_group = groups.back().repeats_or_alternates;
      groups.pop_back();
    }
  }
  return "";
}

std::mutex g_mu;
std::shared_ptr<const Map> g_map;           // replaced whole under g_mu; read by copy
std::atomic<uint64_t> g_map_generation{0};  // bumped (under g_mu) each time g_map is replaced

struct ThreadNvtx {
  std::vector<bool> pushed_stage;              // per open range: did it push a stage?
  std::unordered_map<std::string, int> cache;  // name -> stage id, -1 unmapped
  std::shared_ptr<const Map> map;
  uint64_t map_generation = 0;  // g_map_generation when `map` was copied: a push takes no lock until it moves
  std::string scratch;
};
thread_local ThreadNvtx t_nvtx;

int lookup(ThreadNvtx& t, const char* name) {
  if (!name) return -1;
  if (g_map_generation.load(std::memory_order_acquire) != t.map_generation) {  // a new map: copied once
    std::lock_guard<std::mutex> lock(g_mu);
    t.map = g_map;
    t.map_generation = g_map_generation.load(std::memory_order_relaxed);
    t.cache.clear();
  }
  if (!t.map || t.map->rules.empty()) return -1;
  t.scratch.assign(name, strnlen(name, kMaxMatchedName));  // libstdc++'s regex recurses per character
  auto it = t.cache.find(t.scratch);
  if (it != t.cache.end()) return it->second;
  int stage = -1;
  for (const auto& r : t.map->rules) {
    if (std::regex_search(t.scratch, r.pattern)) {
      stage = r.stage;
      break;
    }
  }
  if (t.cache.size() < 4096) t.cache.emplace(t.scratch, stage);
  return stage;
}

}  // namespace

std::string set_nvtx_map(const std::string& spec) {
  auto map = std::make_shared<Map>();
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(';', start);
    std::string rule = spec.substr(start, end == std::string::npos ? std::string::npos : end - start);
    start = end == std::string::npos ? spec.size() + 1 : end + 1;
    if (rule.find_first_not_of(" \t") == std::string::npos) continue;
    const size_t eq = rule.find('=');
    if (eq == std::string::npos || eq == 0) return "LINGPROBE_NVTX_MAP: rule '" + rule + "' is not stage=regex";
    const std::string pattern = rule.substr(eq + 1);
    if (std::string why = check_pattern(pattern); !why.empty())
      return "LINGPROBE_NVTX_MAP: the regex of rule '" + rule.substr(0, eq) + "' " + why;
    try {
      std::regex compiled(pattern);
      map->rules.push_back({intern_stage(rule.substr(0, eq)), std::move(compiled)});
    } catch (const std::regex_error& e) {
      return "LINGPROBE_NVTX_MAP: '" + pattern + "' is not a valid regex (" + e.what() + ")";
    }
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_map = std::move(map);
  g_map_generation.fetch_add(1, std::memory_order_release);
  return "";
}

void nvtx_range_push(const char* name) {
  ThreadNvtx& t = t_nvtx;
  const int stage = lookup(t, name);
  const bool pushed = stage >= 0 && push_stage(static_cast<StageId>(stage));
  t.pushed_stage.push_back(pushed);
}

void nvtx_range_pop() {
  ThreadNvtx& t = t_nvtx;
  if (t.pushed_stage.empty()) return;
  const bool pushed = t.pushed_stage.back();
  t.pushed_stage.pop_back();
  if (pushed) pop_stage();
}

}  // namespace lingprobe::capture
