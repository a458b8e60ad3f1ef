#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "audit/audit_run.h"
#include "audit/operator_table.h"
#include "audit/plan_report.h"
#include "audit/run_paths.h"
#include "audit/signature_text.h"
#include "audit/summary_file.h"
#include "format/canonical_json.h"
#include "sink/run_directory.h"

namespace lingprobe::audit {
namespace {

std::string pct(const JsonValue& fraction) {
  const JsonValue* f = fraction.find("fraction");
  if (!f || f->is_null()) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", f->as_float() * 100);
  return buf;
}

std::string short_signature(const Signature& s) { return audit::short_signature(s.value); }

// A stage's signatures by their host time (the calling thread's wall time inside their top-level calls, from the
// call records) beside the kernel time the counters measured, where they did.
std::string top_by_time_markdown(const std::vector<const Signature*>& group) {
  std::vector<const Signature*> timed;
  int64_t stage_ns = 0;
  for (auto* s : group)
    if (s->timed_calls) timed.push_back(s), stage_ns += s->host_ns;
  if (timed.empty() || stage_ns <= 0) return "";
  std::sort(timed.begin(), timed.end(), [](auto* a, auto* b) { return a->host_ns > b->host_ns; });
  std::ostringstream md;
  md << "\nTop by time (host: the calling thread's wall time inside the calls, from the call records; on a GPU that "
        "is the launch, not the kernel, unless the op waits for it; kernel: measured by the counters):\n\n"
        "| host ms | share | calls | host us/call | kernel us/call | signature |\n|---|---|---|---|---|---|\n";
  for (size_t k = 0; k < timed.size() && k < 5; ++k) {
    auto* s = timed[k];
    char share[16];
    std::snprintf(share, sizeof share, "%.1f%%", 100.0 * static_cast<double>(s->host_ns) / stage_ns);
    md << "| " << short_decimal(static_cast<double>(s->host_ns) / 1e6) << " | " << share << " | " << s->timed_calls
       << " | " << short_decimal(static_cast<double>(s->host_ns) / 1e3 / static_cast<double>(s->timed_calls)) << " | "
       << (s->kernel_time_us ? short_decimal(*s->kernel_time_us) : std::string("-")) << " | `" << short_signature(*s)
       << "` " << s->sha.substr(0, 12) << " |\n";
  }
  return md.str();
}

// Where the run has signatures whose FLOPs are unknown: one line saying the FLOP figures leave them out.
std::string unknown_flops_line(const JsonValue& overall) {
  const JsonValue* n = overall.find("signatures_without_flop_formula");
  if (!n || n->kind() != JsonValue::Kind::Int || n->as_int() == 0) return "";
  return "\n" + std::to_string(n->as_int()) +
         " signature(s) have unknown FLOPs (no formula, or shapes unreadable): every FLOP figure and share leaves "
         "them out, whatever their time "
         "(docs/AUDIT.md lists the formulas; their rows say `flops_per_call: null`).\n";
}

// The run's coverage by snapshots and counters: a table, or one line where the run took neither; then the
// signatures without a FLOP formula.
std::string coverage_markdown(const JsonValue& overall) {
  auto covered = [&](const char* kind) {
    const JsonValue* n = overall.find(kind)->find("by_signatures")->find("covered");
    return n && n->kind() == JsonValue::Kind::Int && n->as_int() > 0;
  };
  if (!covered("snapshots") && !covered("counters"))
    return "\n## Coverage\n\nNo snapshot or counter evidence in this run (LINGPROBE_SNAPSHOTS=1 and "
           "LINGPROBE_PROFILE=1 "
           "take them): nothing is covered yet.\n" +
           unknown_flops_line(overall);
  std::ostringstream md;
  md << "\n## Coverage\n\n| coverage | by signatures | by calls | by FLOPs | by measured time "
        "|\n|---|---|---|---|---|\n";
  for (const char* kind : {"snapshots", "counters"}) {
    const JsonValue& c = *overall.find(kind);
    md << "| " << kind << " | " << pct(*c.find("by_signatures")) << " | " << pct(*c.find("by_calls")) << " | "
       << pct(*c.find("by_flops")) << " | "
       << (c.find("by_measured_time_us") ? pct(*c.find("by_measured_time_us")) : std::string("-")) << " |\n";
  }
  md << unknown_flops_line(overall);
  return md.str();
}

// A stage's ops without a FLOP formula that hold 1% or more of its host time (from the call records), the largest
// three: every FLOP figure leaves them out, however long they take.
std::string unknown_flops_by_time_markdown(const std::vector<const Signature*>& group) {
  int64_t stage_ns = 0;
  std::map<std::string, int64_t> by_op;
  for (auto* s : group) {
    stage_ns += s->host_ns;
    if (!s->flops) by_op[s->op] += s->host_ns;
  }
  std::vector<std::pair<int64_t, std::string>> heavy;
  for (const auto& [op, ns] : by_op)
    if (stage_ns > 0 && ns * 100 >= stage_ns) heavy.emplace_back(ns, op);
  if (heavy.empty()) return "";
  std::sort(heavy.rbegin(), heavy.rend());
  std::ostringstream md;
  md << "\nFLOPs unknown (no formula, or shapes unreadable; in no FLOP figure or share), by share of the stage's host "
        "time:";
  for (size_t k = 0; k < heavy.size() && k < 3; ++k) {
    char share[16];
    std::snprintf(share, sizeof share, "%.1f%%", 100.0 * static_cast<double>(heavy[k].first) / stage_ns);
    md << (k ? "," : "") << " `" << heavy[k].second << "` " << share;
  }
  md << ".\n";
  return md.str();
}

// A stage's signatures by FLOPs (calls x FLOPs/call), then by calls.
std::string top_by_flops_and_calls_markdown(const std::vector<const Signature*>& group) {
  std::ostringstream md;
  std::vector<const Signature*> by_flops;
  for (auto* s : group)
    if (s->flops && *s->flops > 0) by_flops.push_back(s);
  std::sort(by_flops.begin(), by_flops.end(), [](auto* a, auto* b) {
    return static_cast<long double>(*a->flops) * a->flop_calls > static_cast<long double>(*b->flops) * b->flop_calls;
  });
  if (!by_flops.empty()) {
    md << "\nTop by FLOPs (calls x FLOPs/call):\n\n| total FLOPs | calls | signature |\n|---|---|---|\n";
    for (size_t k = 0; k < by_flops.size() && k < 5; ++k) {
      auto* s = by_flops[k];
      md << "| " << human_count(static_cast<long double>(*s->flops) * s->flop_calls) << " | " << s->calls << " | `"
         << short_signature(*s) << "` " << s->sha.substr(0, 12) << " |\n";
    }
  }
  md << "\nTop by calls:\n\n| calls | FLOPs/call | snapshot | counters | signature |\n|---|---|---|---|---|\n";
  for (size_t k = 0; k < group.size() && k < 5; ++k) {
    auto* s = group[k];
    md << "| " << s->calls << " | " << (s->flops ? human_count(*s->flops) : "unknown") << " | "
       << (s->snapshots.empty() ? "no" : "yes") << " | " << (s->profiles.empty() ? "no" : "yes") << " | `"
       << short_signature(*s) << "` " << s->sha.substr(0, 12) << " |\n";
  }
  return md.str();
}

// What the run has first: per stage its time, FLOPs and calls (the capability section, where counters ran, comes
// before all of this in summary.md); the coverage by evidence after them.
std::string make_summary(const std::map<std::string, std::vector<const Signature*>>& by_stage,
                         const std::vector<const Signature*>& all, const JsonValue& overall, const JsonValue& stages,
                         size_t files, const std::set<int64_t>& ranks, uint64_t records_lost,
                         uint64_t evidence_refused) {
  std::ostringstream md;
  uint64_t calls = 0;
  for (auto* s : all) calls += s->calls;
  md << "# lingprobe coverage audit\n\n"
     << all.size() << " distinct signatures, " << calls << " calls, from " << files << " metadata file(s) "
     << (ranks.empty() ? std::string("with no recorded call") : "of " + std::to_string(ranks.size()) + " rank(s)")
     << "; ";
  if (records_lost)
    md << records_lost
       << " record(s) lost (calls, call records, lines or stage names: `dropped` in coverage_audit.json says which)";
  else
    md << "no record lost";
  if (evidence_refused)
    md << "; " << evidence_refused
       << " sampled call(s) went without some evidence, each leaving its key to a later call (the Snapshots "
          "section says which keys still miss it)";
  md << ".\n";
  size_t i = 0;
  for (const auto& [stage, group] : by_stage) {
    const JsonValue& st = stages.items()[i++];
    md << "\n## Stage `" << stage << "`: " << group.size() << " signatures, " << st.find("recorded_calls")->as_int()
       << " calls\n"
       << operators_markdown(*st.find("operators"), 10) << top_by_time_markdown(group)
       << top_by_flops_and_calls_markdown(group);
    size_t uncovered = 0;
    for (auto* s : group) uncovered += s->profiles.empty();
    md << "\nNot covered by counters: " << uncovered << " of " << group.size() << " signatures";
    const JsonValue& cov = *st.find("coverage")->find("counters");
    md << " (" << pct(*cov.find("by_calls")) << " of calls, " << pct(*cov.find("by_flops")) << " of FLOPs covered).\n";
    md << unknown_flops_by_time_markdown(group);
  }
  md << coverage_markdown(overall);
  return md.str();
}

// Calls outside the rows: those nested below top-level calls, and torch.compile's on fake tensors.
std::string uncounted_calls_markdown(std::map<std::string, uint64_t>& nested,
                                     const std::map<std::string, uint64_t>& compile_time) {
  std::string md;
  if (!nested.empty())
    md += "\nCalls nested below top-level calls: " + std::to_string(nested["seen"]) +
          " reached lingprobe (each boxed by the dispatcher); RecordFunction was switched off below " +
          std::to_string(nested["suppressed_below"]) +
          " top-level call(s) (LINGPROBE_SUPPRESS_NESTED), whose nested calls were neither boxed nor counted.\n";
  if (!compile_time.empty()) {
    uint64_t total = 0;
    std::string kinds;
    for (const auto& [k, n] : compile_time)
      total += n, kinds += (kinds.empty() ? "" : ", ") + k + " " + std::to_string(n);
    md += "\nCalls torch.compile's tracing ran on fake tensors: " + std::to_string(total) + " (" + kinds +
          "), counted as compile time, outside the rows above.\n";
  }
  return md;
}

// What a reason in the counts record's `unsampled` means, for the summary ("" where the reason is a refusal, which
// the evidence table explains).
const char* unsampled_meaning(const std::string& reason) {
  if (reason == "signature_never_sampled")
    return "keys sampled once whose later calls, with the same inputs, returned another output (a shape-dependent "
           "op: nonzero, where, unique); the sample is of the first output's signature, the others have none";
  if (reason == "owned_by_another_rank") return "keys another rank samples (SAMPLE_COORDINATION=hash)";
  if (reason == "rule_skip_every_probability")
    return "keys none of whose calls the sampling rule made due (SAMPLE_SKIP, SAMPLE_EVERY, SAMPLE_PROBABILITY)";
  return "";
}

// What was sampled, the signatures without a snapshot and why, the refused keys and the sample plan.
std::string snapshots_markdown(AuditRun& a) {
  auto& sampling = a.sampling;
  std::vector<const Signature*> missing;
  for (auto* sg : a.all)
    if (sg->snapshots.empty()) missing.push_back(sg);
  std::string why;
  for (const auto& [k, n] : a.unsampled)
    if (n && k != "sampled_by_another_process") why += (why.empty() ? "" : ", ") + k + " " + std::to_string(n);
  std::string drops;
  if (auto it = a.dropped.find("snapshots"); it != a.dropped.end())
    for (const auto& [k, n] : it->second) drops += (drops.empty() ? "" : ", ") + k + " " + std::to_string(n);
  std::string md = "\n## Snapshots\n\n" + std::to_string(sampling["snapshots_written"]) + " snapshot(s), " +
                   human_count(static_cast<long double>(sampling["snapshot_bytes"])) + "B, of " +
                   std::to_string(sampling["keys"]) + " input key(s) seen by the ranks (each counted per rank). " +
                   std::to_string(missing.size()) + " of " + std::to_string(a.all.size()) +
                   " signatures have no snapshot" + (why.empty() ? "" : "; keys not sampled: " + why) +
                   (drops.empty() ? "" : "; samples dropped: " + drops) + ".\n";
  for (const auto& [k, n] : a.unsampled)
    if (n && *unsampled_meaning(k)) md += "- `" + k + "`: " + unsampled_meaning(k) + ".\n";
  for (size_t k = 0; k < missing.size() && k < 10; ++k)
    md += "- no snapshot: `" + short_signature(*missing[k]) + "` " + missing[k]->sha.substr(0, 12) + " (" +
          std::to_string(missing[k]->calls) + " calls)\n";
  if (!a.refused_keys.empty()) md += key_evidence_markdown(a.refused_keys, 20);
  md += plan_markdown(a.plans, 20);
  return md;
}

// Each rank's stall in counter windows, and the processes that are not ranks.
std::string stalls_and_others_markdown(const AuditRun& a) {
  std::string md;
  if (!a.stall_table.empty())
    md +=
        "\n## Counter windows: each rank's stall\n\nWall seconds the ranks spent in counter windows "
        "(kernel replay, one window at a time per GPU); the lock wait is time spent waiting for another "
        "rank's window; the total adds waits that timed out (the window then refused as "
        "`hardware_busy`).\n\n| rank | windows | stall s (total) | in windows s | of which lock wait s | "
        "longest window s | status |\n|---|---|---|---|---|---|---|\n" +
        a.stall_table;
  if (const size_t n_others = a.report.find("other_processes")->items().size())
    md += "\n## Other processes (not in the rows)\n\n" + std::to_string(n_others) +
          " process(es) started by the ranks or starting them (DataLoader or compile workers, an "
          "mp.spawn parent) recorded " +
          std::to_string(a.other_calls) + " call(s); they are listed under `other_processes` in coverage_audit.json.\n";
  return md;
}

// Marks the section below as the audit's own, rewritten by each audit until `lingprobe report` replaces it.
constexpr const char* kPlaceholderMark = "<!-- the audit's placeholder -->";

// Where the run has counters and `lingprobe report` has not run on it: the section the report will fill, saying so.
std::string capability_placeholder(const AuditRun& a) {
  size_t profiled = 0;
  for (const Signature* s : a.all)
    profiled +=
        std::any_of(s->profiles.begin(), s->profiles.end(), [](const Evidence& p) { return p.status == "passed"; });
  if (!profiled) return "";
  return std::string(kCapabilityHeading) + "\n" + kPlaceholderMark + "\n\n" + std::to_string(profiled) +
         " signature(s) have counter evidence: `lingprobe report " + a.run_dir +
         "` puts here what each achieved against the device's roofs, and the GPU time left on the table.\n\n" +
         kCapabilityEnd + "\n";
}

// The report and summary.md written (outcome.status kIoFailed when a file cannot be written).
void write_files(AuditRun& a) {
  AuditOutcome& outcome = a.outcome;
  if (std::string err = sink::make_directories(parent(outcome.report_path)); !err.empty()) {
    outcome.status = format::Status(format::StatusCode::kIoFailed, err);
    return;
  }
  // `lingprobe report`'s section of an earlier summary.md survives a re-audit.
  std::string summary_file;
  {
    std::ifstream old_summary(outcome.summary_path, std::ios::binary);
    std::stringstream text;
    text << old_summary.rdbuf();
    std::string capability = split_summary(text.str()).capability;
    if (capability.empty() || capability.find(kPlaceholderMark) != std::string::npos)
      capability = capability_placeholder(a);
    summary_file = compose_summary({outcome.summary, capability});
  }
  for (const auto& [path, text] : {std::make_pair(outcome.report_path, format::pretty_json(a.report) + "\n"),
                                   std::make_pair(outcome.summary_path, summary_file)})
    if (std::string err = sink::replace_file(path, text); !err.empty()) {
      outcome.status = format::Status(format::StatusCode::kIoFailed, err);
      return;
    }
  outcome.report = std::move(a.report);
}

// With LINGPROBE_NESTED=1 the nested calls are rows too: which calls the FLOPs count.
std::string nested_flops_markdown(const std::vector<FileSummary>& summaries) {
  bool nested = false, without_records = false;
  for (const auto& f : summaries)
    if (f.nested_calls) nested = true, without_records = without_records || f.call_records.empty();
  if (!nested) return "";
  return without_records
             ? "\nLINGPROBE_NESTED=1 without call records: nested rows cannot be told from top-level ones, so FLOPs "
               "and their coverage count every call (a conv2d's convolution and _convolution count again).\n"
             : "\nLINGPROBE_NESTED=1: calls nested below others are rows too (calls counts them all), while FLOPs and "
               "their coverage count top-level calls only (a conv2d runs convolution and _convolution inside it: its "
               "FLOPs count once, not three times).\n";
}

// A run whose op selection matched nothing: said where the coverage would be, not left to a table of zeros.
std::string nothing_matched_markdown(const AuditRun& a) {
  if (!a.all.empty()) return "";
  std::set<std::string> selections;
  for (const auto& f : a.summaries)
    if (f.role == "rank" || f.role == "single") selections.insert(f.ops);
  if (selections.size() != 1 || selections.begin()->empty()) return "";
  return "**0 calls matched LINGPROBE_OPS='" + *selections.begin() +
         "'** (this run's op selection). At exit, rank 0 (or the single process) named on stderr the patterns that "
         "matched no operator it ran, with the closest names it did run; op names are `namespace::name` "
         "(`aten::linear`), matched as written, case included.\n\n";
}

// Under the headline, when a process was ended by a signal: the run was cut short, its counts complete up to then.
std::string interrupted_markdown(const std::vector<const FileSummary*>& rank_files) {
  std::map<std::string, std::set<int64_t>> ranks_by_signal;
  for (const auto& [rank, f] : last_process_per_rank(rank_files))
    if (f->interrupted()) ranks_by_signal[f->ended_by].insert(rank);
  if (ranks_by_signal.empty()) return "";
  std::string text = "**Interrupted:**";
  for (const auto& [signal, ranks] : ranks_by_signal) {
    text += " rank(s)";
    for (int64_t r : ranks) text += " " + std::to_string(r);
    text += " ended by " + signal + ";";
  }
  return text + " the job did not run to its end, and these counts are those of the calls made before it.\n\n";
}

// Ranks written by several processes (SPEC section 4: a restarted process adds its file; the seed's sources had two
// pids per rank), whose counts are summed: said in the ranks' section. A new user's two launches with the same
// LINGPROBE_RUN_ID doubled every count without a word.
std::string several_processes_markdown(const std::vector<const FileSummary*>& rank_files) {
  std::map<int64_t, std::vector<int64_t>> pids;
  for (const FileSummary* f : rank_files) pids[f->rank].push_back(f->pid);
  std::string ranks;
  for (const auto& [rank, list] : pids) {
    if (list.size() < 2) continue;
    ranks += (ranks.empty() ? "" : "; ") + ("rank " + std::to_string(rank) + " (pids");
    for (int64_t pid : list) ranks += " " + std::to_string(pid);
    ranks += ")";
  }
  if (ranks.empty()) return "";
  return "\nRanks written by several processes, their counts summed: " + ranks +
         ". A restarted process adds its file to its launch's; so does another launch given the same run id "
         "(LINGPROBE_RUN_ID), whose calls are then counted here too.\n";
}

}  // namespace

// 5. The summary, then the files: the report and summary.md (nothing when anything failed before).
void write_outputs(AuditRun& a) {
  AuditOutcome& outcome = a.outcome;
  outcome.report_path = a.options.output.empty() ? a.run_dir + "/reports/coverage_audit.json" : a.options.output;
  outcome.summary_path = parent(outcome.report_path) + "/summary.md";
  outcome.summary =
      make_summary(a.by_stage, a.all, a.overall, a.stages, a.used_files, a.ranks, a.records_lost, a.evidence_refused);
  const size_t count_line_end = outcome.summary.find('\n', outcome.summary.find("\n\n") + 2);
  if (std::string nothing = nothing_matched_markdown(a); !nothing.empty())
    outcome.summary.insert(count_line_end + 1, "\n" + nothing);
  if (std::string interrupted = interrupted_markdown(a.row_files); !interrupted.empty())
    outcome.summary.insert(count_line_end + 1, "\n" + interrupted);
  outcome.summary += uncounted_calls_markdown(a.nested, a.compile_time);
  outcome.summary += nested_flops_markdown(a.summaries);
  if (!a.sampling.empty()) outcome.summary += snapshots_markdown(a);
  outcome.summary += a.ranks_view.markdown;
  outcome.summary += several_processes_markdown(a.row_files);
  outcome.summary += stalls_and_others_markdown(a);
  outcome.run_dir = a.run_dir;
  if (!a.options.write) {
    outcome.report = std::move(a.report);
    return;
  }
  write_files(a);
}

}  // namespace lingprobe::audit
