#include "audit/rank_view.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <sstream>

namespace lingprobe::audit {
namespace {

using format::JsonValue;

bool is_collective(const std::string& op) { return op.rfind("c10d.", 0) == 0 || op.rfind("_c10d_functional.", 0) == 0; }

struct StageTime {
  bool any = false;
  int64_t first_ns = 0, last_ns = 0;  // on the shared (unix) clock
  int64_t in_calls_ns = 0, in_collectives_ns = 0;
  uint64_t collective_calls = 0;
  double span_s() const { return any ? static_cast<double>(last_ns - first_ns) / 1e9 : 0; }  // any: from call records
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

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

}  // namespace

RankView rank_view(int64_t world_size, const std::vector<const FileSummary*>& rank_files,
                   const std::vector<RankViewSignature>& signatures) {
  std::set<int64_t> expected, with_files, with_calls;
  for (int64_t r = 0; r < world_size && r < 100000; ++r) expected.insert(r);
  for (const FileSummary* f : rank_files) with_files.insert(f->rank);
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
  // Per rank and stage: time from the call records (several files of a rank: one clock through their headers).
  std::map<std::string, std::map<int64_t, StageTime>> times;
  bool any_records = false, any_collective = false;
  for (const FileSummary* f : rank_files) {
    const int64_t to_unix = f->start_unix_ns >= 0 && f->start_mono_ns >= 0 ? f->start_unix_ns - f->start_mono_ns : 0;
    for (const auto& [id, t] : f->call_times) {
      if (!t.top_level_calls) continue;
      auto sha = f->signature_sha.find(id);
      if (sha == f->signature_sha.end()) continue;
      auto sig = by_sha.find(sha->second);
      if (sig == by_sha.end()) continue;
      any_records = true;
      StageTime& st = times[sig->second->stage][f->rank];
      const int64_t first = t.first_t0_ns + to_unix, last = t.last_t1_ns + to_unix;
      st.first_ns = st.any ? std::min(st.first_ns, first) : first;
      st.last_ns = st.any ? std::max(st.last_ns, last) : last;
      st.any = true;
      if (is_collective(sig->second->op)) {
        any_collective = true;
        st.in_collectives_ns += t.through_wait_ns;
        st.collective_calls += t.top_level_calls;
      } else {
        st.in_calls_ns += t.top_level_ns;
      }
    }
  }
  // GPU time per rank and stage from the counts records (LINGPROBE_STAGE_GPU_TIME), summed over a rank's files.
  std::map<std::string, std::map<int64_t, double>> gpu_s;
  for (const FileSummary* f : rank_files)
    for (const auto& [stage, fields] : f->stage_gpu)
      if (auto it = fields.find("gpu_us"); it != fields.end()) gpu_s[stage][f->rank] += static_cast<double>(it->second) / 1e6;
  auto gpu_text = [&gpu_s](int64_t rank, const std::string& stage) -> std::string {
    auto st = gpu_s.find(stage);
    if (st == gpu_s.end() || !st->second.count(rank)) return "-";
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f", st->second.at(rank));
    return buf;
  };
  // The recorder's own collective times (counts records: every c10d op, whatever the selection) win over
  // those from call records.
  bool counted = false;
  for (const FileSummary* f : rank_files) counted = counted || !f->collectives.empty();
  if (counted) {
    for (auto& [stage, by_rank] : times)
      for (auto& [rank, t] : by_rank) t.in_collectives_ns = 0, t.collective_calls = 0;
    for (const FileSummary* f : rank_files)
      for (const auto& [stage, fields] : f->collectives) {
        StageTime& t = times[stage][f->rank];
        auto get = [&fields](const char* k) { auto it = fields.find(k); return it == fields.end() ? uint64_t{0} : it->second; };
        t.in_collectives_ns += static_cast<int64_t>(get("us")) * 1000;
        t.collective_calls += get("calls");
        any_collective = true;
      }
  }
  const char* collectives_note =
      counted ? "timed by the recorder for every top-level c10d call whatever the op selection, each from its start "
                "to the next top-level call of its thread (the caller's Work.wait() runs outside any op; with NCCL "
                "the CPU does not wait there, and a rank's wait shows where it next synchronizes with the GPU)"
      : any_collective ? "measured from the call records of c10d ops, each from its start to the next top-level call of "
                       "its thread (the caller's Work.wait() runs outside any op; with NCCL the CPU does not wait "
                       "there, and a rank's wait shows where it next synchronizes with the GPU)"
      : any_records  ? "not measured: no c10d op was recorded; record them (LINGPROBE_OPS with c10d::*, or every op) to "
                       "see the time each rank waits in collectives"
                     : "not measured: the run has no call records (LINGPROBE_CALL_RECORDS=0); time needs call records, "
                       "and time in collectives needs c10d ops among the recorded ops";

  for (const auto& [stage, by_rank] : times)  // a stage with collectives but no rows (the op selection left them out)
    if (!by_stage.count(stage)) {
      by_stage[stage];
      for (const auto& [rank, t] : by_rank) stage_ranks[stage].insert(rank);
    }
  JsonValue stages = JsonValue::array();
  std::ostringstream md;
  md << "\n## Ranks\n\nExpected " << expected.size() << " rank(s) (world size " << world_size << "); files from "
     << ranks_text(with_files) << (missing.empty() ? "" : "; **missing: " + ranks_text(missing) + "**")
     << ". Time in collectives: " << collectives_note << ".\n";
  std::ostringstream timing_md;
  for (const auto& [stage, group] : by_stage) {
    const std::set<int64_t>& ran = stage_ranks[stage];
    const bool rank_local = ran.size() < with_calls.size();
    JsonValue differing = JsonValue::array();
    size_t n_differing = 0;
    std::string differing_md;
    for (const RankViewSignature* s : group) {
      std::set<int64_t> lacking;
      std::set<uint64_t> counts;
      for (int64_t r : ran) {
        auto it = s->calls_by_rank.find(r);
        const uint64_t n = it == s->calls_by_rank.end() ? 0 : it->second;
        if (!n) lacking.insert(r);
        else counts.insert(n);
      }
      if (lacking.empty() && counts.size() <= 1) continue;
      if (++n_differing > 50) continue;
      JsonValue by_rank = JsonValue::object();
      std::string calls_text;
      for (int64_t r : ran) {
        auto it = s->calls_by_rank.find(r);
        const uint64_t n = it == s->calls_by_rank.end() ? 0 : it->second;
        by_rank.set(std::to_string(r), JsonValue::integer(static_cast<int64_t>(n)));
        calls_text += (calls_text.empty() ? "" : " / ") + std::to_string(n);
      }
      differing.push_back(JsonValue::object({{"signature_sha256", JsonValue::string(s->sha)},
                                             {"signature", JsonValue::string(s->text)},
                                             {"calls_by_rank", std::move(by_rank)},
                                             {"missing_on_ranks", ranks_json(lacking)}}));
      if (n_differing <= 10)
        differing_md += "| `" + s->text + "` " + s->sha.substr(0, 12) + " | " + calls_text + " | " +
                        (lacking.empty() ? "-" : ranks_text(lacking)) + " |\n";
    }
    // Timing and the straggler: among the ranks that ran the stage, the one that waits least in collectives is
    // the one the others wait for; without collectives, the one longest in its calls.
    JsonValue timing = JsonValue::array();
    JsonValue straggler = JsonValue::null();
    std::vector<double> waits, busy, spans;
    int64_t least_wait_rank = -1, most_busy_rank = -1;
    double least_wait = 0, most_wait = 0, most_busy = 0;
    for (int64_t r : ran) {
      auto it = times[stage].find(r);
      if (it == times[stage].end()) continue;
      const StageTime& t = it->second;
      const double in_calls = static_cast<double>(t.in_calls_ns) / 1e9, wait = static_cast<double>(t.in_collectives_ns) / 1e9;
      timing.push_back(JsonValue::object({{"rank", JsonValue::integer(r)},
                                          {"span_seconds", t.any ? JsonValue::floating(t.span_s()) : JsonValue::null()},
                                          {"in_recorded_calls_seconds", t.any ? JsonValue::floating(in_calls) : JsonValue::null()},  // collectives apart
                                          {"in_collectives_seconds", any_collective ? JsonValue::floating(wait) : JsonValue::null()},
                                          {"collective_calls", JsonValue::integer(static_cast<int64_t>(t.collective_calls))},
                                          {"gpu_busy_seconds", gpu_s[stage].count(r) ? JsonValue::floating(gpu_s[stage][r]) : JsonValue::null()}}));
      char wait_text[32] = "-", span_text[32] = "-", calls_text[32] = "-", line[240];
      if (any_collective) std::snprintf(wait_text, sizeof wait_text, "%.3f", wait);
      if (t.any) std::snprintf(span_text, sizeof span_text, "%.3f", t.span_s()), std::snprintf(calls_text, sizeof calls_text, "%.3f", in_calls);
      std::snprintf(line, sizeof line, "| %s | %lld | %s | %s | %s | %s |\n", stage.c_str(), static_cast<long long>(r),
                    span_text, calls_text, wait_text, gpu_text(r, stage).c_str());
      timing_md << line;
      waits.push_back(wait), busy.push_back(in_calls), spans.push_back(t.span_s());
      if (least_wait_rank < 0 || wait < least_wait) least_wait = wait, least_wait_rank = r;
      most_wait = std::max(most_wait, wait);
      if (most_busy_rank < 0 || in_calls > most_busy) most_busy = in_calls, most_busy_rank = r;
    }
    std::string straggler_md;
    if (waits.size() >= 2) {
      const double span = median(spans), typical_busy = median(busy);
      if (any_collective && most_wait > 0 && most_wait - least_wait > std::max(0.05 * span, 1e-3)) {
        straggler = JsonValue::object({{"rank", JsonValue::integer(least_wait_rank)},
                                       {"by", JsonValue::string("least time waiting in collectives")},
                                       {"its_wait_seconds", JsonValue::floating(least_wait)},
                                       {"longest_wait_seconds", JsonValue::floating(most_wait)}});
        char line[240];
        std::snprintf(line, sizeof line, "rank %lld waits least in collectives (%.3f s; another rank up to %.3f s): "
                      "the others wait for it.\n", static_cast<long long>(least_wait_rank), least_wait, most_wait);
        straggler_md = line;
      } else if (!any_collective && typical_busy > 0 && most_busy > 1.1 * typical_busy && most_busy - typical_busy > 1e-3) {
        straggler = JsonValue::object({{"rank", JsonValue::integer(most_busy_rank)},
                                       {"by", JsonValue::string("longest time in recorded calls")},
                                       {"its_seconds", JsonValue::floating(most_busy)},
                                       {"median_seconds", JsonValue::floating(typical_busy)}});
        char line[240];
        std::snprintf(line, sizeof line, "rank %lld spends %.3f s in its recorded calls against a median %.3f s.\n",
                      static_cast<long long>(most_busy_rank), most_busy, typical_busy);
        straggler_md = line;
      }
    }
    JsonValue st = JsonValue::object();
    st.set("stage", JsonValue::string(stage));
    st.set("ranks", ranks_json(ran));
    st.set("rank_local", JsonValue::boolean(rank_local));
    st.set("signatures_differing_between_ranks", JsonValue::integer(static_cast<int64_t>(rank_local && ran.size() < 2 ? 0 : n_differing)));
    st.set("differing", std::move(differing));
    st.set("timing", std::move(timing));
    st.set("straggler", std::move(straggler));
    stages.push_back(std::move(st));
    md << "\n- stage `" << stage << "`: ranks " << ranks_text(ran);
    if (rank_local) md << " only (rank-local: it runs on a subset of the ranks by design, not an imbalance)";
    md << "; " << n_differing << " signature(s) whose calls differ between its ranks";
    if (n_differing) md << ":\n\n  | signature | calls per rank (" << ranks_text(ran) << ") | missing on |\n  |---|---|---|\n";
    std::istringstream rows(differing_md);
    for (std::string line; std::getline(rows, line);) md << "  " << line << "\n";
    if (n_differing > 10) md << "\n  " << n_differing - 10 << " more under `ranks` in coverage_audit.json.\n";
    if (!n_differing) md << "\n";
    if (!straggler_md.empty()) md << (n_differing ? "\n" : "") << "  Straggler: " << straggler_md;
  }
  if (any_records || any_collective)
    md << "\nWall time per rank and stage, from the call records: the stage's span (first call's start to last "
          "call's end), the time inside its recorded top-level calls (collectives apart), the time in c10d "
          "collectives (their wait included), and the GPU time its CUDA streams were busy where it was measured "
          "(LINGPROBE_STAGE_GPU_TIME).\n\n"
          "| stage | rank | span s | in recorded calls s | in collectives s | GPU busy s |\n"
          "|---|---|---|---|---|---|\n"
       << timing_md.str();
  RankView v;
  v.json = JsonValue::object({{"expected", ranks_json(expected)},
                              {"with_files", ranks_json(with_files)},
                              {"missing", ranks_json(missing)},
                              {"collectives", JsonValue::string(collectives_note)},
                              {"stages", std::move(stages)}});
  v.markdown = md.str();
  return v;
}

}  // namespace lingprobe::audit
