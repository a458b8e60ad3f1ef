#include "audit/audit_rows.h"

#include <cmath>

#include "audit/operator_table.h"

namespace lingprobe::audit {
namespace {

using format::JsonValue;

struct Fraction {
  long double covered = 0, total = 0;
  bool total_known = true;
};

JsonValue fraction_json(const Fraction& f) {
  JsonValue o = JsonValue::object();
  o.set("covered", json_number(f.covered));
  o.set("total", f.total_known ? json_number(f.total) : JsonValue::null());
  o.set("fraction", f.total_known && f.total > 0 ? JsonValue::floating(static_cast<double>(f.covered / f.total))
                                                 : JsonValue::null());
  return o;
}

JsonValue evidence_json(const Evidence* e) {
  if (!e) return JsonValue::null();
  return JsonValue::object({{"path", JsonValue::string(e->path)}, {"sha256", JsonValue::string(e->sha256)}});
}

// Each profile's input: the snapshot of the same call where there is one (else the first snapshot, else the profile).
JsonValue ncu_inputs_json(const Signature& s) {
  JsonValue inputs = JsonValue::array();
  for (const auto& p : s.profiles) {
    const Evidence* snap = s.snapshots.empty() ? nullptr : &s.snapshots.front();
    for (const auto& sn : s.snapshots)
      if (sn.seq == p.seq) snap = &sn;
    inputs.push_back(JsonValue::object({{"input", JsonValue::string(snap ? snap->path : p.path)},
                                        {"input_sha256", JsonValue::string(snap ? snap->sha256 : p.sha256)}}));
  }
  return inputs;
}

}  // namespace

JsonValue json_number(long double x) {
  if (x == std::floor(x) && std::fabs(x) < 9.2e18L) return JsonValue::integer(static_cast<int64_t>(x));
  return JsonValue::floating(static_cast<double>(x));
}

// Coverage of one group of signatures (a stage, or the whole run).
JsonValue coverage_json(const std::vector<const Signature*>& group) {
  Fraction snap_sigs, snap_calls, snap_flops, ctr_sigs, ctr_calls, ctr_flops, ctr_time;
  uint64_t unknown_flops = 0;
  for (const Signature* s : group) {
    const bool snap = !s->snapshots.empty(), ctr = !s->profiles.empty();
    snap_sigs.total += 1;
    ctr_sigs.total += 1;
    snap_calls.total += s->calls;
    ctr_calls.total += s->calls;
    if (snap) snap_sigs.covered += 1, snap_calls.covered += s->calls;
    if (ctr) ctr_sigs.covered += 1, ctr_calls.covered += s->calls;
    if (!s->flops) {
      ++unknown_flops;
    } else {
      const long double f = static_cast<long double>(*s->flops) * s->flop_calls;
      snap_flops.total += f;
      ctr_flops.total += f;
      if (snap) snap_flops.covered += f;
      if (ctr) ctr_flops.covered += f;
    }
    if (s->kernel_time_us) {
      const long double t = *s->kernel_time_us * s->calls;
      ctr_time.covered += t;
      ctr_time.total += t;
    } else if (!s->flops || *s->flops > 0) {
      ctr_time.total_known = false;  // an unmeasured FLOP-bearing (or unknown) signature
    }
  }
  JsonValue snapshots = JsonValue::object({{"by_signatures", fraction_json(snap_sigs)},
                                           {"by_calls", fraction_json(snap_calls)},
                                           {"by_flops", fraction_json(snap_flops)}});
  JsonValue counters = JsonValue::object({{"by_signatures", fraction_json(ctr_sigs)},
                                          {"by_calls", fraction_json(ctr_calls)},
                                          {"by_flops", fraction_json(ctr_flops)},
                                          {"by_measured_time_us", fraction_json(ctr_time)}});
  return JsonValue::object(
      {{"snapshots", snapshots},
       {"counters", counters},
       {"signatures_without_flop_formula", JsonValue::integer(static_cast<int64_t>(unknown_flops))}});
}

JsonValue row_json(const Signature& s) {
  JsonValue by_rank = JsonValue::object();
  for (const auto& [rank, n] : s.calls_by_rank)
    if (n) by_rank.set(std::to_string(rank), JsonValue::integer(static_cast<int64_t>(n)));
  JsonValue row = JsonValue::object();
  row.set("signature", s.value);
  row.set("signature_sha256", JsonValue::string(s.sha));
  row.set("calls", JsonValue::integer(static_cast<int64_t>(s.calls)));
  row.set("calls_by_rank", std::move(by_rank));
  row.set("same_structural_signature_ncu_inputs", ncu_inputs_json(s));
  row.set("flops_per_call", s.flops ? JsonValue::integer(*s.flops) : JsonValue::null());
  row.set("snapshot", evidence_json(s.snapshots.empty() ? nullptr : &s.snapshots.front()));
  row.set("profile", evidence_json(s.profiles.empty() ? nullptr : &s.profiles.front()));
  row.set("kernel_time_us_per_call", s.kernel_time_us ? JsonValue::floating(*s.kernel_time_us) : JsonValue::null());
  row.set("kernel_time_source", !s.kernel_time_us   ? JsonValue::null()
                                : s.timed_kernel_us ? JsonValue::string("activity")
                                                    : JsonValue::string("counters"));
  // Host time: the calling thread's wall time inside the top-level calls with a call record (on a GPU, the launch).
  const bool timed = s.timed_calls > 0;
  row.set("host_time_us", timed ? JsonValue::floating(static_cast<double>(s.host_ns) / 1e3) : JsonValue::null());
  row.set("host_time_us_per_call",
          timed ? JsonValue::floating(static_cast<double>(s.host_ns) / 1e3 / static_cast<double>(s.timed_calls))
                : JsonValue::null());
  return row;
}

JsonValue stage_json(const std::string& stage, const std::vector<const Signature*>& group) {
  uint64_t calls = 0, with_prior = 0, calls_with_prior = 0;
  for (auto* s : group) {
    calls += s->calls;
    if (!s->profiles.empty()) ++with_prior, calls_with_prior += s->calls;
  }
  return JsonValue::object(
      {{"stage", JsonValue::string(stage)},
       {"distinct_signatures", JsonValue::integer(static_cast<int64_t>(group.size()))},
       {"recorded_calls", JsonValue::integer(static_cast<int64_t>(calls))},
       {"signatures_with_prior_ncu_input", JsonValue::integer(static_cast<int64_t>(with_prior))},
       {"calls_with_structurally_matching_prior_input", JsonValue::integer(static_cast<int64_t>(calls_with_prior))},
       {"coverage", coverage_json(group)},
       {"operators", operators_json(group)}});
}

}  // namespace lingprobe::audit
