// LINGPROBE_SAMPLE_PLAN=RUN_DIR: sample only the input keys that dominated an
// earlier run, until the budgets are spent (the nsys-then-ncu workflow in one
// tool). The earlier run's audit (RUN_DIR/reports/coverage_audit.json) gives
// each signature's calls, FLOPs per call and, where counters ran, measured
// kernel time per call. Rows are joined per input key (the signature without
// its output: the sampler's key), ranked by their share of the run's measured
// kernel time where every ranked key was measured, else of its FLOPs, and
// taken in that order while their
// estimated cost fits: the snapshot's tensor bytes against the process's byte
// budget, one counter window (the earlier run's mean, else kDefaultWindowS)
// against the stall budget. A key that fits neither is passed over; a
// smaller one after it may still fit. Keys with neither time nor FLOPs (views,
// copies, set-up) are not planned. Torch-free, no I/O.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/json_value.h"

namespace lingprobe::capture {

struct PlannedKey {
  std::string input_sha, op, stage;
  double share = 0;             // of the earlier run's measured kernel time, or of its FLOPs (SamplePlan::basis)
  uint64_t snapshot_bytes = 0;  // its tensors' stored bytes, inputs and outputs
};

struct PlanBudgets {
  bool snapshots = false, counters = false;
  uint64_t snapshot_bytes = 0;  // LINGPROBE_SAMPLE_BUDGET_PROCESS
  double stall_seconds = 0;     // LINGPROBE_PROFILE_BUDGET_S
};

struct SamplePlan {
  std::vector<PlannedKey> keys;  // in the order taken
  size_t ranked = 0;             // keys of the earlier run with time or FLOPs
  size_t over_budget = 0;        // of those, passed over: they fitted no budget left
  size_t unranked = 0;           // keys with no FLOP formula left without a share (unmeasured, or FLOPs rank): never
                                 // planned, whatever their time
  double covered_share = 0;      // of the earlier run's FLOPs (or measured time) the plan holds
  std::string basis;             // "measured_time" when every ranked key had counters, else "flops"
};

constexpr double kDefaultWindowS = 1.0;

// The plan from a parsed coverage_audit.json; "" or what is wrong with it.
std::string build_sample_plan(const format::JsonValue& audit, const PlanBudgets& budgets, SamplePlan& out);

}  // namespace lingprobe::capture
