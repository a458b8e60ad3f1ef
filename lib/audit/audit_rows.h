// The coverage audit's report as JSON, row by row: a signature's row (calls,
// FLOPs, evidence, host and kernel time), a stage's totals, and the coverage
// of a group of rows by snapshots and counters (by signatures, calls, FLOPs
// and measured time).
#pragma once

#include <string>
#include <vector>

#include "audit/audit_run.h"
#include "format/json_value.h"

namespace lingprobe::audit {

// A whole number as an integer (FLOP totals beyond 2^53 stay exact), else a float.
format::JsonValue json_number(long double x);

format::JsonValue coverage_json(const std::vector<const Signature*>& group);
format::JsonValue row_json(const Signature& s);
format::JsonValue stage_json(const std::string& stage, const std::vector<const Signature*>& group);

}  // namespace lingprobe::audit
