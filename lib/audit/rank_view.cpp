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

// What the stages' views share: the run's ranks, and per stage its signatures, the ranks that ran it and their times.
struct RunRanks {
  std::set<int64_t> expected, with_files, with_calls, unfinished, missing;
  std::map<std::string, std::vector<const RankViewSignature*>> by_stage;
  std::map<std::string, std::set<int64_t>> stage_ranks;
  std::map<std::string, std::map<int64_t, StageTime>> times;
  std::map<std::string, std::map<int64_t, double>> gpu_s;
  bool from_counts = false, from_records = false, any_timed = false;
};

// The ranks the headers' world size expects, those that wrote files, those that did not finish, and the missing.
void find_ranks(int64_t world_size, const std::vector<const FileSummary*>& rank_files, RunRanks& d) {
  for (int64_t r = 0; r < world_size && r < 100000; ++r) d.expected.insert(r);
  for (const FileSummary* f : rank_files) {
    d.with_files.insert(f->rank);
    if (!f->final_counts) d.unfinished.insert(f->rank);
  }
  for (const auto& [rank, f] : last_process_per_rank(rank_files))
    if (f->interrupted()) d.unfinished.insert(rank);
  std::set_difference(d.expected.begin(), d.expected.end(), d.with_files.begin(), d.with_files.end(),
                      std::inserter(d.missing, d.missing.end()));
}

// Per stage: its signatures and the ranks that ran them; returns the signatures by SHA-256.
std::map<std::string, const RankViewSignature*> group_signatures(const std::vector<RankViewSignature>& signatures,
                                                                 RunRanks& d) {
  std::map<std::string, const RankViewSignature*> by_sha;
  for (const auto& s : signatures) {
    d.by_stage[s.stage].push_back(&s);
    by_sha.emplace(s.sha, &s);
    for (const auto& [r, n] : s.calls_by_rank)
      if (n) d.stage_ranks[s.stage].insert(r), d.with_calls.insert(r);
  }
  return by_sha;
}

// Per rank and stage: times (several files of a rank: one clock through their headers), and the GPU time from the
// counts records (LINGPROBE_STAGE_GPU_TIME), summed over a rank's files.
void time_stages(const std::vector<const FileSummary*>& rank_files,
                 const std::map<std::string, const RankViewSignature*>& by_sha, RunRanks& d) {
  for (const FileSummary* f : rank_files) add_file_times(*f, by_sha, d.times, d.from_counts, d.from_records);
  for (const auto& [stage, by_rank] : d.times)
    for (const auto& [rank, t] : by_rank) {
      d.stage_ranks[stage].insert(rank);  // a rank seen in a stage only through its collectives ran it too
      d.by_stage[stage];                  // a stage of collectives alone (the op selection left its ops out)
      d.any_timed = d.any_timed || t.timed;
    }
  for (const FileSummary* f : rank_files)
    for (const auto& [stage, fields] : f->stage_gpu)
      if (auto it = fields.find("gpu_us"); it != fields.end())
        d.gpu_s[stage][f->rank] += static_cast<double>(it->second) / 1e6;
}

// How the time in collectives was measured, or that it was not.
std::string collectives_note(bool from_counts, bool from_records) {
  static const char kWait[] =
      "each from its start to the next top-level call of its thread: the caller's Work.wait() runs outside any op, so "
      "the op alone is only the enqueue; time without ops after a collective counts as waiting too, and with NCCL "
      "the CPU does not wait there (the rank's wait shows where it next synchronizes with the GPU)";
  return from_counts
             ? std::string("timed by the recorder for every top-level c10d call whatever the op selection, ") + kWait
         : from_records ? std::string(
                              "measured from the call records of c10d ops (files from before the recorder timed "
                              "them), ") +
                              kWait
                        : "not measured: no c10d op ran in the ranks (or their files predate collective timing)";
}

// A stage's signatures whose calls differ between its ranks or that some of them lack: the first 50 in the JSON,
// the first 10 in the markdown table.
struct Differing {
  JsonValue json = JsonValue::array();
  size_t count = 0;
  std::string markdown;
};

Differing differing_signatures(const std::vector<const RankViewSignature*>& group, const std::set<int64_t>& ran) {
  Differing out;
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
    if (++out.count > 50) continue;
    out.json.push_back(JsonValue::object({{"signature_sha256", JsonValue::string(s->sha)},
                                          {"signature", JsonValue::string(s->text)},
                                          {"calls_by_rank", std::move(by_rank)},
                                          {"missing_on_ranks", ranks_json(lacking)}}));
    if (out.count <= 10)
      out.markdown += "  | `" + s->text + "` " + s->sha.substr(0, 12) + " | " + calls_text + " | " +
                      (lacking.empty() ? "-" : ranks_text(lacking)) + " |\n";
  }
  return out;
}

// A stage's time on each of its ranks (the JSON rows; the markdown rows go to `timing_md`), and what the straggler
// is judged by: the least and most wait in collectives, the most time in calls.
struct RankTimings {
  JsonValue json = JsonValue::array();
  std::vector<double> waits, busy, spans, calls;
  int64_t least_wait_rank = -1, most_busy_rank = -1;
  double least_wait = 0, most_wait = 0, most_busy = 0;
  bool collectives = false;
};

RankTimings time_per_rank(const std::string& stage, const std::set<int64_t>& ran,
                          const std::map<int64_t, StageTime>& times, const std::map<int64_t, double>& gpu_s,
                          std::ostream& timing_md) {
  RankTimings out;
  for (int64_t r : ran) {
    auto it = times.find(r);
    if (it == times.end()) continue;
    const StageTime& t = it->second;
    const double in_calls = static_cast<double>(t.in_calls_ns) / 1e9,
                 wait = static_cast<double>(t.in_collectives_ns) / 1e9;
    auto gpu = gpu_s.find(r);
    out.json.push_back(JsonValue::object(
        {{"rank", JsonValue::integer(r)},
         {"span_seconds", t.timed ? JsonValue::floating(t.span_s()) : JsonValue::null()},
         {"in_recorded_calls_seconds", t.timed ? JsonValue::floating(in_calls) : JsonValue::null()},
         {"in_collectives_seconds", t.collectives ? JsonValue::floating(wait) : JsonValue::null()},
         {"collective_calls", JsonValue::integer(static_cast<int64_t>(t.collective_calls))},
         {"gpu_busy_seconds", gpu != gpu_s.end() ? JsonValue::floating(gpu->second) : JsonValue::null()}}));
    timing_md << "| " << stage << " | " << r << " | " << (t.timed ? seconds(t.span_s()) : "-") << " | "
              << (t.timed ? seconds(in_calls) : "-") << " | " << (t.collectives ? seconds(wait) : "-") << " | "
              << (gpu != gpu_s.end() ? seconds(gpu->second) : "-") << " |\n";
    out.collectives = out.collectives || t.collectives;
    out.waits.push_back(wait), out.busy.push_back(in_calls),
        out.calls.push_back(static_cast<double>(t.collective_calls));
    if (t.timed) out.spans.push_back(t.span_s());
    if (out.least_wait_rank < 0 || wait < out.least_wait) out.least_wait = wait, out.least_wait_rank = r;
    out.most_wait = std::max(out.most_wait, wait);
    if (out.most_busy_rank < 0 || in_calls > out.most_busy) out.most_busy = in_calls, out.most_busy_rank = r;
  }
  return out;
}

struct Straggler {
  JsonValue json = JsonValue::null();
  std::string markdown;
};

// Among the ranks that ran the stage, the one that waits least in collectives is the one the others wait for
// (waits_name_a_straggler); without collectives, the one longest in its calls, 10% above the median. Not judged
// when one of them did not finish.
Straggler find_straggler(const RankTimings& t, const std::set<int64_t>& ran, const std::set<int64_t>& unfinished) {
  Straggler out;
  std::set<int64_t> stage_unfinished;
  std::set_intersection(ran.begin(), ran.end(), unfinished.begin(), unfinished.end(),
                        std::inserter(stage_unfinished, stage_unfinished.end()));
  if (t.waits.size() >= 2 && !stage_unfinished.empty()) {
    out.markdown = "not judged: rank(s) " + ranks_text(stage_unfinished) + " did not finish.\n";
  } else if (t.waits.size() >= 2) {
    const double typical_busy = median(t.busy);
    if (t.collectives && waits_name_a_straggler(t.least_wait, t.most_wait, median(t.calls), median(t.spans))) {
      out.json = JsonValue::object({{"rank", JsonValue::integer(t.least_wait_rank)},
                                    {"by", JsonValue::string("least time waiting in collectives")},
                                    {"its_wait_seconds", JsonValue::floating(t.least_wait)},
                                    {"longest_wait_seconds", JsonValue::floating(t.most_wait)}});
      out.markdown = "rank " + std::to_string(t.least_wait_rank) + " waits least in collectives (" +
                     seconds(t.least_wait) + " s; another rank up to " + seconds(t.most_wait) +
                     " s): the others wait for it.\n";
    } else if (!t.collectives && !t.spans.empty() && t.most_busy > 1.1 * typical_busy &&
               t.most_busy - typical_busy > kStragglerNoiseFloorS) {
      out.json = JsonValue::object({{"rank", JsonValue::integer(t.most_busy_rank)},
                                    {"by", JsonValue::string("longest time in recorded calls")},
                                    {"its_seconds", JsonValue::floating(t.most_busy)},
                                    {"median_seconds", JsonValue::floating(typical_busy)}});
      out.markdown = "rank " + std::to_string(t.most_busy_rank) + " spends " + seconds(t.most_busy) +
                     " s in its recorded calls against a median " + seconds(typical_busy) + " s.\n";
    }
  }
  return out;
}

// One stage's entry in `stages` and its paragraph in `md`; its timing rows go to `timing_md`.
void add_stage(const std::string& stage, const std::vector<const RankViewSignature*>& group, RunRanks& d,
               JsonValue& stages, std::ostream& md, std::ostream& timing_md) {
  const std::set<int64_t>& ran = d.stage_ranks[stage];
  // One rank alone (the output stage on rank 0) is rank-local by design; any other subset is reported as ranks
  // that never ran the stage.
  const bool rank_local = ran.size() == 1 && d.with_calls.size() > 1;
  std::set<int64_t> never_ran;
  if (!rank_local)
    std::set_difference(d.with_calls.begin(), d.with_calls.end(), ran.begin(), ran.end(),
                        std::inserter(never_ran, never_ran.end()));
  Differing differing = differing_signatures(group, ran);
  RankTimings timing = time_per_rank(stage, ran, d.times[stage], d.gpu_s[stage], timing_md);
  Straggler straggler = find_straggler(timing, ran, d.unfinished);
  const size_t n_differing = differing.count;
  JsonValue st = JsonValue::object();
  st.set("stage", JsonValue::string(stage));
  st.set("ranks", ranks_json(ran));
  st.set("rank_local", JsonValue::boolean(rank_local));
  st.set("ranks_that_never_ran_it", ranks_json(never_ran));
  st.set("signatures_differing_between_ranks", JsonValue::integer(static_cast<int64_t>(n_differing)));
  st.set("differing", std::move(differing.json));
  st.set("timing", std::move(timing.json));
  st.set("straggler", std::move(straggler.json));
  stages.push_back(std::move(st));
  if (d.with_files.size() <= 1) return;  // one rank: nothing to compare between ranks (the JSON keeps the stage)
  md << "\n- stage `" << stage << "`: ranks " << ranks_text(ran);
  if (rank_local) md << " only (rank-local: one rank runs it by design, not an imbalance)";
  if (!never_ran.empty()) md << "; **never on rank(s) " << ranks_text(never_ran) << "**";
  md << "; " << n_differing << " signature(s) whose calls differ between its ranks";
  if (n_differing)
    md << ":\n\n  | signature | calls per rank (" << ranks_text(ran) << ") | missing on |\n  |---|---|---|\n"
       << differing.markdown;
  if (n_differing > 10) md << "\n  " << n_differing - 10 << " more under `ranks` in coverage_audit.json.\n";
  md << "\n";
  if (!straggler.markdown.empty()) md << (n_differing ? "\n" : "") << "  Straggler: " << straggler.markdown;
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
  RunRanks d;
  find_ranks(world_size, rank_files, d);
  const auto by_sha = group_signatures(signatures, d);
  time_stages(rank_files, by_sha, d);
  const std::string note = collectives_note(d.from_counts, d.from_records);
  JsonValue stages = JsonValue::array();
  std::ostringstream md, timing_md;
  md << "\n## Ranks\n\nExpected " << d.expected.size() << " rank(s) (world size " << world_size
     << "); files from rank(s) " << ranks_text(d.with_files)
     << (d.missing.empty() ? "" : "; **missing: " + ranks_text(d.missing) + "**")
     << (d.unfinished.empty() ? ""
                              : "; ranks that did not finish (no final counts record, or ended by a signal): " +
                                    ranks_text(d.unfinished))
     << ". Time in collectives: " << note << ".\n";
  for (const auto& [stage, group] : d.by_stage) add_stage(stage, group, d, stages, md, timing_md);
  if (d.any_timed || d.from_counts)
    md << "\nWall time per rank and stage: the stage's span (first call's start to last call's end) and the time "
          "inside its recorded top-level calls (collectives apart), from the call records; the time in c10d "
          "collectives (their wait included); and the GPU time its CUDA streams were busy where it was measured "
          "(LINGPROBE_STAGE_GPU_TIME).\n\n"
          "| stage | rank | span s | in recorded calls s | in collectives s | GPU busy s |\n"
          "|---|---|---|---|---|---|\n"
       << timing_md.str();
  RankView v;
  v.json = JsonValue::object({{"expected", ranks_json(d.expected)},
                              {"with_files", ranks_json(d.with_files)},
                              {"missing", ranks_json(d.missing)},
                              {"unfinished", ranks_json(d.unfinished)},
                              {"collectives", JsonValue::string(note)},
                              {"stages", std::move(stages)}});
  v.markdown = md.str();
  return v;
}

}  // namespace lingprobe::audit
