// The stage clock's trigger (GPU time per stage, lib/gpu/stage_clock): after
// a change of a thread's stage, its first op with a CUDA tensor begins the
// stage's interval on that tensor's current stream, before the op runs.
#pragma once

#include "capture/torch_guard.h"

#include <ATen/record_function.h>

#include "capture/device_access.h"
#include "capture/thread_state.h"

namespace lingprobe::capture {

// An op without a CUDA tensor leaves the interval to the next op, up to
// kStageClockTries ops: a CPU-only stage, or process, stops paying for the
// scan, and that stage run goes unmeasured.
constexpr uint32_t kStageClockTries = 64;

void begin_stage_interval(StageTiming& clock, ThreadState& ts, const at::RecordFunction& fn, StageId stage);

}  // namespace lingprobe::capture
