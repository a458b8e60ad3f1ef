#include "capture/stage_clock_trigger.h"

#include <optional>

#include "capture/cuda_stream.h"

namespace lingprobe::capture {

void begin_stage_interval(StageTiming& clock, ThreadState& ts, const at::RecordFunction& fn, StageId stage) {
  const uint32_t changes = ts.stages->changes;
  if (!kHasStreamNativeHandle) {  // before torch 2.2 no stream handle: no intervals
    ts.timed_changes = changes;
    return;
  }
  if (ts.timed_seen != changes) ts.timed_seen = changes, ts.timed_tries = 0;
  std::optional<at::Tensor> cuda;
  auto consider = [&cuda](const at::Tensor& t) {
    if (!cuda && t.defined() && t.is_cuda()) cuda = t;
  };
  for (const c10::IValue& v : fn.inputs()) {
    if (v.isTensor())
      consider(v.toTensor());
    else if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList().vec()) consider(t);
    if (cuda) break;
  }
  if (!cuda) {
    if (++ts.timed_tries >= kStageClockTries) ts.timed_changes = changes;
    return;
  }
  ts.timed_changes = changes;
  clock.begin(stage, cuda->get_device(), current_stream_handle(cuda->device()));
}

}  // namespace lingprobe::capture
