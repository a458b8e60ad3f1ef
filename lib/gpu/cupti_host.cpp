// CUPTI loaded at run time and its host side: the metric set's config image
// and pass count (no device), the device's chip and counter availability.
#include "gpu/cupti_profiler.h"

#include <dlfcn.h>

#include <mutex>
#include <type_traits>

#include "gpu/cupti_api.h"

namespace lingprobe::gpu {

const std::vector<std::string>& seed_metrics() {
  static const std::vector<std::string> m = {
      "gpu__time_duration.sum",
      "sm__throughput.avg.pct_of_peak_sustained_elapsed",
      "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
      "lts__throughput.avg.pct_of_peak_sustained_elapsed",
      "sm__warps_active.avg.pct_of_peak_sustained_active",
      "dram__bytes_read.sum",
      "dram__bytes_write.sum",
      "dram__bytes.sum.per_second",
  };
  return m;
}

bool Cupti::load(std::string& error) {
  // The process's copy first (torch's Kineto loaded one), then the loader's search, then the toolkit's.
  void* lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_NOLOAD);
  for (const char* candidate : {"libcupti.so.13", "libcupti.so", "/usr/local/cuda/lib64/libcupti.so.13",
                                "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"})
    if (!lib) lib = dlopen(candidate, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    error = "libcupti.so.13 not found (install the CUDA toolkit's CUPTI, or set LD_LIBRARY_PATH)";
    return false;
  }
  auto* api = new Api;
  bool ok = true;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn && ok) {
      ok = false;
      error = std::string("libcupti lacks ") + name + " (CUPTI 13 is needed)";
    }
  };
  sym(api->GetResultString, "cuptiGetResultString");
  sym(api->ProfilerInitialize, "cuptiProfilerInitialize");
  sym(api->DeviceGetChipName, "cuptiDeviceGetChipName");
  sym(api->GetCounterAvailability, "cuptiProfilerGetCounterAvailability");
  sym(api->HostInitialize, "cuptiProfilerHostInitialize");
  sym(api->HostDeinitialize, "cuptiProfilerHostDeinitialize");
  sym(api->HostConfigAddMetrics, "cuptiProfilerHostConfigAddMetrics");
  sym(api->HostGetConfigImageSize, "cuptiProfilerHostGetConfigImageSize");
  sym(api->HostGetConfigImage, "cuptiProfilerHostGetConfigImage");
  sym(api->HostGetNumOfPasses, "cuptiProfilerHostGetNumOfPasses");
  sym(api->HostEvaluateToGpuValues, "cuptiProfilerHostEvaluateToGpuValues");
  sym(api->RangeEnable, "cuptiRangeProfilerEnable");
  sym(api->RangeDisable, "cuptiRangeProfilerDisable");
  sym(api->RangeGetCounterDataSize, "cuptiRangeProfilerGetCounterDataSize");
  sym(api->RangeCounterDataImageInitialize, "cuptiRangeProfilerCounterDataImageInitialize");
  sym(api->RangeSetConfig, "cuptiRangeProfilerSetConfig");
  sym(api->RangeStart, "cuptiRangeProfilerStart");
  sym(api->RangeStop, "cuptiRangeProfilerStop");
  sym(api->RangeDecodeData, "cuptiRangeProfilerDecodeData");
  sym(api->RangeGetCounterDataInfo, "cuptiRangeProfilerGetCounterDataInfo");
  sym(api->ActivityRegisterCallbacks, "cuptiActivityRegisterCallbacks");
  sym(api->ActivityEnable, "cuptiActivityEnable");
  sym(api->ActivityDisable, "cuptiActivityDisable");
  sym(api->ActivityFlushAll, "cuptiActivityFlushAll");
  sym(api->ActivityGetNextRecord, "cuptiActivityGetNextRecord");
  sym(api->GetContextId, "cuptiGetContextId");
  sym(api->GetStreamId, "cuptiGetStreamId");
  sym(api->Subscribe, "cuptiSubscribe");
  sym(api->Unsubscribe, "cuptiUnsubscribe");
  sym(api->EnableCallback, "cuptiEnableCallback");
  sym(api->GetVersion, "cuptiGetVersion");
  if (!ok) {
    delete api;
    return false;
  }
  api_ = api;
  return true;
}

int Cupti::version() {
  uint32_t v = 0;
  return api_->GetVersion(&v) == CUPTI_SUCCESS ? static_cast<int>(v) : -1;
}

std::string Cupti::describe(int r) const {
  const char* s = nullptr;
  if (api_ && api_->GetResultString(static_cast<CUptiResult>(r), &s) == CUPTI_SUCCESS && s) return s;
  return "CUPTI error " + std::to_string(r);
}

format::Status Cupti::build_metric_set(const std::string& chip, const std::vector<std::string>& metrics,
                                       const std::vector<uint8_t>& availability, MetricSet& out) {
  std::lock_guard<std::mutex> lock(host_mu_);
  if (host_object_ && (host_chip_ != chip || host_metrics_ != metrics)) {
    auto d = params<CUpti_Profiler_Host_Deinitialize_Params>(CUpti_Profiler_Host_Deinitialize_Params_STRUCT_SIZE);
    d.pHostObject = static_cast<CUpti_Profiler_Host_Object*>(host_object_);
    api_->HostDeinitialize(&d);
    host_object_ = nullptr;
  }
  if (!host_object_) {
    auto init = params<CUpti_Profiler_Host_Initialize_Params>(CUpti_Profiler_Host_Initialize_Params_STRUCT_SIZE);
    init.profilerType = CUPTI_PROFILER_TYPE_RANGE_PROFILER;
    init.pChipName = chip.c_str();
    init.pCounterAvailabilityImage = availability.empty() ? nullptr : availability.data();
    if (CUptiResult r = api_->HostInitialize(&init); r != CUPTI_SUCCESS)
      return {code_of(r), "cuptiProfilerHostInitialize(" + chip + "): " + describe(r)};
    host_object_ = init.pHostObject;
    host_chip_ = chip;
    host_metrics_ = metrics;
    std::vector<const char*> names;
    for (const auto& m : metrics) names.push_back(m.c_str());
    auto add =
        params<CUpti_Profiler_Host_ConfigAddMetrics_Params>(CUpti_Profiler_Host_ConfigAddMetrics_Params_STRUCT_SIZE);
    add.pHostObject = init.pHostObject;
    add.ppMetricNames = names.data();
    add.numMetrics = names.size();
    if (CUptiResult r = api_->HostConfigAddMetrics(&add); r != CUPTI_SUCCESS) {
      host_metrics_.clear();
      return {code_of(r), "metrics not accepted on " + chip + ": " + describe(r)};
    }
  }
  auto size =
      params<CUpti_Profiler_Host_GetConfigImageSize_Params>(CUpti_Profiler_Host_GetConfigImageSize_Params_STRUCT_SIZE);
  size.pHostObject = static_cast<CUpti_Profiler_Host_Object*>(host_object_);
  if (CUptiResult r = api_->HostGetConfigImageSize(&size); r != CUPTI_SUCCESS)
    return {code_of(r), "config image size: " + describe(r)};
  out.chip = chip;
  out.metrics = metrics;
  out.config_image.assign(size.configImageSize, 0);
  auto image = params<CUpti_Profiler_Host_GetConfigImage_Params>(CUpti_Profiler_Host_GetConfigImage_Params_STRUCT_SIZE);
  image.pHostObject = size.pHostObject;
  image.configImageSize = out.config_image.size();
  image.pConfigImage = out.config_image.data();
  if (CUptiResult r = api_->HostGetConfigImage(&image); r != CUPTI_SUCCESS)
    return {code_of(r), "config image: " + describe(r)};
  auto passes =
      params<CUpti_Profiler_Host_GetNumOfPasses_Params>(CUpti_Profiler_Host_GetNumOfPasses_Params_STRUCT_SIZE);
  passes.configImageSize = out.config_image.size();
  passes.pConfigImage = out.config_image.data();
  if (CUptiResult r = api_->HostGetNumOfPasses(&passes); r != CUPTI_SUCCESS)
    return {code_of(r), "passes: " + describe(r)};
  out.passes = passes.numOfPasses;
  return format::Status::Ok();
}

format::Status Cupti::device_chip(int device, std::string& chip) {
  auto init = params<CUpti_Profiler_Initialize_Params>(CUpti_Profiler_Initialize_Params_STRUCT_SIZE);
  if (CUptiResult r = api_->ProfilerInitialize(&init); r != CUPTI_SUCCESS)
    return {code_of(r), "cuptiProfilerInitialize: " + describe(r)};
  auto p = params<CUpti_Device_GetChipName_Params>(CUpti_Device_GetChipName_Params_STRUCT_SIZE);
  p.deviceIndex = static_cast<size_t>(device);
  if (CUptiResult r = api_->DeviceGetChipName(&p); r != CUPTI_SUCCESS || !p.pChipName)
    return {code_of(r), "cuptiDeviceGetChipName: " + describe(r)};
  chip = p.pChipName;
  return format::Status::Ok();
}

format::Status Cupti::counter_availability(void* ctx, std::vector<uint8_t>& image) {
  auto p =
      params<CUpti_Profiler_GetCounterAvailability_Params>(CUpti_Profiler_GetCounterAvailability_Params_STRUCT_SIZE);
  p.ctx = static_cast<CUcontext>(ctx);
  if (CUptiResult r = api_->GetCounterAvailability(&p); r != CUPTI_SUCCESS)
    return {code_of(r), "counter availability: " + describe(r)};
  image.assign(p.counterAvailabilityImageSize, 0);
  p.pCounterAvailabilityImage = image.data();
  if (CUptiResult r = api_->GetCounterAvailability(&p); r != CUPTI_SUCCESS)
    return {code_of(r), "counter availability: " + describe(r)};
  return format::Status::Ok();
}

}  // namespace lingprobe::gpu
