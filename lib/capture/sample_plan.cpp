#include "capture/sample_plan.h"

#include <algorithm>
#include <map>

#include "format/signature_fields.h"

namespace lingprobe::capture {

using format::JsonValue;

namespace {

double number(const JsonValue* v) {
  if (!v) return -1;
  if (v->kind() == JsonValue::Kind::Int) return static_cast<double>(v->as_int());
  if (v->kind() == JsonValue::Kind::Float) return v->as_float();
  return -1;
}

struct Ranked {
  PlannedKey key;
  double time_us = 0, flops = 0;
  uint64_t calls = 0;
  bool measured = false;
  bool flops_unknown = false;  // a row of the key has no FLOP formula (flops_per_call null)
};

// The earlier run's mean counter window, or the default.
double mean_window_seconds(const JsonValue& audit) {
  const JsonValue* windows = audit.find("counter_windows");
  const JsonValue* by_rank = windows ? windows->find("by_rank") : nullptr;
  double seconds = 0, n = 0;
  if (by_rank)
    for (const auto& r : by_rank->items())
      seconds += number(r.find("window_seconds_total")), n += number(r.find("windows"));
  return n > 0 && seconds > 0 ? seconds / n : kDefaultWindowS;
}

}  // namespace

std::string build_sample_plan(const JsonValue& audit, const PlanBudgets& budgets, SamplePlan& out) {
  const JsonValue* rows = audit.find("rows");
  if (!rows || rows->kind() != JsonValue::Kind::Array) return "no `rows` (not a coverage_audit.json)";
  std::map<std::string, Ranked> by_key;
  for (const auto& row : rows->items()) {
    const JsonValue* sig = row.find("signature");
    if (!sig || sig->kind() != JsonValue::Kind::Object) return "a row without its `signature`";
    const double calls = std::max(0.0, number(row.find("calls")));
    Ranked& r = by_key[format::input_key_sha256(*sig)];
    r.key.input_sha = format::input_key_sha256(*sig);
    if (const JsonValue* op = sig->find("op")) r.key.op = op->as_string();
    if (const JsonValue* stage = sig->find("stage")) r.key.stage = stage->as_string();
    r.key.snapshot_bytes = std::max(r.key.snapshot_bytes, format::signature_tensor_bytes(*sig));
    r.calls += static_cast<uint64_t>(calls);
    const double f = number(row.find("flops_per_call"));  // < 0: null, no formula
    if (f > 0) r.flops += f * calls;
    if (f < 0) r.flops_unknown = true;
    if (const double t = number(row.find("kernel_time_us_per_call")); t >= 0) r.time_us += t * calls, r.measured = true;
  }
  double total_time = 0, total_flops = 0;
  bool all_measured = true;
  std::vector<Ranked> ranked;
  size_t unranked = 0;  // keys without a FLOP formula left with no share (unmeasured, or FLOPs rank)
  for (auto& [sha, r] : by_key) {
    if (r.time_us <= 0 && r.flops <= 0) {
      unranked += r.flops_unknown;
      continue;
    }
    total_time += r.time_us;
    total_flops += r.flops;
    all_measured = all_measured && r.measured;
    ranked.push_back(std::move(r));
  }
  // One basis for every key: measured kernel time where the earlier run measured every ranked key, else FLOPs (a
  // time share over the measured keys alone would put each of a few profiled keys near 1).
  const bool by_time = all_measured && total_time > 0;
  for (auto& r : ranked) {
    r.key.share = by_time ? r.time_us / total_time : total_flops > 0 ? r.flops / total_flops : 0;
    unranked += r.flops_unknown && r.key.share <= 0;
  }
  ranked.erase(std::remove_if(ranked.begin(), ranked.end(), [](const Ranked& r) { return r.key.share <= 0; }),
               ranked.end());
  std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    if (a.key.share != b.key.share) return a.key.share > b.key.share;
    if (a.calls != b.calls) return a.calls > b.calls;
    return a.key.input_sha < b.key.input_sha;
  });
  out = SamplePlan{};
  out.ranked = ranked.size();
  out.unranked = unranked;
  out.basis = by_time ? "measured_time" : "flops";
  const double window_s = mean_window_seconds(audit);
  uint64_t bytes_left = budgets.snapshot_bytes;
  double stall_left = budgets.stall_seconds;
  for (const auto& r : ranked) {
    const bool snapshot = budgets.snapshots && r.key.snapshot_bytes <= bytes_left;
    const bool counters = budgets.counters && window_s <= stall_left;
    if (!snapshot && !counters) {
      ++out.over_budget;
      continue;
    }
    if (snapshot) bytes_left -= r.key.snapshot_bytes;
    if (counters) stall_left -= window_s;
    out.covered_share += r.key.share;
    out.keys.push_back(r.key);
  }
  return "";
}

}  // namespace lingprobe::capture
