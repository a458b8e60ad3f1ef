#include "audit/stage_time.h"

#include <algorithm>
#include <cstdio>

namespace lingprobe::audit {

using format::JsonValue;

namespace {

// A stage's GPU time summed over the ranks: all its intervals, and the clean ones (no counter window opened on their
// GPU while they ran).
struct StageGpu {
  uint64_t gpu_us = 0, intervals = 0, clean_gpu_us = 0, clean_intervals = 0;
};

// The sums over the stages; `without` and `attributed` over those whose time without windows is known.
struct Totals {
  double raw = 0, without = 0, attributed = 0;
  bool extrapolated_any = false, unknown_any = false;
};

// Each stage's GPU time from the files' counts records; into `lost`, the intervals lost, by why.
std::map<std::string, StageGpu> sum_stage_gpu(const std::vector<const FileSummary*>& files,
                                              std::map<std::string, uint64_t>& lost) {
  std::map<std::string, StageGpu> by_stage;
  for (const FileSummary* f : files) {
    for (const auto& [stage, fields] : f->stage_gpu) {
      StageGpu& s = by_stage[stage];
      auto get = [&fields = fields](const char* k) {
        auto it = fields.find(k);
        return it == fields.end() ? uint64_t{0} : it->second;
      };
      s.gpu_us += get("gpu_us"), s.intervals += get("intervals");
      s.clean_gpu_us += get("clean_gpu_us"), s.clean_intervals += get("clean_intervals");
    }
    for (const auto& [why, n] : f->stage_gpu_lost) lost[why] += n;
  }
  return by_stage;
}

// Without the windows' cost: all intervals clean, the measurement itself; some clean, their mean x all intervals (a
// stage's runs alike, as a chunk loop's are); none clean, unknown (-1).
double without_windows(const StageGpu& s, Totals& totals) {
  if (s.clean_intervals == s.intervals) return static_cast<double>(s.gpu_us);
  if (s.clean_intervals > 0) {
    totals.extrapolated_any = true;
    return static_cast<double>(s.clean_gpu_us) / static_cast<double>(s.clean_intervals) *
           static_cast<double>(s.intervals);
  }
  totals.unknown_any = true;
  return -1;
}

JsonValue stage_json(const StageGpu& s, double without, double attr) {
  JsonValue j = JsonValue::object();
  j.set("gpu_time_us", JsonValue::integer(static_cast<int64_t>(s.gpu_us)));
  j.set("intervals", JsonValue::integer(static_cast<int64_t>(s.intervals)));
  j.set("clean_gpu_time_us", JsonValue::integer(static_cast<int64_t>(s.clean_gpu_us)));
  j.set("clean_intervals", JsonValue::integer(static_cast<int64_t>(s.clean_intervals)));
  j.set("gpu_time_without_windows_us", without >= 0 ? JsonValue::floating(without) : JsonValue::null());
  j.set("attributed_us", JsonValue::floating(attr));
  j.set("unattributed_us", without >= 0 ? JsonValue::floating(std::max(0.0, without - attr)) : JsonValue::null());
  j.set("attributed_fraction", without > 0 ? JsonValue::floating(attr / without) : JsonValue::null());
  return j;
}

std::string stage_row(const std::string& stage, const StageGpu& s, double without, double attr) {
  char row[512];
  char w[48] = "unknown (no clean interval)";
  char u[48] = "-";
  if (without >= 0) {
    std::snprintf(w, sizeof w, "%.3f s", without * 1e-6);
    std::snprintf(u, sizeof u, "%.3f s (%.0f%%)", std::max(0.0, without - attr) * 1e-6,
                  without > 0 ? 100.0 * std::max(0.0, without - attr) / without : 0.0);
  }
  std::snprintf(row, sizeof row, "| %s | %.3f s | %llu (%llu) | %s | %.3f s | %s |\n", stage.c_str(),
                static_cast<double>(s.gpu_us) * 1e-6, static_cast<unsigned long long>(s.intervals),
                static_cast<unsigned long long>(s.clean_intervals), w, attr * 1e-6, u);
  return row;
}

JsonValue totals_json(JsonValue stages, const std::map<std::string, uint64_t>& lost, const Totals& t) {
  JsonValue lost_json = JsonValue::object();
  for (const auto& [why, n] : lost) lost_json.set(why, JsonValue::integer(static_cast<int64_t>(n)));
  JsonValue out = JsonValue::object();
  out.set("by_stage", std::move(stages));
  out.set("gpu_time_us", JsonValue::floating(t.raw));
  out.set("gpu_time_without_windows_us", JsonValue::floating(t.without));
  out.set("attributed_us", JsonValue::floating(t.attributed));
  out.set("unattributed_us", JsonValue::floating(std::max(0.0, t.without - t.attributed)));
  out.set("attributed_fraction", t.without > 0 ? JsonValue::floating(t.attributed / t.without) : JsonValue::null());
  out.set("intervals_lost", std::move(lost_json));
  out.set(
      "scope",
      JsonValue::string(
          std::string(
              "Measured per rank with CUDA timing events on the stream of each stage run's first CUDA op, from that "
              "op to the stage's end, summed over the ranks (rank-seconds: ranks sharing a GPU overlap in time): "
              "the stage's GPU span on that stream, not its busy time, so it includes idle gaps where the host "
              "fell behind or waited (host-side collectives such as gloo's) and other streams' work it waited for "
              "(NCCL). An "
              "interval is clean when no counter window opened on its GPU while it ran; without windows = the "
              "measurement where all intervals are clean") +
          (t.extrapolated_any ? ", else the clean intervals' mean x all intervals" : "") +
          (t.unknown_any ? "; stages with no clean interval are left out of the totals" : "") +
          ". Attributed = the passed jobs' kernel time per call x calls (kernels in isolation); unattributed = the "
          "rest "
          "(unprofiled signatures, unrecorded ops, graph replays, compiled regions, NCCL, idle gaps)."));
  return out;
}

std::string totals_markdown(const Totals& t) {
  char row[512];
  std::snprintf(row, sizeof row,
                "\nMeasured GPU time (CUDA events per stage, all ranks): %.3f s, %.3f s without the counter windows; "
                "the profiled signatures account for %.3f s (%.0f%%).\n",
                t.raw * 1e-6, t.without * 1e-6, t.attributed * 1e-6,
                t.without > 0 ? 100.0 * t.attributed / t.without : 0.0);
  return row;
}

}  // namespace

StageTimeView stage_time_view(const std::vector<const FileSummary*>& files,
                              const std::map<std::string, double>& attributed_us) {
  std::map<std::string, uint64_t> lost;
  const std::map<std::string, StageGpu> by_stage = sum_stage_gpu(files, lost);
  StageTimeView v;
  if (by_stage.empty()) return v;
  JsonValue stages = JsonValue::object();
  Totals totals;
  std::string md =
      "| stage | GPU time | intervals (clean) | without windows | attributed | unattributed "
      "|\n|---|---|---|---|---|---|\n";
  for (const auto& [stage, s] : by_stage) {
    const double without = without_windows(s, totals);
    auto it = attributed_us.find(stage);
    const double attr = it == attributed_us.end() ? 0.0 : it->second;
    stages.set(stage, stage_json(s, without, attr));
    if (without >= 0) v.without_windows_us[stage] = without;
    totals.raw += static_cast<double>(s.gpu_us);
    if (without >= 0) totals.without += without, totals.attributed += attr;
    md += stage_row(stage, s, without, attr);
  }
  v.json = totals_json(std::move(stages), lost, totals);
  v.denominator_us = totals.without;
  v.markdown = totals_markdown(totals) + "\n" + md;
  return v;
}

}  // namespace lingprobe::audit
