#include "gpu/cupti_profiler.h"

#include "gpu/cupti_api.h"
#include "gpu/cupti_window.h"

#include "format/scope_guard.h"

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_set>
#include <vector>

namespace lingprobe::gpu {

Cupti* Cupti::get(std::string* error) {
  static std::mutex mu;
  static Cupti* cupti = nullptr;
  static std::string load_error;
  std::lock_guard<std::mutex> lock(mu);
  if (!cupti && load_error.empty()) {
    auto* c = new Cupti;
    if (c->load(load_error)) {
      cupti = c;
      g_api = c->api_;
    } else {
      delete c;
    }
  }
  if (!cupti && error) *error = load_error;
  return cupti;
}

Cupti* Cupti::with_api(Api* api) {
  auto* c = new Cupti;
  c->api_ = api;
  g_api = api;
  return c;
}

bool Cupti::subscriber_held_elsewhere() {
  CUpti_SubscriberHandle s = nullptr;
  const CUptiResult r = api_->Subscribe(&s, on_driver_api, nullptr);
  if (r == CUPTI_SUCCESS) {
    api_->Unsubscribe(s);
    return false;
  }
  return r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
}

namespace {

constexpr size_t kMaxRanges = 256;

// The counter data image and the range configuration of an enabled window: auto range, kernel replay.
format::Status configure_range(const Cupti& cupti, Cupti::Api* api_, Window& w, const MetricSet& set) {
  std::vector<const char*> names;
  for (const auto& m : set.metrics) names.push_back(m.c_str());
  auto size =
      params<CUpti_RangeProfiler_GetCounterDataSize_Params>(CUpti_RangeProfiler_GetCounterDataSize_Params_STRUCT_SIZE);
  size.pRangeProfilerObject = w.object;
  size.pMetricNames = names.data();
  size.numMetrics = names.size();
  size.maxNumOfRanges = kMaxRanges;
  size.maxNumRangeTreeNodes = kMaxRanges;
  if (CUptiResult r = api_->RangeGetCounterDataSize(&size); r != CUPTI_SUCCESS)
    return {code_of(r), "counter data size: " + cupti.describe(r)};
  w.counter_data.assign(size.counterDataSize, 0);
  auto init = params<CUpti_RangeProfiler_CounterDataImage_Initialize_Params>(
      CUpti_RangeProfiler_CounterDataImage_Initialize_Params_STRUCT_SIZE);
  init.pRangeProfilerObject = w.object;
  init.counterDataSize = w.counter_data.size();
  init.pCounterData = w.counter_data.data();
  if (CUptiResult r = api_->RangeCounterDataImageInitialize(&init); r != CUPTI_SUCCESS)
    return {code_of(r), "counter data image: " + cupti.describe(r)};
  auto config = params<CUpti_RangeProfiler_SetConfig_Params>(CUpti_RangeProfiler_SetConfig_Params_STRUCT_SIZE);
  config.pRangeProfilerObject = w.object;
  config.configSize = set.config_image.size();
  config.pConfig = set.config_image.data();
  config.counterDataImageSize = w.counter_data.size();
  config.pCounterDataImage = w.counter_data.data();
  config.range = CUPTI_AutoRange;
  config.replayMode = CUPTI_KernelReplay;
  config.maxRangesPerPass = kMaxRanges;
  config.numNestingLevels = 1;
  config.minNestingLevel = 1;
  config.passIndex = 0;
  config.targetNestingLevel = 1;
  if (CUptiResult r = api_->RangeSetConfig(&config); r != CUPTI_SUCCESS)
    return {code_of(r), "cuptiRangeProfilerSetConfig: " + cupti.describe(r)};
  return format::Status::Ok();
}

}  // namespace

format::Status Cupti::begin_window(void* ctx, void* stream, const MetricSet& set, bool unguarded) {
  disarm_timing_activity();  // the window enables the kind with its own records (launch attributes), then disables it
  Window& w = window();
  {
    std::lock_guard<std::mutex> lock(w.mu);
    if (w.open) return {format::StatusCode::kFailed, "another window is open"};
    w.open = true;
    w.records.clear();
    w.dropped_records = 0;
  }
  w.timing.store(false);
  // Each step's undo is declared right after it; on a failure they run in reverse order (scope guards).
  format::ScopeGuard not_open([&] {
    release_held_launches(w);
    std::lock_guard<std::mutex> lock(w.mu);
    w.open = false;
  });
  w.ctx = static_cast<CUcontext>(ctx);
  w.set = &set;
  w.stopped.store(false);
  w.graph_launched.store(false);
  w.owner.store(std::this_thread::get_id());
  w.launches_held.store(0);
  w.hold_timeouts.store(0);
  {
    std::lock_guard<std::mutex> lock(w.closed_mu);
    w.closed = false;
  }
  if (api_->GetContextId(w.ctx, &w.context_id) != CUPTI_SUCCESS) w.context_id = 0;
  if (api_->GetStreamId(w.ctx, static_cast<CUstream>(stream), &w.stream_id) != CUPTI_SUCCESS) w.stream_id = 0;
  // The launch guard first: without it other threads' launches would run under kernel replay.
  w.subscriber = nullptr;
  if (const CUptiResult r = api_->Subscribe(&w.subscriber, on_driver_api, nullptr); r != CUPTI_SUCCESS) {
    w.subscriber = nullptr;
    if (!unguarded)
      return {format::StatusCode::kHeld, "CUPTI's callback subscriber is held by another tool (" + describe(r) + ")"};
  }
  format::ScopeGuard unsubscribed([&] {
    if (w.subscriber) api_->Unsubscribe(w.subscriber);
    w.subscriber = nullptr;
  });
  auto enable = params<CUpti_RangeProfiler_Enable_Params>(CUpti_RangeProfiler_Enable_Params_STRUCT_SIZE);
  enable.ctx = w.ctx;
  if (CUptiResult r = api_->RangeEnable(&enable); r != CUPTI_SUCCESS)
    return {code_of(r), "cuptiRangeProfilerEnable: " + describe(r) + " (" + std::to_string(r) + ")"};
  w.object = enable.pRangeProfilerObject;
  format::ScopeGuard disabled([&] {
    auto d = params<CUpti_RangeProfiler_Disable_Params>(CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE);
    d.pRangeProfilerObject = w.object;
    api_->RangeDisable(&d);
    w.object = nullptr;
  });
  if (format::Status s = configure_range(*this, api_, w, set); !s.ok()) return s;
  // Launch attributes, for this window only (the callbacks are process-global:
  // registered again each window, as Kineto does at each session).
  api_->ActivityRegisterCallbacks(buffer_requested, buffer_completed);
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.collecting = true;
  }
  api_->ActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  format::ScopeGuard activity_off([&] {
    api_->ActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    release_held_launches(w);  // before the unsubscribe, as at the window's end
  });
  if (w.subscriber)
    for (CUpti_CallbackId cbid : kLaunchCallbacks)
      api_->EnableCallback(1, w.subscriber, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
  auto start = params<CUpti_RangeProfiler_Start_Params>(CUpti_RangeProfiler_Start_Params_STRUCT_SIZE);
  start.pRangeProfilerObject = w.object;
  if (CUptiResult r = api_->RangeStart(&start); r != CUPTI_SUCCESS)
    return {code_of(r), "cuptiRangeProfilerStart: " + describe(r)};
  activity_off.dismiss();
  disabled.dismiss();
  unsubscribed.dismiss();
  not_open.dismiss();
  return format::Status::Ok();
}

// The metric values of every range in a decoded counter data image, into
// res.values; res.reason says why not.
void Cupti::evaluate_ranges(const std::vector<uint8_t>& counter_data, const std::vector<std::string>& metrics,
                            WindowResult& res) {
  auto info =
      params<CUpti_RangeProfiler_GetCounterDataInfo_Params>(CUpti_RangeProfiler_GetCounterDataInfo_Params_STRUCT_SIZE);
  info.pCounterDataImage = counter_data.data();
  info.counterDataImageSize = counter_data.size();
  if (CUptiResult r = api_->RangeGetCounterDataInfo(&info); r != CUPTI_SUCCESS) res.reason = "ranges: " + describe(r);
  res.ranges = info.numTotalRanges;
  std::vector<const char*> names;
  for (const auto& m : metrics) names.push_back(m.c_str());
  std::lock_guard<std::mutex> lock(host_mu_);
  for (size_t i = 0; res.reason.empty() && i < res.ranges; ++i) {
    std::vector<double> values(names.size(), 0.0);
    auto eval = params<CUpti_Profiler_Host_EvaluateToGpuValues_Params>(
        CUpti_Profiler_Host_EvaluateToGpuValues_Params_STRUCT_SIZE);
    eval.pHostObject = static_cast<CUpti_Profiler_Host_Object*>(host_object_);
    eval.pCounterDataImage = counter_data.data();
    eval.counterDataImageSize = counter_data.size();
    eval.rangeIndex = i;
    eval.ppMetricNames = names.data();
    eval.numMetrics = names.size();
    eval.pMetricValues = values.data();
    if (CUptiResult r = api_->HostEvaluateToGpuValues(&eval); r != CUPTI_SUCCESS)
      res.reason = "evaluating range " + std::to_string(i) + ": " + describe(r);
    res.values.push_back(std::move(values));
  }
}

WindowResult Cupti::end_window(const std::function<bool()>& synchronize) {
  Window& w = window();
  WindowResult res;
  res.launch_guard = w.subscriber != nullptr;
  if (std::lock_guard<std::mutex> lock(w.stop_mu); !w.stopped.exchange(true)) {
    auto stop = params<CUpti_RangeProfiler_Stop_Params>(CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE);
    stop.pRangeProfilerObject = w.object;
    if (CUptiResult r = api_->RangeStop(&stop); r != CUPTI_SUCCESS)
      res.reason = "cuptiRangeProfilerStop: " + describe(r);
    else if (!stop.isAllPassSubmitted)
      res.reason = "not every replay pass was submitted";
  }
  if (synchronize && !synchronize() && res.reason.empty()) res.reason = "synchronizing the context failed";
  if (res.reason.empty()) {
    auto decode = params<CUpti_RangeProfiler_DecodeData_Params>(CUpti_RangeProfiler_DecodeData_Params_STRUCT_SIZE);
    decode.pRangeProfilerObject = w.object;
    if (CUptiResult r = api_->RangeDecodeData(&decode); r != CUPTI_SUCCESS) res.reason = "decode: " + describe(r);
    res.dropped_ranges = decode.numOfRangeDropped;
  }
  if (res.reason.empty()) evaluate_ranges(w.counter_data, w.set->metrics, res);
  auto disable = params<CUpti_RangeProfiler_Disable_Params>(CUpti_RangeProfiler_Disable_Params_STRUCT_SIZE);
  disable.pRangeProfilerObject = w.object;
  api_->RangeDisable(&disable);
  w.object = nullptr;

  api_->ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::vector<KernelLaunch> records;
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.collecting = false;
    records.swap(w.records);
  }
  // Ranges but not one launch record: the records went to another client's
  // Activity callbacks, registered during the window (torch.profiler started
  // on another thread). The kind it enabled stays enabled: its trace goes on.
  const bool taken_over = res.reason.empty() && res.ranges > 0 && records.empty();
  // Disabled before the held launches go: their records must not wait in a
  // buffer for the next window's flush.
  if (!taken_over) api_->ActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  release_held_launches(w);  // other threads' launches run now, outside the window
  res.launches_held = w.launches_held.load();
  if (w.subscriber) {  // after the release: no launch is held inside the callback any more
    api_->Unsubscribe(w.subscriber);
    w.subscriber = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.open = false;
  }
  WindowObservations seen;
  seen.records = std::move(records);
  seen.context_id = w.context_id;
  seen.stream_id = w.stream_id;
  seen.graph_launched = w.graph_launched.load();
  seen.hold_timeouts = w.hold_timeouts.load();
  seen.taken_over = taken_over;
  decide_window(std::move(seen), res);
  return res;
}

}  // namespace lingprobe::gpu
