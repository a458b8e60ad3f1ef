// The stage's rows rolled up per operator (`aten.conv2d`, every overload and
// signature of it together): the answer to "which operators dominate", where
// the rows answer "which calls". Host time from the call records, FLOPs from
// the formulas (signatures without one counted apart), kernel time where the
// counters or the timed call measured it.
#pragma once

#include <string>
#include <vector>

#include "audit/audit_run.h"
#include "format/json_value.h"

namespace lingprobe::audit {

// "aten.conv2d.default" -> "aten.conv2d": the operator without its overload.
std::string operator_of(const std::string& op);
// "aten.uniform_" -> "aten::uniform_": an operator as its schema names it (as op selections and
// format::result_by_definition take it).
std::string schema_name(const std::string& dotted);

// One object per operator, the largest first (by host time where the stage has call records, else by FLOPs, then
// by calls): operator, signatures, calls, host_time_us and host_time_share (null without call records), flops
// (null where no signature of it has a formula), signatures_without_flop_formula, flop_share, kernel_time_us and
// signatures_with_kernel_time (measured signatures only; null where none is).
format::JsonValue operators_json(const std::vector<const Signature*>& group);

// The table for summary.md from operators_json: the first `limit` operators, then one line for the rest.
std::string operators_markdown(const format::JsonValue& operators, size_t limit);

}  // namespace lingprobe::audit
