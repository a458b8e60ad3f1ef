// The math settings that decide which kernels a call runs, recorded with a
// sampled call so that replay runs the same ones: at::globalContext()'s
// (TF32, reduced-precision reductions, cuDNN and SDPA backends, determinism,
// threads) and the calling thread's autocast state.
#pragma once

#include "capture/torch_guard.h"

#include "format/json_value.h"
#include "format/pickle.h"

namespace lingprobe::capture {

// The math settings that change which GEMM, conv and attention kernels run,
// as text (replay applies them back): at::globalContext()'s, and the
// calling thread's autocast state (read at sampled calls only).
format::PickleValue current_math_policy();
// The policy as a JSON object (identity.json).
format::JsonValue policy_json(const format::PickleValue& policy);

}  // namespace lingprobe::capture
