// Timed calls (cupti_profiler.h: begin_timing, stop_timing, end_timing):
// CUPTI Activity's kernel records of one op call, without the range
// profiler. The kernels run as they would without lingprobe: nothing
// replayed, no memory saved and restored, no other thread held, and no wait
// at the op's end (the next op's kernels queue behind its own; its records
// are read later, on the writer's thread), so their durations are the ones
// torch.profiler's trace shows for the same call. Calls whose records are
// still to be read share one session: the callback stays subscribed until
// the last of them ends, and Activity's kernel kind beyond it (armed, until
// disarm_timing_activity: enabling it again costs the next launch ~200 us).
#include "gpu/cupti_profiler.h"

#include "gpu/cupti_api.h"
#include "gpu/cupti_window.h"

#include "format/scope_guard.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

namespace lingprobe::gpu {

// The session's start (under w.session_mu, no call pending): the window
// claimed, the launch callbacks subscribed, the kernel kind enabled.
format::Status Cupti::start_timing_session(void* ctx) {
  Window& w = window();
  {
    std::lock_guard<std::mutex> lock(w.mu);
    if (w.open) return {format::StatusCode::kFailed, "a counter window is open"};
    w.open = true;
    w.records.clear();
  }
  {
    std::lock_guard<std::mutex> lock(w.correlations_mu);
    w.own_correlations.clear();
    w.noted.clear();
    w.noted_graphs.clear();
  }
  format::ScopeGuard not_open([&] {
    w.timing.store(false);
    std::lock_guard<std::mutex> lock(w.mu);
    w.open = false;
  });
  w.ctx = static_cast<CUcontext>(ctx);
  w.owner.store(std::thread::id());
  w.timing.store(true);  // before the callback can run: nothing is held
  w.timing_taken_over = false;
  w.subscriber = nullptr;
  if (const CUptiResult r = api_->Subscribe(&w.subscriber, on_driver_api, nullptr); r != CUPTI_SUCCESS) {
    w.subscriber = nullptr;
    return {format::StatusCode::kHeld, "CUPTI's callback subscriber is held by another tool (" + describe(r) + ")"};
  }
  for (CUpti_CallbackId cbid : kLaunchCallbacks)  // without them no launch of the op is named: no timing
    if (const CUptiResult r = api_->EnableCallback(1, w.subscriber, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
        r != CUPTI_SUCCESS) {
      api_->Unsubscribe(w.subscriber);
      w.subscriber = nullptr;
      return {code_of(r), "cuptiEnableCallback: " + describe(r)};
    }
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.collecting = true;
  }
  if (w.activity_armed) {  // still enabled since the last session, with our buffers: its records are read again
    w.activity_armed = false;
    not_open.dismiss();
    return format::Status::Ok();
  }
  api_->ActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (const CUptiResult r = api_->ActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); r != CUPTI_SUCCESS) {
    std::lock_guard<std::mutex> lock(w.mu);
    w.collecting = false;
    api_->Unsubscribe(w.subscriber);
    w.subscriber = nullptr;
    return {code_of(r), "cuptiActivityEnable(CONCURRENT_KERNEL): " + describe(r)};
  }
  not_open.dismiss();
  return format::Status::Ok();
}

void Cupti::disarm_timing_activity(std::chrono::steady_clock::duration idle_for) {
  if (!g_api) return;  // CUPTI never loaded: nothing was enabled
  Window& w = window();
  std::lock_guard<std::mutex> session(w.session_mu);
  if (!w.activity_armed || w.timing_pending > 0) return;
  if (std::chrono::steady_clock::now() - w.armed_since < idle_for) return;
  w.activity_armed = false;
  g_api->ActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  g_api->ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);  // our buffers back (collecting is off: unread)
}

format::Status Cupti::begin_timing(void* ctx) {
  Window& w = window();
  std::lock_guard<std::mutex> session(w.session_mu);
  if (w.timing_pending == 0) {
    if (format::Status started = start_timing_session(ctx); !started.ok()) return started;
  } else if (w.owner.load() != std::thread::id()) {
    return {format::StatusCode::kFailed, "another timed call is open"};
  } else if (w.ctx != static_cast<CUcontext>(ctx)) {
    return {format::StatusCode::kFailed, "the pending timed calls are on another device"};
  }
  {
    std::lock_guard<std::mutex> lock(w.correlations_mu);
    w.own_correlations.clear();
  }
  ++w.timing_pending;
  w.owner.store(std::this_thread::get_id());
  return format::Status::Ok();
}

std::vector<uint32_t> Cupti::stop_timing() {
  Window& w = window();
  w.owner.store(std::thread::id());
  std::vector<uint32_t> own;
  std::lock_guard<std::mutex> lock(w.correlations_mu);
  own.swap(w.own_correlations);
  return own;
}

// The session's end (under w.session_mu, the last call ended).
void Cupti::end_timing_session() {
  Window& w = window();
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.collecting = false;
    w.records.clear();
  }
  // The kind stays enabled for the next session (armed; disarm_timing_activity).
  // Another client that registered its Activity callbacks during the session
  // keeps it enabled too (as at a counter window's end): its trace goes on, and
  // the next session registers ours again.
  w.activity_armed = !w.timing_taken_over;
  w.armed_since = std::chrono::steady_clock::now();
  if (w.subscriber) api_->Unsubscribe(w.subscriber);
  w.subscriber = nullptr;
  w.timing.store(false);
  {
    std::lock_guard<std::mutex> lock(w.correlations_mu);
    w.noted.clear();
    w.noted_graphs.clear();
  }
  std::lock_guard<std::mutex> lock(w.mu);
  w.open = false;
}

// The records of the launches `wanted` (their kernels ended), flushed unforced
// while they can come that way: a forced flush hands over a buffer with the
// records of kernels still running too (a later pending call's, queued
// behind this one's), which come without timestamps and never again, so
// that call would fail. Unforced, CUPTI returns only buffers whose records
// are complete. Forced after kUnforcedFlushWait (a later kernel still
// running by then: that call fails and its key is timed at a later call).
// A call that launched nothing (a view) wants no record, and a call whose
// records an earlier call's flush brought needs none (unless it launched a
// graph, whose kernels share one id): nothing is flushed.
void Cupti::flush_records_of(const std::unordered_set<uint32_t>& wanted, TimingResult& res) {
  constexpr auto kUnforcedFlushWait = std::chrono::milliseconds(50);
  if (wanted.empty()) return;
  Window& w = window();
  const auto deadline = std::chrono::steady_clock::now() + kUnforcedFlushWait;
  auto all_arrived = [&] {
    std::unordered_set<uint32_t> arrived;
    std::lock_guard<std::mutex> lock(w.mu);
    for (const KernelLaunch& k : w.records)
      if (wanted.count(k.correlation)) arrived.insert(k.correlation);
    return arrived.size() == wanted.size();
  };
  bool graph = false;  // a graph's kernels share its launch's id: one of them arrived says nothing of the others
  {
    std::lock_guard<std::mutex> lock(w.correlations_mu);
    for (uint32_t id : wanted) graph = graph || w.noted_graphs.count(id);
  }
  if (!graph && all_arrived()) return;
  for (;;) {
    api_->ActivityFlushAll(0);
    ++res.flushes;
    if (all_arrived()) return;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  api_->ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  ++res.flushes;
  res.forced_flush = true;
}

TimingResult Cupti::end_timing(const std::vector<uint32_t>& own, const std::function<bool()>& ended) {
  Window& w = window();
  TimingResult res;
  if (ended && !ended()) res.reason = "the op's stream did not reach the call's end (error, or 5 s at exit)";
  const std::unordered_set<uint32_t> ids(own.begin(), own.end());
  const auto reading = std::chrono::steady_clock::now();
  flush_records_of(ids, res);
  res.records_wait_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - reading).count();
  std::vector<KernelLaunch> mine;
  {
    std::lock_guard<std::mutex> lock(w.mu);
    auto others = std::stable_partition(w.records.begin(), w.records.end(),
                                        [&](const KernelLaunch& k) { return !ids.count(k.correlation); });
    std::move(others, w.records.end(), std::back_inserter(mine));
    w.records.erase(others, w.records.end());
  }
  {
    std::lock_guard<std::mutex> lock(w.correlations_mu);
    for (uint32_t id : own) w.noted.erase(id), w.noted_graphs.erase(id);
  }
  {
    std::lock_guard<std::mutex> session(w.session_mu);
    if (!own.empty() && mine.empty()) w.timing_taken_over = true;
    if (w.timing_pending > 0 && --w.timing_pending == 0) end_timing_session();
  }
  decide_timing(std::move(mine), own, res);
  return res;
}

}  // namespace lingprobe::gpu
