// The sample plan a run followed (LINGPROBE_SAMPLE_PLAN): every process's
// plan record joined. A planned key counts as unmet only when no process of
// the run met it (with claims, any rank may have sampled it).
#pragma once

#include <string>
#include <vector>

#include "audit/metadata_reader.h"
#include "format/json_value.h"

namespace lingprobe::audit {

// `sampling.plan` of coverage_audit.json; null when no process had a plan.
format::JsonValue plan_json(const std::vector<PlanRecord>& records);
// "### Sample plan" for summary.md; "" when no process had a plan.
std::string plan_markdown(const std::vector<PlanRecord>& records, size_t rows);

}  // namespace lingprobe::audit
