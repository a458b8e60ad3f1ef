#include <cstdio>
#include <fstream>
#include <sstream>

#include "audit/audit_run.h"
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

std::string make_summary(const std::map<std::string, std::vector<const Signature*>>& by_stage,
                         const std::vector<const Signature*>& all, const JsonValue& overall, const JsonValue& stages,
                         size_t files, const std::set<int64_t>& ranks, uint64_t dropped) {
  std::ostringstream md;
  uint64_t calls = 0;
  for (auto* s : all) calls += s->calls;
  md << "# lingprobe coverage audit\n\n"
     << all.size() << " distinct signatures, " << calls << " calls, from " << files << " metadata file(s) of "
     << ranks.size() << " rank(s); " << dropped
     << " dropped (call records, snapshots or profiles: `dropped` in coverage_audit.json says which).\n\n"
     << "| coverage | by signatures | by calls | by FLOPs | by measured time |\n|---|---|---|---|---|\n";
  for (const char* kind : {"snapshots", "counters"}) {
    const JsonValue& c = *overall.find(kind);
    md << "| " << kind << " | " << pct(*c.find("by_signatures")) << " | " << pct(*c.find("by_calls")) << " | "
       << pct(*c.find("by_flops")) << " | "
       << (c.find("by_measured_time_us") ? pct(*c.find("by_measured_time_us")) : std::string("-")) << " |\n";
  }
  size_t i = 0;
  for (const auto& [stage, group] : by_stage) {
    const JsonValue& st = stages.items()[i++];
    md << "\n## Stage `" << stage << "`: " << group.size() << " signatures, " << st.find("recorded_calls")->as_int()
       << " calls\n\n";
    std::vector<const Signature*> by_calls = group, by_flops;
    for (auto* s : group)
      if (s->flops && *s->flops > 0) by_flops.push_back(s);
    std::sort(by_flops.begin(), by_flops.end(), [](auto* a, auto* b) {
      return static_cast<long double>(*a->flops) * a->calls > static_cast<long double>(*b->flops) * b->calls;
    });
    md << "Top by calls:\n\n| calls | FLOPs/call | snapshot | counters | signature |\n|---|---|---|---|---|\n";
    for (size_t k = 0; k < by_calls.size() && k < 5; ++k) {
      auto* s = by_calls[k];
      md << "| " << s->calls << " | " << (s->flops ? human_count(*s->flops) : "unknown") << " | "
         << (s->snapshots.empty() ? "no" : "yes") << " | " << (s->profiles.empty() ? "no" : "yes") << " | `"
         << short_signature(*s) << "` " << s->sha.substr(0, 12) << " |\n";
    }
    if (!by_flops.empty()) {
      md << "\nTop by FLOPs (calls x FLOPs/call):\n\n| total FLOPs | calls | signature |\n|---|---|---|\n";
      for (size_t k = 0; k < by_flops.size() && k < 5; ++k) {
        auto* s = by_flops[k];
        md << "| " << human_count(static_cast<long double>(*s->flops) * s->calls) << " | " << s->calls << " | `"
           << short_signature(*s) << "` " << s->sha.substr(0, 12) << " |\n";
      }
    }
    size_t uncovered = 0;
    for (auto* s : group) uncovered += s->profiles.empty();
    md << "\nNot covered by counters: " << uncovered << " of " << group.size() << " signatures";
    const JsonValue& cov = *st.find("coverage")->find("counters");
    md << " (" << pct(*cov.find("by_calls")) << " of calls, " << pct(*cov.find("by_flops")) << " of FLOPs covered).\n";
  }
  return md.str();
}

}  // namespace

// 5. The summary, then the files: the report and summary.md (nothing when anything failed before).
void write_outputs(AuditRun& a) {
  const AuditOptions& options = a.options;
  AuditOutcome& outcome = a.outcome;
  const std::string& run_dir = a.run_dir;
  const auto& all = a.all;
  auto& nested = a.nested;
  const auto& compile_time = a.compile_time;
  auto& sampling = a.sampling;
  const auto& unsampled = a.unsampled;
  const auto& dropped = a.dropped;
  const auto& plans = a.plans;
  const auto& refused_keys = a.refused_keys;
  const auto& stall_table = a.stall_table;
  auto& report = a.report;
  outcome.report_path = options.output.empty() ? run_dir + "/reports/coverage_audit.json" : options.output;
  outcome.summary_path = parent(outcome.report_path) + "/summary.md";
  outcome.summary = make_summary(a.by_stage, all, a.overall, a.stages, a.used_files, a.ranks, a.dropped_total);
  if (!nested.empty())
    outcome.summary +=
        "\nCalls nested below top-level calls: " + std::to_string(nested["seen"]) +
        " reached lingprobe (each boxed by the dispatcher); RecordFunction was switched off below " +
        std::to_string(nested["suppressed_below"]) +
        " top-level call(s) (LINGPROBE_SUPPRESS_NESTED), whose nested calls were neither boxed nor counted.\n";
  if (!compile_time.empty()) {
    uint64_t total = 0;
    std::string kinds;
    for (const auto& [k, n] : compile_time)
      total += n, kinds += (kinds.empty() ? "" : ", ") + k + " " + std::to_string(n);
    outcome.summary += "\nCalls torch.compile's tracing ran on fake tensors: " + std::to_string(total) + " (" + kinds +
                       "), counted as compile time, outside the rows above.\n";
  }
  if (!sampling.empty()) {
    std::vector<const Signature*> missing;
    for (auto* sg : all)
      if (sg->snapshots.empty()) missing.push_back(sg);
    std::string why;
    for (const auto& [k, n] : unsampled)
      if (n && k != "sampled_by_another_process") why += (why.empty() ? "" : ", ") + k + " " + std::to_string(n);
    std::string drops;
    if (auto it = dropped.find("snapshots"); it != dropped.end())
      for (const auto& [k, n] : it->second) drops += (drops.empty() ? "" : ", ") + k + " " + std::to_string(n);
    outcome.summary += "\n## Snapshots\n\n" + std::to_string(sampling["snapshots_written"]) + " snapshot(s), " +
                       human_count(static_cast<long double>(sampling["snapshot_bytes"])) + "B, of " +
                       std::to_string(sampling["keys"]) + " input key(s) seen by the ranks (each counted per rank). " +
                       std::to_string(missing.size()) + " of " + std::to_string(all.size()) +
                       " signatures have no snapshot" + (why.empty() ? "" : "; keys not sampled: " + why) +
                       (drops.empty() ? "" : "; samples dropped: " + drops) + ".\n";
    for (size_t k = 0; k < missing.size() && k < 10; ++k)
      outcome.summary += "- no snapshot: `" + short_signature(*missing[k]) + "` " + missing[k]->sha.substr(0, 12) +
                         " (" + std::to_string(missing[k]->calls) + " calls)\n";
    if (!refused_keys.empty()) outcome.summary += key_evidence_markdown(refused_keys, 20);
    outcome.summary += plan_markdown(plans, 20);
  }
  outcome.summary += a.ranks_view.markdown;
  if (!stall_table.empty())
    outcome.summary +=
        "\n## Counter windows: each rank's stall\n\nWall seconds the ranks spent in counter windows "
        "(kernel replay, one window at a time per GPU); the lock wait is time spent waiting for another "
        "rank's window; the total adds waits that timed out (the window then refused as "
        "`hardware_busy`).\n\n| rank | windows | stall s (total) | in windows s | of which lock wait s | "
        "longest window s | status |\n|---|---|---|---|---|---|---|\n" +
        stall_table;
  if (const size_t n_others = report.find("other_processes")->items().size())
    outcome.summary += "\n## Other processes (not in the rows)\n\n" + std::to_string(n_others) +
                       " process(es) started by the ranks or starting them (DataLoader or compile workers, an "
                       "mp.spawn parent) recorded " +
                       std::to_string(a.other_calls) +
                       " call(s); they are listed under `other_processes` in coverage_audit.json.\n";
  outcome.run_dir = run_dir;
  if (!options.write) {
    outcome.report = std::move(report);
    outcome.ok = true;
    return;
  }
  if (std::string err = sink::make_directories(parent(outcome.report_path)); !err.empty()) {
    outcome.error = err;
    return;
  }
  // `lingprobe report`'s section of an earlier summary.md survives a re-audit.
  std::string summary_file;
  {
    std::ifstream old_summary(outcome.summary_path, std::ios::binary);
    std::stringstream text;
    text << old_summary.rdbuf();
    summary_file = compose_summary({outcome.summary, split_summary(text.str()).capability});
  }
  for (const auto& [path, text] : {std::make_pair(outcome.report_path, format::pretty_json(report) + "\n"),
                                   std::make_pair(outcome.summary_path, summary_file)})
    if (std::string err = sink::replace_file(path, text); !err.empty()) {
      outcome.error = err;
      return;
    }
  outcome.report = std::move(report);
  outcome.ok = true;
}

}  // namespace lingprobe::audit
