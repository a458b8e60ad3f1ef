// Timing windows (cupti_profiler.h: begin_timing, end_timing): CUPTI
// Activity's kernel records of one op call, without the range profiler.
// The kernels run as they would without lingprobe (nothing replayed, no
// memory saved and restored, no other thread held), so their durations are
// the ones torch.profiler's trace shows for the same call.
#include "gpu/cupti_profiler.h"

#include "gpu/cupti_api.h"
#include "gpu/cupti_window.h"

#include "format/scope_guard.h"

#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace lingprobe::gpu {

format::Status Cupti::begin_timing(void* ctx) {
  Window& w = window();
  {
    std::lock_guard<std::mutex> lock(w.mu);
    if (w.open) return {format::StatusCode::kFailed, "another window is open"};
    w.open = true;
    w.records.clear();
  }
  {
    std::lock_guard<std::mutex> lock(w.correlations_mu);
    w.own_correlations.clear();
  }
  format::ScopeGuard not_open([&] {
    w.timing.store(false);
    std::lock_guard<std::mutex> lock(w.mu);
    w.open = false;
  });
  w.ctx = static_cast<CUcontext>(ctx);
  w.owner.store(std::this_thread::get_id());
  w.timing.store(true);  // before the callback can run: nothing is held, the owner's launches are noted
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
  api_->ActivityRegisterCallbacks(buffer_requested, buffer_completed);
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.collecting = true;
  }
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

TimingResult Cupti::end_timing(const std::function<bool()>& synchronize) {
  Window& w = window();
  TimingResult res;
  if (synchronize && !synchronize()) res.reason = "synchronizing the context failed";
  api_->ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::vector<KernelLaunch> records;
  std::vector<uint32_t> own;
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.collecting = false;
    records.swap(w.records);
  }
  {
    std::lock_guard<std::mutex> lock(w.correlations_mu);
    own.swap(w.own_correlations);
  }
  // Another client that registered its Activity callbacks during the window
  // keeps the kind enabled (as at a counter window's end): its trace goes on.
  const bool taken_over = !own.empty() && records.empty();
  if (!taken_over) api_->ActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (w.subscriber) api_->Unsubscribe(w.subscriber);
  w.subscriber = nullptr;
  w.timing.store(false);
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.open = false;
  }
  decide_timing(std::move(records), own, res);
  return res;
}

}  // namespace lingprobe::gpu
