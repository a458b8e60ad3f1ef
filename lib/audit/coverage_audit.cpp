#include "audit/coverage_audit.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "audit/audit_rows.h"
#include "audit/audit_run.h"
#include "audit/key_evidence.h"
#include "audit/metadata_reader.h"
#include "audit/plan_report.h"
#include "audit/profile_evidence.h"
#include "audit/rank_view.h"
#include "audit/run_paths.h"
#include "audit/signature_text.h"
#include "format/canonical_json.h"
#include "format/flops.h"
#include "format/json_parse.h"
#include "format/sha256.h"
#include "format/signature_fields.h"
#include "sink/run_directory.h"

namespace lingprobe::audit {
namespace {

using format::JsonValue;

// Kernel time per call (µs) from a profile's kernels.json, if it has one.
std::optional<double> profile_time_us(const std::string& dir) {
  JsonValue kernels;
  return format::parse_json_file(dir + "/kernels.json", kernels) ? kernels_time_us(kernels) : std::nullopt;
}

// The counts a file's rows come from: its last counts record, else its call records (nullptr: outcome.status).
const std::map<uint32_t, uint64_t>* counts_of(const FileSummary& f, AuditOutcome& outcome) {
  const std::map<uint32_t, uint64_t>* counts = &f.counts;
  if (!f.has_counts) {
    counts = &f.call_records;
    outcome.warnings.push_back(
        {WarningCode::kNoCountsRecord, f.path + ": no counts record; counted its call records instead"});
  } else if (!f.final_counts) {
    outcome.warnings.push_back(
        {WarningCode::kNoFinalCounts,
         f.path + ": no final counts record (the process did not finish); using its last counts"});
  }
  if (f.truncated_last_line)
    outcome.warnings.push_back(
        {WarningCode::kTruncatedLastLine, f.path + ": truncated last line skipped (killed while writing?)"});
  for (const auto& [id, n] : *counts)
    if (!f.signature_sha.count(id)) {
      bad_input(outcome,
                f.path + ": counts name signature id " + std::to_string(id) + ", which the file never defines");
      return nullptr;
    }
  return counts;
}

void add_other_process(AuditRun& a, const FileSummary& f, const std::map<uint32_t, uint64_t>& counts) {
  uint64_t calls = 0;
  for (const auto& [id, n] : counts) calls += n;
  a.other_calls += calls;
  a.others.push_back(
      JsonValue::object({{"path", JsonValue::string(relative(f.path, a.run_dir))},
                         {"sha256", JsonValue::string(f.sha256)},
                         {"role", JsonValue::string(f.role)},
                         {"pid", JsonValue::integer(f.pid)},
                         {"parent_pid", f.parent_pid >= 0 ? JsonValue::integer(f.parent_pid) : JsonValue::null()},
                         {"calls", JsonValue::integer(static_cast<int64_t>(calls))},
                         {"signatures", JsonValue::integer(static_cast<int64_t>(counts.size()))}}));
}

bool define_signature(Signature& s, const std::string& sha, FileSummary& f, AuditOutcome& outcome) {
  s.sha = sha;
  auto parsed = format::parse_json(f.signature_json[sha]);
  if (!parsed.status.ok() || parsed.value.kind() != JsonValue::Kind::Object)
    return bad_input(outcome, f.path + ": signature " + sha + " has malformed signature_json");
  s.value = std::move(parsed.value);
  const JsonValue* st = s.value.find("stage");
  const JsonValue* op = s.value.find("op");
  s.stage = st && st->kind() == JsonValue::Kind::String ? st->as_string() : "unstaged";
  s.op = op && op->kind() == JsonValue::Kind::String ? op->as_string() : "?";
  s.flops = format::flops_per_call(s.value);
  return true;
}

bool add_signature_calls(AuditRun& a, FileSummary& f, const std::map<uint32_t, uint64_t>& counts) {
  for (const auto& [id, n] : counts) {
    const std::string& sha = f.signature_sha.at(id);
    Signature& s = a.sigs[sha];
    if (s.sha.empty() && !define_signature(s, sha, f, a.outcome)) return false;
    if (n == 0) continue;
    s.calls_by_rank[f.rank] += n;
    s.calls += n;
    a.ranks.insert(f.rank);
    const auto t = f.call_times.find(id);
    if (t != f.call_times.end()) s.timed_calls += t->second.top_level_calls, s.host_ns += t->second.top_level_ns;
    s.flop_calls += !f.nested_calls || f.call_records.empty() ? n
                    : t != f.call_times.end()                 ? t->second.top_level_records
                                                              : 0;
  }
  return true;
}

void add_evidence_and_stalls(AuditRun& a, const FileSummary& f) {
  for (const auto& e : f.snapshots) {
    auto it = f.signature_sha.find(e.id);
    if (it != f.signature_sha.end()) a.sigs[it->second].snapshots.push_back(e);
  }
  for (const auto& e : f.profiles) {
    auto it = f.signature_sha.find(e.id);
    if (it != f.signature_sha.end()) a.sigs[it->second].profiles.push_back(e);
    WindowStall& st = a.stalls[f.rank];
    ++st.windows;
    ++st.by_status[e.status.empty() ? "unknown" : e.status];
    if (e.window_seconds >= 0)
      st.window_s += e.window_seconds, st.max_window_s = std::max(st.max_window_s, e.window_seconds);
    if (e.lock_wait_seconds >= 0) st.lock_wait_s += e.lock_wait_seconds;
  }
  for (const auto& t : f.timings) {  // a key's timed call: its kernel time wins over the counters' own
    auto it = f.signature_sha.find(t.id);
    if (it == f.signature_sha.end() || t.status != "passed") continue;
    Signature& sig = a.sigs[it->second];
    sig.timed_call = true;
    if (!sig.timed_kernel_us)
      if (const auto kernels = timed_kernels(t)) sig.timed_kernel_us = kernels_time_us(*kernels);
    WindowStall& st = a.stalls[f.rank];
    ++st.timing_windows;
    if (t.window_seconds >= 0) st.timing_s += t.window_seconds;
  }
  if (auto it = f.sampling.find("profile_stall_us"); it != f.sampling.end()) {
    WindowStall& st = a.stalls[f.rank];
    st.stall_us = std::max<int64_t>(st.stall_us, 0) + static_cast<int64_t>(it->second);
  }
}

void add_file_totals(AuditRun& a, const FileSummary& f) {
  for (const auto& [what, reasons] : f.dropped) {
    const bool evidence = what == "snapshots" || what == "profiles" || what == "timings";
    for (const auto& [reason, n] : reasons) {
      a.dropped[what][reason] += n;
      (evidence ? a.evidence_refused : a.records_lost) += n;
    }
  }
  for (const auto& [k, n] : f.sampling) a.sampling[k] += n;
  for (const auto& [k, n] : f.unsampled) a.unsampled[k] += n;
  a.refusals.insert(a.refusals.end(), f.refusals.begin(), f.refusals.end());
  a.plans.insert(a.plans.end(), f.plans.begin(), f.plans.end());
  for (const auto& [k, n] : f.nested) a.nested[k] += n;
  for (const auto& [k, n] : f.compile_time) a.compile_time[k] += n;
  a.source_rows.emplace_back(relative(f.path, a.run_dir), f.sha256);
  a.row_files.push_back(&f);
  ++a.used_files;
}

void reject(AuditRun& a, const Evidence& e, const std::string& why) {
  a.rejected.push_back(JsonValue::object({{"path", JsonValue::string(e.path)}, {"reason", JsonValue::string(why)}}));
  a.outcome.warnings.push_back({WarningCode::kEvidenceRejected, "evidence " + e.path + " not counted: " + why});
}

void keep_unaltered_snapshots(AuditRun& a, Signature& sig) {
  std::vector<Evidence> kept;
  std::set<std::string> seen;
  for (const auto& e : sig.snapshots) {
    if (!seen.insert(e.path).second) continue;
    std::string actual;
    if (!evidence_path_inside(e.path))
      reject(a, e, "its path leaves the run directory");
    else if (!format::sha256_file_hex(a.run_dir + "/" + e.path, actual))
      reject(a, e, "missing");
    else if (actual != e.sha256)
      reject(a, e, "its SHA-256 differs from the one recorded (altered after the run)");
    else
      kept.push_back(e);
  }
  sig.snapshots = std::move(kept);
}

// A signature's profiles whose manifest still hashes as recorded and that hold counters (its kernel time).
void keep_unaltered_profiles(AuditRun& a, Signature& sig) {
  std::vector<Evidence> kept;
  std::set<std::string> seen;
  for (const auto& e : sig.profiles) {
    if (!seen.insert(e.path).second) continue;
    std::string actual;
    if (!evidence_path_inside(e.path)) {
      reject(a, e, "its path leaves the run directory");
      continue;
    }
    const std::string dir = a.run_dir + "/" + e.path;
    if (!format::sha256_file_hex(dir + "/manifest.json", actual))
      reject(a, e, "its manifest.json is missing");
    else if (actual != e.sha256)
      reject(a, e, "its manifest's SHA-256 differs from the one recorded");
    else if (auto t = profile_time_us(dir)) {
      if (!sig.kernel_time_us) sig.kernel_time_us = t;
      kept.push_back(e);
    }  // a profile without counters (e.g. counters unavailable) is not counter evidence
  }
  sig.profiles = std::move(kept);
  if (sig.timed_kernel_us) sig.kernel_time_us = sig.timed_kernel_us;
}

// A complete file that a killed process renamed into place but did not
// live to record (its record, even its signature's, was still queued):
// its name says the rank, and a file of that rank ends without its final
// counts, or is empty, or the rank (below the world size) has no metadata
// file at all (killed before its metadata writer created it). Listed apart
// (unrecorded_evidence), not counted, not a warning.
bool killed_before_recording(const AuditRun& a, const std::set<int64_t>& ranks_with_files, const std::string& name) {
  static const std::regex kWho("_rank([0-9]+)_[0-9a-f]{16}(_|\\.pt$|$)");
  std::smatch m;
  if (!std::regex_search(name, m, kWho)) return false;
  const int64_t rank = std::stoll(m[1].str());
  // its rank's file without final counts, or empty: killed before its metadata writer's first flush
  if (rank < a.world_size && !ranks_with_files.count(rank)) return true;
  return a.ranks_never_written.count(rank) ||
         std::any_of(a.summaries.begin(), a.summaries.end(),
                     [rank](const FileSummary& f) { return f.role != "child" && f.rank == rank && !f.final_counts; });
}

// Files under snapshots/ and profiles/ that no record names: unrecorded, or foreign.
void list_unnamed_evidence(AuditRun& a, const std::set<std::string>& named) {
  std::set<int64_t> ranks_with_files;  // on disk, whichever files the audit was given
  for (const auto& path : sink::metadata_files(a.run_dir)) ranks_with_files.insert(rank_in_file_name(basename(path)));
  for (const char* sub : {"snapshots", "profiles"})
    for (const auto& name : list_dir(a.run_dir + "/" + sub)) {
      const std::string rel = std::string(sub) + "/" + name;
      if (named.count(rel)) continue;
      if (killed_before_recording(a, ranks_with_files, name)) {
        a.unrecorded.push_back(JsonValue::object(
            {{"path", JsonValue::string(rel)},
             {"reason", JsonValue::string("complete, but its process ended (killed) before recording it")}}));
        continue;
      }
      a.foreign.push_back(JsonValue::object(
          {{"path", JsonValue::string(rel)}, {"reason", JsonValue::string("not named by this run's metadata")}}));
    }
  if (!a.foreign.items().empty())
    a.outcome.warnings.push_back(
        {WarningCode::kForeignEvidence,
         std::to_string(a.foreign.items().size()) +
             " file(s) under snapshots/ or profiles/ are not this run's evidence (listed under "
             "foreign_evidence; not counted)"});
}

// Rows in the seed's order: stage, calls descending, sha ascending.
void sort_rows(AuditRun& a) {
  for (const auto& [sha, s] : a.sigs) a.all.push_back(&s);
  std::sort(a.all.begin(), a.all.end(), [](const Signature* x, const Signature* y) {
    if (x->stage != y->stage) return x->stage < y->stage;
    if (x->calls != y->calls) return x->calls > y->calls;
    return x->sha < y->sha;
  });
  for (auto* s : a.all) a.by_stage[s->stage].push_back(s);
}

JsonValue counts_json(const std::map<std::string, uint64_t>& counts) {
  JsonValue o = JsonValue::object();
  for (const auto& [k, n] : counts) o.set(k, JsonValue::integer(static_cast<int64_t>(n)));
  return o;
}

std::string scope_text(const AuditRun& a) {
  return "All recorded metadata calls of one lingprobe run (" + std::to_string(a.used_files) + " file(s), " +
         std::to_string(a.ranks.size()) + " rank(s), world size " + std::to_string(a.world_size) +
         "), audited against this run's own evidence: 'same_structural_signature_ncu_inputs' lists each signature's "
         "profiles with hardware counters, measured inline on this run's own calls (the input is that call's snapshot "
         "where one exists). Exact op, nested argument shape/stride/dtype/scalars, kwargs and output metadata; device "
         "removed for cross-rank comparison. FLOPs are analytic (2 per multiply-add, bias included; data movement 0; "
         "null where no formula is known).";
}

// What each key refused evidence at some call holds in the end (its signatures' snapshots, passed profiles and
// timed calls).
std::map<std::string, HeldEvidence> held_evidence(const std::map<std::string, Signature>& sigs) {
  std::map<std::string, HeldEvidence> held;
  for (const auto& [sha, sig] : sigs) {
    if (sig.snapshots.empty() && sig.profiles.empty() && !sig.timed_call) continue;
    HeldEvidence& h = held[format::input_key_sha256(sig.value)];
    h.snapshot = h.snapshot || !sig.snapshots.empty();
    for (const auto& p : sig.profiles) h.counters = h.counters || p.status == "passed";
    h.timed = h.timed || sig.timed_call;
  }
  return held;
}

// Each rank's stall in counter windows: its JSON rows, and its line of summary.md's table (into a.stall_table).
JsonValue counter_window_rows(AuditRun& a) {
  JsonValue stall_rows = JsonValue::array();
  for (const auto& [rank, st] : a.stalls) {
    JsonValue statuses = JsonValue::object();
    std::string status_text;
    for (const auto& [k, n] : st.by_status) {
      statuses.set(k, JsonValue::integer(static_cast<int64_t>(n)));
      status_text += (status_text.empty() ? "" : ", ") + k + " " + std::to_string(n);
    }
    const double total = st.stall_us >= 0 ? static_cast<double>(st.stall_us) / 1e6 : st.window_s + st.timing_s;
    stall_rows.push_back(
        JsonValue::object({{"rank", JsonValue::integer(rank)},
                           {"windows", JsonValue::integer(static_cast<int64_t>(st.windows))},
                           {"by_status", std::move(statuses)},
                           {"window_seconds_total", JsonValue::floating(st.window_s)},
                           {"lock_wait_seconds_total", JsonValue::floating(st.lock_wait_s)},
                           {"max_window_seconds", JsonValue::floating(st.max_window_s)},
                           {"timing_windows", JsonValue::integer(static_cast<int64_t>(st.timing_windows))},
                           {"timing_seconds_total", JsonValue::floating(st.timing_s)},
                           {"stall_seconds_total", JsonValue::floating(total)}}));
    char line[160];
    std::snprintf(line, sizeof line, "| %lld | %llu | %.2f | %.2f | %.2f | %.2f | ", static_cast<long long>(rank),
                  static_cast<unsigned long long>(st.windows), total, st.window_s, st.lock_wait_s, st.max_window_s);
    if (st.timing_windows)
      status_text += (status_text.empty() ? "" : ", ") + std::to_string(st.timing_windows) + " timed call(s)";
    a.stall_table += line + status_text + " |\n";
  }
  return stall_rows;
}

}  // namespace

// 2b. The ranks' files summed into signatures and totals; children and other processes apart.
bool total_ranks(AuditRun& a) {
  a.run_id = a.run_ids.empty() ? "" : *a.run_ids.begin();
  for (FileSummary& f : a.summaries) {
    const std::map<uint32_t, uint64_t>* counts = counts_of(f, a.outcome);
    if (!counts) return false;
    if (f.role == "child" || (f.role != "rank" && a.any_rank)) {
      add_other_process(a, f, *counts);
      continue;
    }
    if (a.world_size >= 0 && f.world_size != a.world_size)
      return bad_input(a.outcome, f.path + ": world_size " + std::to_string(f.world_size) + " disagrees with " +
                                      std::to_string(a.world_size) +
                                      " of the files before it; these files are not one run");
    a.world_size = f.world_size;
    if (!add_signature_calls(a, f, *counts)) return false;
    add_evidence_and_stalls(a, f);
    add_file_totals(a, f);
  }
  for (const auto& [rank, f] : last_process_per_rank(a.row_files))
    if (f->interrupted())
      a.outcome.warnings.push_back({WarningCode::kInterrupted, f->path + ": ended by " + f->ended_by +
                                                                   " (the job was interrupted): its counts are "
                                                                   "complete up to then, the run is not"});
  // Signatures defined but never counted carry no calls: not rows.
  for (auto it = a.sigs.begin(); it != a.sigs.end();) it = it->second.calls ? std::next(it) : a.sigs.erase(it);
  std::vector<RankViewSignature> rank_signatures;
  for (const auto& [sha, s] : a.sigs)
    rank_signatures.push_back({sha, s.stage, s.op, short_signature(s.value), s.calls_by_rank});
  a.ranks_view = rank_view(a.world_size, a.row_files, rank_signatures);
  return true;
}

// 3. Evidence belongs to its run: only files this run's own records name,
// whose SHA-256 still matches (a profile's is its manifest.json's). Anything
// else under snapshots/ or profiles/ is foreign: reported, never counted.
void check_evidence(AuditRun& a) {
  std::set<std::string> named;
  for (const FileSummary& f : a.summaries) {
    for (const auto& e : f.snapshots) named.insert(e.path);
    for (const auto& e : f.profiles) named.insert(e.path);
  }
  for (auto& [sha, sig] : a.sigs) {
    keep_unaltered_snapshots(a, sig);
    keep_unaltered_profiles(a, sig);
  }
  list_unnamed_evidence(a, named);
}

// 4. The report: rows in the seed's order, stages, coverage, and what the files say of sampling and ranks.
void build_report(AuditRun& a) {
  sort_rows(a);
  JsonValue rows = JsonValue::array();
  for (const Signature* s : a.all) rows.push_back(row_json(*s));
  for (const auto& [stage, group] : a.by_stage) a.stages.push_back(stage_json(stage, group));
  std::sort(a.source_rows.begin(), a.source_rows.end());
  for (const auto& [p, sha] : a.source_rows)
    a.sources.push_back(JsonValue::object({{"path", JsonValue::string(p)}, {"sha256", JsonValue::string(sha)}}));
  a.overall = coverage_json(a.all);
  JsonValue dropped_json = JsonValue::object();
  for (const auto& [what, reasons] : a.dropped) dropped_json.set(what, counts_json(reasons));
  JsonValue ranks_json = JsonValue::array();
  for (int64_t r : a.ranks) ranks_json.push_back(JsonValue::integer(r));
  JsonValue& report = a.report;
  report.set("status", JsonValue::string("structural_signature_coverage_audited"));
  report.set("scope", JsonValue::string(scope_text(a)));
  report.set("stages", a.stages);
  report.set("rows", std::move(rows));
  report.set("sources", std::move(a.sources));
  report.set("coverage", a.overall);
  report.set("run", JsonValue::object({{"run_id", JsonValue::string(a.run_id)},
                                       {"world_size", JsonValue::integer(a.world_size)},
                                       {"ranks", std::move(ranks_json)},
                                       {"metadata_bytes", JsonValue::integer(static_cast<int64_t>(a.bytes_total))}}));
  report.set("dropped", std::move(dropped_json));
  report.set("other_processes", a.others);
  if (!a.compile_time.empty()) report.set("compile_time_calls", counts_json(a.compile_time));
  if (!a.nested.empty()) report.set("nested_calls", counts_json(a.nested));
  a.refused_keys = key_evidence(a.refusals, held_evidence(a.sigs));
  if (!a.sampling.empty()) {
    JsonValue sj = counts_json(a.sampling);
    sj.set("unsampled_keys", counts_json(a.unsampled));
    sj.set("refusals", key_evidence_json(a.refused_keys));
    if (!a.plans.empty()) sj.set("plan", plan_json(a.plans));
    report.set("sampling", std::move(sj));
  }
  JsonValue stall_rows = counter_window_rows(a);
  if (!a.stalls.empty()) report.set("counter_windows", JsonValue::object({{"by_rank", std::move(stall_rows)}}));
  report.set("ranks", a.ranks_view.json);
  report.set("rejected_evidence", std::move(a.rejected));
  report.set("foreign_evidence", std::move(a.foreign));
  if (!a.unrecorded.items().empty()) report.set("unrecorded_evidence", std::move(a.unrecorded));
  report.set("warnings", warnings_json(a.outcome.warnings));
}

AuditOutcome run_audit(const AuditOptions& options) {
  AuditOutcome outcome;
  if (options.inputs.empty()) {
    bad_input(outcome, "no input: give a run directory or metadata JSONL files");
    return outcome;
  }
  AuditRun a(options, outcome);
  if (!find_inputs(a) || !read_inputs(a) || !total_ranks(a)) return outcome;
  check_evidence(a);
  build_report(a);
  write_outputs(a);
  return outcome;
}

}  // namespace lingprobe::audit
