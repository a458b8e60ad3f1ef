// The recorder's side of sampling: the sampler's key of a first-seen input,
// and the start of a due call's sample (the hooks take the snapshot and open
// the counter window before the op runs).
#pragma once

#include "capture/torch_guard.h"

#include <ATen/core/ivalue.h>

#include "capture/op_registry.h"
#include "capture/sampled_call.h"
#include "capture/sampler.h"
#include "format/json_value.h"

namespace lingprobe::capture {

// The sampler's key of a first-seen input: the SHA-256 of the canonical
// {"args","kwargs","op","stage"} (the signature without its output).
SampleKey* sample_key(Sampler& sampler, const OpInfo& op, const format::JsonValue& arguments, StageId stage);

// A due call of a sampled key: refused before any claim when nothing could
// come of it, else taken and handed to the hooks (before the op, and before
// t0: the copies are not the op's time). The hooks' token, or nullptr.
void* begin_sample(Sampler& sampler, SampledCallHooks& hooks, SampleKey* k, const OpInfo& op,
                   c10::ArrayRef<const c10::IValue> inputs, StageId stage);

}  // namespace lingprobe::capture
