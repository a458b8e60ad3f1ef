// Text for people, shared by the audit's summary, the trace's slices and the
// diff: a signature as one short line, `op(bf16[2,3], f32[3], 0.5, alpha=2) -> bf16[2,3]` (tensors
// by their dtype and shape, lists element by element, anything else as its canonical JSON; keyword arguments by
// name; the output after the arrow); a count with its SI
// prefix; and which ops are collectives.
#pragma once

#include <string>
#include <string_view>

#include "format/json_value.h"

namespace lingprobe::audit {

// `signature`: a parsed signature (SPEC section 3).
std::string short_signature(const format::JsonValue& signature);

// 1234567 -> "1.23M" (K, M, G, T, P, E; the sign kept); below 1000 a whole number.
std::string human_count(long double x);

// A time or size for a table cell, its digits by its magnitude: 1234.5 -> "1235", 12.34 -> "12.3", 0.1234 -> "0.123".
std::string short_decimal(double x);

// A c10d collective (dotted op name, "c10d.allreduce_.default", or its
// functional form "_c10d_functional.all_reduce.default"). The recorder times
// these whatever the op selection.
bool is_collective_op(std::string_view dotted_op);

}  // namespace lingprobe::audit
