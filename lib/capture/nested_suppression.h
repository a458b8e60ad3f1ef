// Below a recorded top-level call, RecordFunction is switched off on the
// thread when that pays (recorder.h: NestedSuppression), and back on at the
// call's end. This file holds the decision: whether another callback would
// lose the nested calls, and the learning of an op's nested calls per call.
#pragma once

#include "capture/torch_guard.h"

#include <ATen/record_function.h>

#include "capture/fork_gate.h"
#include "capture/op_registry.h"
#include "capture/thread_state.h"

namespace lingprobe::capture {

// Whether a RecordFunction callback other than `own` would see this thread's
// nested calls: torch.profiler's thread-local callbacks (checked every time),
// or another global one (the execution-trace observer, on-demand Kineto, a
// user's), looked at once per kOtherCallbacksRecheck suppressions of the
// thread (docs/USAGE.md).
bool other_callbacks(ThreadState* ts, at::RecordFunctionCallback::StartCallback own);

// At the start of a top-level call, after lingprobe's own work: RecordFunction
// off on the thread below it when op->suppress is 1 (always, or auto and
// learned) and no other callback would miss its nested calls.
inline void suppress_below(ThreadState* ts, const at::RecordFunction& fn, OpInfo* op,
                           at::RecordFunctionCallback::StartCallback own) {
  if (op->suppress.load(std::memory_order_relaxed) != 1 || ts->suppressed_rf || other_callbacks(ts, own)) return;
  {
    const ForkGateSection gate;
    at::enableRecordFunction(false);
  }
  ts->suppressed_rf = &fn;
  bump(ts->nested_suppressed);
}

// At the end of a top-level call of an op still learning (auto) whose nested
// calls were observed: adds them; the thread that completes the op's
// kSuppressLearnCalls-th call decides, once, whether to suppress below it
// (at least `min_nested` nested calls per call).
void learn_nested_calls(OpInfo* op, uint32_t nested, uint32_t min_nested);

}  // namespace lingprobe::capture
