// The window around one sampled call (capture/snapshot_capture): a counter
// window (CUPTI's range profiler) or a timing window (CUPTI Activity alone,
// the key's next call: see capture/sampler's kTiming), opened on the op's
// CUDA device and current stream just before the op, unless the call cannot
// have one now or ever. No torch in the header.
#pragma once

#include <memory>
#include <string>

#include "capture/device_access.h"
#include "capture/evidence_budgets.h"
#include "capture/sampled_call.h"
#include "capture/sampler.h"

namespace lingprobe::capture {

struct CallWindow {
  std::unique_ptr<CounterWindow> window;  // null: refused
  std::string refusal;                    // why not (a reason of the refusal records)
  bool settled = false;                   // no later call of the key could have one either
  int device = -1;                        // the CUDA device it opened on
};

// Refused for a collective (a replayed NCCL kernel would wait for its peers
// forever), a spent window budget (set-up calls: their share), another
// RecordFunction consumer on this thread (torch.profiler: its Activity
// callbacks must not be replaced mid-session), no CUDA tensor or device
// (settled on a machine without a GPU), a stream being captured, or the
// device's own refusal. A refused attempt's wait is charged to the budget.
CallWindow open_call_window(const SampledCall& call, bool timing, bool setup, bool gpu_on_machine,
                            EvidenceBudgets& budgets, DeviceAccess& device);

// Why a due call is refused before it is taken (sampler.h: CallRefusal): it
// runs on meta or fake tensors (no storage), on the CPU where only GPU calls
// are sampled, or, due for timing only (`timing_only`), within
// DeviceAccess::settling_after_window of a counter window's call on its GPU.
CallRefusal early_refusal(const SampledCall& call, bool gpu_calls_only, bool timing_only, DeviceAccess* device);

// Whether a window's refusal `reason` settles the key: no later call could have counters (nor timing) either.
bool window_refusal_settles(const std::string& reason);

}  // namespace lingprobe::capture
