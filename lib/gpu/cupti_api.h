// Internal to gpu's CUPTI files (cupti_host.cpp, cupti_profiler.cpp): the
// CUPTI functions lingprobe calls, resolved from the process's libcupti at
// run time (no link-time dependency), and two helpers for their parameter
// structs and their results.
#pragma once

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_range_profiler.h>
#include <cupti_target.h>

#include <cstring>

#include "format/status.h"
#include "gpu/cupti_profiler.h"

namespace lingprobe::gpu {

struct Cupti::Api {
  CUptiResult (*GetResultString)(CUptiResult, const char**);
  CUptiResult (*ProfilerInitialize)(CUpti_Profiler_Initialize_Params*);
  CUptiResult (*DeviceGetChipName)(CUpti_Device_GetChipName_Params*);
  CUptiResult (*GetCounterAvailability)(CUpti_Profiler_GetCounterAvailability_Params*);
  CUptiResult (*HostInitialize)(CUpti_Profiler_Host_Initialize_Params*);
  CUptiResult (*HostDeinitialize)(CUpti_Profiler_Host_Deinitialize_Params*);
  CUptiResult (*HostConfigAddMetrics)(CUpti_Profiler_Host_ConfigAddMetrics_Params*);
  CUptiResult (*HostGetConfigImageSize)(CUpti_Profiler_Host_GetConfigImageSize_Params*);
  CUptiResult (*HostGetConfigImage)(CUpti_Profiler_Host_GetConfigImage_Params*);
  CUptiResult (*HostGetNumOfPasses)(CUpti_Profiler_Host_GetNumOfPasses_Params*);
  CUptiResult (*HostEvaluateToGpuValues)(CUpti_Profiler_Host_EvaluateToGpuValues_Params*);
  CUptiResult (*RangeEnable)(CUpti_RangeProfiler_Enable_Params*);
  CUptiResult (*RangeDisable)(CUpti_RangeProfiler_Disable_Params*);
  CUptiResult (*RangeGetCounterDataSize)(CUpti_RangeProfiler_GetCounterDataSize_Params*);
  CUptiResult (*RangeCounterDataImageInitialize)(CUpti_RangeProfiler_CounterDataImage_Initialize_Params*);
  CUptiResult (*RangeSetConfig)(CUpti_RangeProfiler_SetConfig_Params*);
  CUptiResult (*RangeStart)(CUpti_RangeProfiler_Start_Params*);
  CUptiResult (*RangeStop)(CUpti_RangeProfiler_Stop_Params*);
  CUptiResult (*RangeDecodeData)(CUpti_RangeProfiler_DecodeData_Params*);
  CUptiResult (*RangeGetCounterDataInfo)(CUpti_RangeProfiler_GetCounterDataInfo_Params*);
  CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
  CUptiResult (*ActivityDisable)(CUpti_ActivityKind);
  CUptiResult (*ActivityFlushAll)(uint32_t);
  CUptiResult (*ActivityGetNextRecord)(uint8_t*, size_t, CUpti_Activity**);
  CUptiResult (*GetContextId)(CUcontext, uint32_t*);
  CUptiResult (*GetStreamId)(CUcontext, CUstream, uint32_t*);
  CUptiResult (*Subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
  CUptiResult (*Unsubscribe)(CUpti_SubscriberHandle);
  CUptiResult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId);
  CUptiResult (*GetVersion)(uint32_t*);
};

// A CUPTI parameter struct, zeroed, with its size set.
template <typename P>
P params(size_t size) {
  P p;
  std::memset(&p, 0, sizeof p);
  p.structSize = size;
  return p;
}

// CUPTI's answer as a code: whether counters can ever be read here, or later.
inline format::StatusCode code_of(CUptiResult r) {
  if (r == CUPTI_ERROR_HARDWARE_BUSY) return format::StatusCode::kBusy;
  if (r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES || r == CUPTI_ERROR_NOT_SUPPORTED)
    return format::StatusCode::kUnsupported;
  return format::StatusCode::kFailed;
}

}  // namespace lingprobe::gpu
