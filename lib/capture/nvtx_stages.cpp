#include "capture/nvtx_stages.h"

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

std::mutex g_mu;
std::shared_ptr<const Map> g_map;  // replaced whole under g_mu; read by copy

struct ThreadNvtx {
  std::vector<bool> pushed_stage;  // per open range: did it push a stage?
  std::unordered_map<std::string, int> cache;  // name -> stage id, -1 unmapped
  std::shared_ptr<const Map> map;
  std::string scratch;
};
thread_local ThreadNvtx t_nvtx;

int lookup(ThreadNvtx& t, const char* name) {
  if (!name) return -1;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (t.map != g_map) {
      t.map = g_map;
      t.cache.clear();
    }
  }
  if (!t.map || t.map->rules.empty()) return -1;
  t.scratch.assign(name);
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
    if (eq == std::string::npos || eq == 0)
      return "LINGPROBE_NVTX_MAP: rule '" + rule + "' is not stage=regex";
    try {
      map->rules.push_back({intern_stage(rule.substr(0, eq)), std::regex(rule.substr(eq + 1))});
    } catch (const std::regex_error& e) {
      return "LINGPROBE_NVTX_MAP: '" + rule.substr(eq + 1) + "' is not a valid regex (" + e.what() + ")";
    }
  }
  std::lock_guard<std::mutex> lock(g_mu);
  g_map = std::move(map);
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
