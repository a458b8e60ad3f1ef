// A signature as one short line for people: `op(shape, shape, scalar)`, the
// tensors by their shapes, anything else as its canonical JSON. Shared by the
// audit's summary, the trace's slices and the diff.
#pragma once

#include <string>

#include "format/json_value.h"

namespace lingprobe::audit {

// `signature`: a parsed signature (SPEC section 3).
std::string short_signature(const format::JsonValue& signature);

}  // namespace lingprobe::audit
