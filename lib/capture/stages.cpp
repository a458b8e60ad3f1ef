#include "capture/stages.h"

#include <atomic>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace lingprobe::capture {
namespace {

struct Registry {
  std::mutex mu;
  std::deque<std::string> names{"unstaged"};
  std::unordered_map<std::string, StageId> ids{{"unstaged", kUnstaged}};
  std::atomic<uint64_t> overflowed{0};
  std::atomic<bool> pushed[kMaxStages] = {};  // pushed at least once in this process
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: used from atexit paths
  return *r;
}

thread_local StageStack t_stack;
std::atomic<StageListener> g_listener{nullptr};

void changed(StageStack& s) {
  ++s.changes;
  if (StageListener l = g_listener.load(std::memory_order_acquire)) l();
}

}  // namespace

StageId intern_stage(std::string_view name) {
  if (name.empty()) return kUnstaged;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.ids.find(std::string(name));
  if (it != r.ids.end()) return it->second;
  if (r.names.size() >= kMaxStages) {
    r.overflowed.fetch_add(1, std::memory_order_relaxed);
    return kUnstaged;
  }
  const auto id = static_cast<StageId>(r.names.size());
  r.names.emplace_back(name);
  r.ids.emplace(std::string(name), id);
  return id;
}

std::string stage_name(StageId id) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return id < r.names.size() ? r.names[id] : std::string("unstaged");
}

std::vector<std::string> stages_pushed() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::vector<std::string> out;
  for (size_t id = 1; id < r.names.size(); ++id)
    if (r.pushed[id].load(std::memory_order_relaxed)) out.push_back(r.names[id]);
  return out;
}

uint64_t stages_overflowed() { return registry().overflowed.load(std::memory_order_relaxed); }

bool push_stage(StageId id) {
  StageStack& s = t_stack;
  if (s.size >= kMaxStageDepth) {
    ++s.ignored;
    return false;
  }
  s.ids[s.size++] = id;
  if (id < kMaxStages && !registry().pushed[id].load(std::memory_order_relaxed))
    registry().pushed[id].store(true, std::memory_order_relaxed);
  changed(s);
  return true;
}

bool pop_stage() {
  StageStack& s = t_stack;
  if (s.ignored) {
    --s.ignored;
    return true;
  }
  if (s.size == 0) return false;
  --s.size;
  changed(s);
  return true;
}

StageStack* this_thread_stage_stack() { return &t_stack; }

void set_stage_listener(StageListener listener) { g_listener.store(listener, std::memory_order_release); }

}  // namespace lingprobe::capture
