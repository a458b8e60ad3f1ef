// What the recorder does with a call the sampler chose: it hands the call to
// SampledCallHooks before the op runs (start callback) and after it (end
// callback), on the calling thread. api wires the hooks (snapshots and
// inline counters) so that the recorder knows nothing of either; the
// hooks finish the key in the sampler when their work is done (possibly
// later, on a writer thread).
#pragma once

#include "capture/torch_guard.h"

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>

#include "capture/sampler.h"
#include "capture/stages.h"

namespace lingprobe::capture {

struct SampledCall {
  const c10::FunctionSchema* schema = nullptr;
  c10::ArrayRef<const c10::IValue> inputs;
  const std::string* op_dotted = nullptr;  // "aten.linear.default"
  StageId stage = kUnstaged;
  SampleKey* key = nullptr;
};

class SampledCallHooks {
 public:
  virtual ~SampledCallHooks() = default;
  // A due call that no evidence could come from (meta tensors, a CPU call
  // where only GPU calls are sampled), checked before the key is claimed;
  // CallRefusal::None when the call may be taken.
  virtual CallRefusal refusal(const SampledCall& call) = 0;
  // Before the op. Returns a token for end(), or nullptr when nothing was
  // started (the reason is counted, the key finished in the sampler).
  virtual void* begin(const SampledCall& call) = 0;
  // After the op, with its outputs and the call's signature id and seq.
  virtual void end(void* token, c10::ArrayRef<const c10::IValue> outputs, uint32_t signature_id, uint64_t seq) = 0;
  // The op's end callback will not come (recording restarted mid-call).
  virtual void abandon(void* token) = 0;
};

}  // namespace lingprobe::capture
