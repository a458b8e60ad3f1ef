// LINGPROBE_SAMPLE_PLAN's wiring: the earlier run's audit read once at start
// and turned into the sampler's plan (capture/sample_plan), and the record
// each process writes at finalize: the plan it followed and the planned keys
// it never met (the audit reports those no process met).
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "api/config.h"
#include "capture/sample_plan.h"

namespace lingprobe::api {

struct LoadedPlan {
  std::string source;  // the coverage_audit.json read
  std::string error;   // why it could not be used ("": none); then no key is planned
  capture::SamplePlan plan;
  std::shared_ptr<const std::set<std::string>> keys;  // the input keys to sample
};

// Null when SAMPLE_PLAN is unset. Never throws; an unreadable or malformed
// plan samples nothing and says so once (stderr, and the plan record).
std::unique_ptr<LoadedPlan> load_sample_plan(const Config& c, bool counters_possible);

// The finalize record: {"kind":"plan", source, basis, keys, ranked, over_budget, covered_share, unmet:[...]}.
std::string plan_record(const LoadedPlan& plan, const std::vector<std::string>& unmet);

}  // namespace lingprobe::api
