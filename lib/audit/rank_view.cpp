#include "audit/rank_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "audit/signature_text.h"

namespace lingprobe::audit {
namespace {

using format::JsonValue;

struct StageTime {
  bool timed = false;                 // from call records (span, time in calls)
  int64_t first_ns = 0, last_ns = 0;  // on the shared (unix) clock
  int64_t in_calls_ns = 0, in_collectives_ns = 0;
  uint64_t collective_calls = 0;
  bool collectives = false;  // collective time known (counts record, or call records of c10d ops)
  double span_s() const { return timed ? static_cast<double>(last_ns - first_ns) / 1e9 : 0; }
};

JsonValue ranks_json(const std::set<int64_t>& ranks) {
  JsonValue a = JsonValue::array();
  for (int64_t r : ranks) a.push_back(JsonValue::integer(r));
  return a;
}

std::string ranks_text(const std::set<int64_t>& ranks) {
  std::string s;
  for (int64_t r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s.empty() ? "none" : s;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", s);
  return buf;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// Each file's times into `times` (by stage, then rank). Collectives from the
// file's counts record where it has them (the recorder times every c10d call,
// whatever the selection), else from its call records of c10d ops.
void add_file_times(const FileSummary& f, const std::map<std::string, const RankViewSignature*>& by_sha,
                    std::map<std::string, std::map<int64_t, StageTime>>& times, bool& from_counts, bool& from_records) {
  const bool counted = !f.collectives.empty();
  const int64_t to_unix = f.start_unix_ns >= 0 && f.start_mono_ns >= 0 ? f.start_unix_ns - f.start_mono_ns : 0;
  for (const auto& [id, t] : f.call_times) {
    auto sha = f.signature_sha.find(id);
    auto sig = sha == f.signature_sha.end() ? by_sha.end() : by_sha.find(sha->second);
    if (sig == by_sha.end() || !t.top_level_calls) continue;
    StageTime& st = times[sig->second->stage][f.rank];
    const int64_t first = t.first_t0_ns + to_unix, last = t.last_t1_ns + to_unix;
    st.first_ns = st.timed ? std::min(st.first_ns, first) : first;
    st.last_ns = st.timed ? std::max(st.last_ns, last) : last;
    st.timed = true;
    if (!is_collective_op(sig->second->op)) {
      st.in_calls_ns += t.top_level_ns;
    } else if (!counted) {
      st.in_collectives_ns += t.through_wait_ns;
      st.collective_calls += t.top_level_calls;
      st.collectives = from_records = true;
    }
  }
  for (const auto& [stage, values] : f.collectives) {
    StageTime& st = times[stage][f.rank];
    const std::map<std::string, uint64_t>& fields = values;  // (a lambda cannot capture a structured binding)
    auto get = [&fields](const char* k) {
      auto it = fields.find(k);
      return it == fields.end() ? uint64_t{0} : std::min<uint64_t>(it->second, uint64_t{1} << 52);
    };
    st.in_collectives_ns += static_cast<int64_t>(get("us")) * 1000;
    st.collective_calls += get("calls");
    st.collectives = from_counts = true;
  }
}

}  // namespace

bool waits_name_a_straggler(double least_wait_s, double most_wait_s, double median_collective_calls,
                            double median_span_s) {
  const double gap = most_wait_s - least_wait_s;
  const double jitter = 3 * kStragglerJitterPerCollectiveS * std::sqrt(2 * std::max(median_collective_calls, 0.0));
  return gap > 0.2 * most_wait_s && gap > 0.05 * median_span_s && gap > kStragglerNoiseFloorS + jitter;
}

RankView rank_view(int64_t world_size, const std::vector<const FileSummary*>& rank_files,
                   const std::vector<RankViewSignature>& signatures) {
  std::set<int64_t> expected, with_files, with_calls, unfinished;
  for (int64_t r = 0; r < world_size && r < 100000; ++r) expected.insert(r);
  for (const FileSummary* f : rank_files) {
    with_files.insert(f->rank);
    if (!f->final_counts) unfinished.insert(f->rank);
  }
  std::set<int64_t> missing;
  std::set_difference(expected.begin(), expected.end(), with_files.begin(), with_files.end(),
                      std::inserter(missing, missing.end()));

  // Per stage: its signatures and the ranks that ran them.
  std::map<std::string, std::vector<const RankViewSignature*>> by_stage;
  std::map<std::string, std::set<int64_t>> stage_ranks;
  std::map<std::string, const RankViewSignature*> by_sha;
  for (const auto& s : signatures) {
    by_stage[s.stage].push_back(&s);
    by_sha.emplace(s.sha, &s);
    for (const auto& [r, n] : s.calls_by_rank)
      if (n) stage_ranks[s.stage].insert(r), with_calls.insert(r);
  }
  // Per rank and stage: times (several files of a rank: one clock through their headers).
  std::map<std::string, std::map<int64_t, StageTime>> times;
  bool from_counts = false, from_records = false;
  for (const FileSummary* f : rank_files) add_file_times(*f, by_sha, times, from_counts, from_records);
  bool any_timed = false;
  for (const auto& [stage, by_rank] : times)
    for (const auto& [rank, t] : by_rank) {
      stage_ranks[stage].insert(rank);  // a rank seen in a stage only through its collectives ran it too
      by_stage[stage];                  // a stage of collectives alone (the op selection left its ops out)
      any_timed = any_timed || t.timed;
    }
  // GPU time per rank and stage from the counts records (LINGPROBE_STAGE_GPU_TIME), summed over a rank's files.
  std::map<std::string, std::map<int64_t, double>> gpu_s;
  for (const FileSummary* f : rank_files)
    for (const auto& [stage, fields] : f->stage_gpu)
      if (auto it = fields.find("gpu_us"); it != fields.end())
        gpu_s[stage][f->rank] += static_cast<double>(it->second) / 1e6;

  static const char kWait[] =
      "each from its start to the next top-level call of its thread: the caller's Work.wait() runs outside any op, so "
      "the op alone is only the enqueue; time without ops after a collective counts as waiting too, and with NCCL "
      "the CPU does not wait there (the rank's wait shows where it next synchronizes with the GPU)";
  const std::string collectives_note =
      from_counts
          ? std::string("timed by the recorder for every top-level c10d call whatever the op selection, ") + kWait
      : from_records ? std::string(
                           "measured from the call records of c10d ops (files from before the recorder timed "
                           "them), ") +
                           kWait
                     : "not measured: no c10d op ran in the ranks (or their files predate collective timing)";

  JsonValue stages = JsonValue::array();
  std::ostringstream md, timing_md;
  md << "\n## Ranks\n\nExpected " << expected.size() << " rank(s) (world size " << world_size << "); files from "
     << ranks_text(with_files) << (missing.empty() ? "" : "; **missing: " + ranks_text(missing) + "**")
     << (unfinished.empty() ? "" : "; ranks that did not finish (no final counts record): " + ranks_text(unfinished))
     << ". Time in collectives: " << collectives_note << ".\n";
  for (const auto& [stage, group] : by_stage) {
    const std::set<int64_t>& ran = stage_ranks[stage];
    // One rank alone (the output stage on rank 0) is rank-local by design; any other subset is reported as ranks
    // that never ran the stage.
    const bool rank_local = ran.size() == 1 && with_calls.size() > 1;
    std::set<int64_t> never_ran;
    if (!rank_local)
      std::set_difference(with_calls.begin(), with_calls.end(), ran.begin(), ran.end(),
                          std::inserter(never_ran, never_ran.end()));
    JsonValue differing = JsonValue::array();
    size_t n_differing = 0;
    std::string differing_md;
    for (const RankViewSignature* s : group) {
      std::set<int64_t> lacking;
      std::set<uint64_t> counts;
      JsonValue by_rank = JsonValue::object();
      std::string calls_text;
      for (int64_t r : ran) {
        auto it = s->calls_by_rank.find(r);
        const uint64_t n = it == s->calls_by_rank.end() ? 0 : it->second;
        if (!n)
          lacking.insert(r);
        else
          counts.insert(n);
        by_rank.set(std::to_string(r), JsonValue::integer(static_cast<int64_t>(n)));
        calls_text += (calls_text.empty() ? "" : " / ") + std::to_string(n);
      }
      if (lacking.empty() && counts.size() <= 1) continue;
      if (++n_differing > 50) continue;
      differing.push_back(JsonValue::object({{"signature_sha256", JsonValue::string(s->sha)},
                                             {"signature", JsonValue::string(s->text)},
                                             {"calls_by_rank", std::move(by_rank)},
                                             {"missing_on_ranks", ranks_json(lacking)}}));
      if (n_differing <= 10)
        differing_md += "  | `" + s->text + "` " + s->sha.substr(0, 12) + " | " + calls_text + " | " +
                        (lacking.empty() ? "-" : ranks_text(lacking)) + " |\n";
    }
    // Timing, and the straggler: among the ranks that ran the stage, the one that waits least in collectives is
    // the one the others wait for; without collectives, the one longest in its calls.
    JsonValue timing = JsonValue::array();
    std::vector<double> waits, busy, spans, calls;
    int64_t least_wait_rank = -1, most_busy_rank = -1;
    double least_wait = 0, most_wait = 0, most_busy = 0;
    bool stage_collectives = false;
    for (int64_t r : ran) {
      auto it = times[stage].find(r);
      if (it == times[stage].end()) continue;
      const StageTime& t = it->second;
      const double in_calls = static_cast<double>(t.in_calls_ns) / 1e9,
                   wait = static_cast<double>(t.in_collectives_ns) / 1e9;
      auto gpu = gpu_s[stage].find(r);
      timing.push_back(JsonValue::object(
          {{"rank", JsonValue::integer(r)},
           {"span_seconds", t.timed ? JsonValue::floating(t.span_s()) : JsonValue::null()},
           {"in_recorded_calls_seconds", t.timed ? JsonValue::floating(in_calls) : JsonValue::null()},
           {"in_collectives_seconds", t.collectives ? JsonValue::floating(wait) : JsonValue::null()},
           {"collective_calls", JsonValue::integer(static_cast<int64_t>(t.collective_calls))},
           {"gpu_busy_seconds", gpu != gpu_s[stage].end() ? JsonValue::floating(gpu->second) : JsonValue::null()}}));
      timing_md << "| " << stage << " | " << r << " | " << (t.timed ? seconds(t.span_s()) : "-") << " | "
                << (t.timed ? seconds(in_calls) : "-") << " | " << (t.collectives ? seconds(wait) : "-") << " | "
                << (gpu != gpu_s[stage].end() ? seconds(gpu->second) : "-") << " |\n";
      stage_collectives = stage_collectives || t.collectives;
      waits.push_back(wait), busy.push_back(in_calls), calls.push_back(static_cast<double>(t.collective_calls));
      if (t.timed) spans.push_back(t.span_s());
      if (least_wait_rank < 0 || wait < least_wait) least_wait = wait, least_wait_rank = r;
      most_wait = std::max(most_wait, wait);
      if (most_busy_rank < 0 || in_calls > most_busy) most_busy = in_calls, most_busy_rank = r;
    }
    JsonValue straggler = JsonValue::null();
    std::string straggler_md;
    std::set<int64_t> stage_unfinished;
    std::set_intersection(ran.begin(), ran.end(), unfinished.begin(), unfinished.end(),
                          std::inserter(stage_unfinished, stage_unfinished.end()));
    if (waits.size() >= 2 && !stage_unfinished.empty()) {
      straggler_md = "not judged: rank(s) " + ranks_text(stage_unfinished) + " did not finish.\n";
    } else if (waits.size() >= 2) {
      // With collectives, waits_name_a_straggler; without, 10% above the median time in calls.
      const double typical_busy = median(busy);
      if (stage_collectives && waits_name_a_straggler(least_wait, most_wait, median(calls), median(spans))) {
        straggler = JsonValue::object({{"rank", JsonValue::integer(least_wait_rank)},
                                       {"by", JsonValue::string("least time waiting in collectives")},
                                       {"its_wait_seconds", JsonValue::floating(least_wait)},
                                       {"longest_wait_seconds", JsonValue::floating(most_wait)}});
        straggler_md = "rank " + std::to_string(least_wait_rank) + " waits least in collectives (" +
                       seconds(least_wait) + " s; another rank up to " + seconds(most_wait) +
                       " s): the others wait for it.\n";
      } else if (!stage_collectives && !spans.empty() && most_busy > 1.1 * typical_busy &&
                 most_busy - typical_busy > kStragglerNoiseFloorS) {
        straggler = JsonValue::object({{"rank", JsonValue::integer(most_busy_rank)},
                                       {"by", JsonValue::string("longest time in recorded calls")},
                                       {"its_seconds", JsonValue::floating(most_busy)},
                                       {"median_seconds", JsonValue::floating(typical_busy)}});
        straggler_md = "rank " + std::to_string(most_busy_rank) + " spends " + seconds(most_busy) +
                       " s in its recorded calls against a median " + seconds(typical_busy) + " s.\n";
      }
    }
    JsonValue st = JsonValue::object();
    st.set("stage", JsonValue::string(stage));
    st.set("ranks", ranks_json(ran));
    st.set("rank_local", JsonValue::boolean(rank_local));
    st.set("ranks_that_never_ran_it", ranks_json(never_ran));
    st.set("signatures_differing_between_ranks", JsonValue::integer(static_cast<int64_t>(n_differing)));
    st.set("differing", std::move(differing));
    st.set("timing", std::move(timing));
    st.set("straggler", std::move(straggler));
    stages.push_back(std::move(st));
    md << "\n- stage `" << stage << "`: ranks " << ranks_text(ran);
    if (rank_local) md << " only (rank-local: one rank runs it by design, not an imbalance)";
    if (!never_ran.empty()) md << "; **never on rank(s) " << ranks_text(never_ran) << "**";
    md << "; " << n_differing << " signature(s) whose calls differ between its ranks";
    if (n_differing)
      md << ":\n\n  | signature | calls per rank (" << ranks_text(ran) << ") | missing on |\n  |---|---|---|\n"
         << differing_md;
    if (n_differing > 10) md << "\n  " << n_differing - 10 << " more under `ranks` in coverage_audit.json.\n";
    md << "\n";
    if (!straggler_md.empty()) md << (n_differing ? "\n" : "") << "  Straggler: " << straggler_md;
  }
  if (any_timed || from_counts)
    md << "\nWall time per rank and stage: the stage's span (first call's start to last call's end) and the time "
          "inside its recorded top-level calls (collectives apart), from the call records; the time in c10d "
          "collectives (their wait included); and the GPU time its CUDA streams were busy where it was measured "
          "(LINGPROBE_STAGE_GPU_TIME).\n\n"
          "| stage | rank | span s | in recorded calls s | in collectives s | GPU busy s |\n"
          "|---|---|---|---|---|---|\n"
       << timing_md.str();
  RankView v;
  v.json = JsonValue::object({{"expected", ranks_json(expected)},
                              {"with_files", ranks_json(with_files)},
                              {"missing", ranks_json(missing)},
                              {"unfinished", ranks_json(unfinished)},
                              {"collectives", JsonValue::string(collectives_note)},
                              {"stages", std::move(stages)}});
  v.markdown = md.str();
  return v;
}

}  // namespace lingprobe::audit
