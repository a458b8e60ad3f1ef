// The audit's phases, `diff` and `trace` on a real run: the stored H200
// stand-in run with counters (tests/data/h200-seed-profile-run.tgz, 4 ranks),
// unpacked into a temporary directory. No torch, no GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>

#include "audit/audit_run.h"
#include "audit/audit_warning.h"
#include "audit/coverage_audit.h"
#include "audit/run_diff.h"
#include "audit/trace_export.h"
#include "format/canonical_json.h"
#include "test_support.h"

using namespace lingprobe;
using namespace lingprobe::audit;

namespace {

// A fresh copy of the stored run; its directory.
std::string unpacked_run() {
  const std::string dir = test::temp_dir("lpunit-audit-");
  const std::string cmd =
      "tar xzf '" + std::string(LINGPROBE_TEST_DATA_DIR) + "/h200-seed-profile-run.tgz' -C '" + dir + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
  return dir + "/seed-profile";
}

// Rejected evidence under profiles/ (the stored run keeps its profiles, not its snapshots' .pt files).
size_t profiles_rejected(const AuditRun& a) {
  size_t n = 0;
  for (const auto& r : a.rejected.items()) n += r.find("path")->as_string().rfind("profiles/", 0) == 0;
  return n;
}

size_t profiles_counted(const AuditRun& a) {
  size_t n = 0;
  for (const auto& [sha, s] : a.sigs) n += s.profiles.size();
  return n;
}

// An audit of a fresh copy of the stored run that writes nothing, ready for its phases.
struct StoredRunAudit {
  std::string run = unpacked_run();
  AuditOptions options = [this] {
    AuditOptions o;
    o.inputs = {run};
    o.write = false;
    return o;
  }();
  AuditOutcome outcome;
  AuditRun a{options, outcome};
};

}  // namespace

TEST_CASE("audit phases: found, read, totalled, checked and reported, in order", "[audit][phases]") {
  StoredRunAudit stored;
  AuditRun& a = stored.a;
  REQUIRE(find_inputs(a));
  CHECK(a.files.size() == 4);  // one metadata file per rank
  REQUIRE(read_inputs(a));
  CHECK(a.summaries.size() == 4);
  CHECK(a.run_ids.size() == 1);
  REQUIRE(total_ranks(a));
  CHECK(a.ranks == std::set<int64_t>{0, 1, 2, 3});
  CHECK(a.world_size == 4);
  REQUIRE_FALSE(a.sigs.empty());
  check_evidence(a);
  const size_t profiles = profiles_counted(a);
  CHECK(profiles == 30);  // the run's 30 counter windows, each with its files unaltered
  CHECK(profiles_rejected(a) == 0);
  build_report(a);
  REQUIRE(a.report.find("stages"));
  CHECK(a.report.find("stages")->items().size() == 3);  // dit, vae, output
}

TEST_CASE("audit phases: a run given twice (its directory and a symlink to it) is read once", "[audit][phases]") {
  // `lingprobe audit out/*` names the run and out/latest; read twice, every call counted twice.
  StoredRunAudit stored;
  const std::string latest = stored.run + "-latest";
  REQUIRE(std::system(("ln -s '" + stored.run + "' '" + latest + "'").c_str()) == 0);
  stored.options.inputs = {stored.run, latest};
  AuditRun& a = stored.a;
  REQUIRE(find_inputs(a));
  CHECK(a.files.size() == 4);  // 8 before
  REQUIRE(stored.outcome.warnings.size() == 4);
  CHECK(stored.outcome.warnings.front().code == WarningCode::kGivenAgain);
  REQUIRE((read_inputs(a) && total_ranks(a)));
  CHECK(a.summaries.size() == 4);
}

TEST_CASE("audit phases: a rank killed before its metadata file existed leaves unrecorded, not foreign, evidence",
          "[audit][phases]") {
  // Its profiles are complete and named by no record; its rank (below the world size the others' headers give)
  // has no metadata file at all. Before, they were foreign, with a warning (test_reliability's SIGKILL case).
  StoredRunAudit stored;
  REQUIRE(std::system(("rm '" + stored.run + "'/metadata/metadata_rank3_*.jsonl").c_str()) == 0);
  AuditRun& a = stored.a;
  REQUIRE((find_inputs(a) && read_inputs(a) && total_ranks(a)));
  CHECK(a.world_size == 4);
  check_evidence(a);
  CHECK(a.foreign.items().empty());
  REQUIRE_FALSE(a.unrecorded.items().empty());
  for (const auto& u : a.unrecorded.items()) CHECK(u.find("path")->as_string().find("_rank3_") != std::string::npos);
}

TEST_CASE("audit phases: evidence whose files changed after the run is not counted", "[audit][phases]") {
  StoredRunAudit stored;
  AuditRun& a = stored.a;
  const std::string& run = stored.run;
  REQUIRE((find_inputs(a) && read_inputs(a) && total_ranks(a)));
  // One profile's manifest edited: its SHA-256 (recorded in the metadata) no longer matches.
  std::string edited;
  for (const auto& [sha, s] : a.sigs)
    if (!s.profiles.empty() && edited.empty()) edited = s.profiles.front().path;
  REQUIRE_FALSE(edited.empty());
  std::ofstream(run + "/" + edited + "/manifest.json", std::ios::app) << " ";
  check_evidence(a);
  CHECK(profiles_counted(a) == 29);
  CHECK(profiles_rejected(a) == 1);
  const auto& w = stored.outcome.warnings;
  CHECK(std::count_if(w.begin(), w.end(), [&](const Warning& x) {
          return x.code == WarningCode::kEvidenceRejected && x.message.find(edited) != std::string::npos;
        }) == 1);
}

TEST_CASE("audit warnings: each code has its own name, in the reports' JSON and the printed line", "[audit]") {
  std::set<std::string> names;
  for (int c = 0; c <= static_cast<int>(WarningCode::kNothingToDraw); ++c) {
    const std::string name = warning_code_name(static_cast<WarningCode>(c));
    CHECK(name != "unknown");
    CHECK(names.insert(name).second);
  }
  const Warning w{WarningCode::kTruncatedLastLine, "metadata/a.jsonl: truncated last line skipped"};
  CHECK(warning_line("audit", w) ==
        "lingprobe audit: warning: metadata/a.jsonl: truncated last line skipped [truncated_last_line]");
  CHECK(format::canonical_json(warnings_json({w})) ==
        R"([{"code":"truncated_last_line","message":"metadata/a.jsonl: truncated last line skipped"}])");
}

TEST_CASE("audit phases: a directory without metadata stops at the first phase with the reason", "[audit][phases]") {
  AuditOptions o;
  o.inputs = {test::temp_dir("lpunit-empty-")};
  o.write = false;
  AuditOutcome out;
  AuditRun a(o, out);
  CHECK_FALSE(find_inputs(a));
  CHECK_FALSE(out.status.message().empty());
  CHECK(out.status.code() == format::StatusCode::kBadInput);
}

TEST_CASE("audit: a metadata file that is not there stops the audit with its path, as every command says it",
          "[audit][phases]") {
  AuditOptions o;
  o.inputs = {"/nonexistent-lpunit/metadata/metadata_rank0_pid1.jsonl"};
  o.write = false;
  const AuditOutcome out = run_audit(o);
  CHECK(out.status.code() == format::StatusCode::kBadInput);
  CHECK(out.status.message().find("'/nonexistent-lpunit/metadata/metadata_rank0_pid1.jsonl' does not exist") == 0);
}

TEST_CASE("diff: a run against itself is unchanged in every stage", "[audit][diff]") {
  const std::string run = unpacked_run();
  DiffOptions o;
  o.run_a = o.run_b = run;
  const DiffOutcome d = diff_runs(o);
  REQUIRE(d.status.ok());
  const format::JsonValue* stages = d.report.find("stages");
  REQUIRE(stages);
  CHECK(stages->items().size() == 3);
  for (const auto& s : stages->items()) {
    const format::JsonValue& counts = *s.find("counts");
    CHECK(counts.find("unchanged")->as_int() > 0);
    for (const char* k : {"calls_changed", "shape_changed", "dtype_changed", "paired_groups", "only_in_a", "only_in_b"})
      CHECK(counts.find(k)->as_int() == 0);
    CHECK(s.find("entries")->items().empty());
  }
  DiffOptions one = o;
  one.stage = "dit";
  CHECK(diff_runs(one).report.find("stages")->items().size() == 1);
  DiffOptions missing = o;
  missing.run_b = run + "/no-such-run";
  const DiffOutcome bad = diff_runs(missing);
  CHECK_FALSE(bad.status.ok());
  CHECK_FALSE(bad.status.message().empty());
  CHECK(bad.status.code() == format::StatusCode::kBadInput);
}

TEST_CASE("trace: every rank's calls, snapshots and windows; filters and the event limit", "[audit][trace]") {
  const std::string run = unpacked_run();
  TraceOptions o;
  o.run_dir = run;
  const TraceOutcome all = write_trace(o);
  REQUIRE(all.status.ok());
  CHECK(all.processes == 4);
  CHECK(all.slices == 17106);
  CHECK(all.snapshots == 30);
  CHECK(all.windows == 30);
  CHECK(std::ifstream(all.output_path).good());
  TraceOptions rank1 = o;
  rank1.ranks = {1};
  rank1.output = run + "/rank1.json";
  const TraceOutcome r1 = write_trace(rank1);
  REQUIRE(r1.status.ok());
  CHECK(r1.processes == 1);
  CHECK(r1.slices < all.slices);
  TraceOptions limited = o;
  limited.max_events = 100;
  limited.output = run + "/limited.json";
  const TraceOutcome l = write_trace(limited);
  REQUIRE(l.status.ok());
  CHECK(l.slices == 100);
  CHECK(l.slices + l.over_limit == all.slices);
}

TEST_CASE("audit: the headline tells records lost from sampled calls that went without evidence", "[audit][phases]") {
  // A refused snapshot (a budget, the setup share) leaves its key to a later call; the headline counted it among
  // "dropped" records beside lost call records, and a run that lost nothing read as if it had.
  StoredRunAudit stored;
  AuditRun& a = stored.a;
  REQUIRE(find_inputs(a));
  REQUIRE(read_inputs(a));
  a.summaries[0].dropped["snapshots"]["setup_share"] = 5;
  a.summaries[1].dropped["profiles"]["budget_profile"] = 2;
  a.summaries[2].dropped["call_records"]["buffer_full"] = 3;
  REQUIRE(total_ranks(a));
  check_evidence(a);
  build_report(a);
  write_outputs(a);
  const std::string& md = stored.outcome.summary;
  const std::string headline = md.substr(0, md.find('\n', md.find("\n\n") + 2));
  CHECK(headline.find("; 3 record(s) lost (calls, call records") != std::string::npos);
  CHECK(headline.find("; 7 sampled call(s) went without some evidence") != std::string::npos);
  const auto* dropped = stored.outcome.report.find("dropped");  // the counts stay as they were, per reason
  REQUIRE(dropped);
  CHECK(dropped->find("snapshots")->find("setup_share")->as_int() == 5);
}

TEST_CASE("audit: a run that lost nothing says so in its headline", "[audit][phases]") {
  StoredRunAudit stored;
  AuditRun& a = stored.a;
  REQUIRE(find_inputs(a));
  REQUIRE(read_inputs(a));
  REQUIRE(total_ranks(a));
  check_evidence(a);
  build_report(a);
  write_outputs(a);
  const std::string& md = stored.outcome.summary;
  CHECK(md.substr(0, md.find('\n', md.find("\n\n") + 2)).find("rank(s); no record lost.") != std::string::npos);
}

TEST_CASE("audit: a rank ended by a signal makes the run interrupted, in the warnings, the headline and the ranks",
          "[audit][phases]") {
  // Four files with final counts, one written by the SIGTERM handler: the audit read it as a finished run (no
  // warning, "no record lost", and a straggler named among ranks of which one had been killed).
  StoredRunAudit stored;
  AuditRun& a = stored.a;
  REQUIRE(find_inputs(a));
  REQUIRE(read_inputs(a));
  for (auto& f : a.summaries) f.ended_by = f.rank == 2 ? "SIGTERM" : "exit";
  REQUIRE(total_ranks(a));
  check_evidence(a);
  build_report(a);
  write_outputs(a);
  const auto& warnings = stored.outcome.warnings;
  const auto interrupted = std::count_if(warnings.begin(), warnings.end(),
                                         [](const Warning& w) { return w.code == WarningCode::kInterrupted; });
  CHECK(interrupted == 1);
  const std::string& md = stored.outcome.summary;
  CHECK(md.find("**Interrupted:** rank(s) 2 ended by SIGTERM;") != std::string::npos);
  CHECK(md.find("ranks that did not finish (no final counts record, or ended by a signal): 2") != std::string::npos);
}

TEST_CASE("audit: an elastic restart's first attempt, ended by SIGTERM, is not an interrupted run", "[audit][phases]") {
  // torchrun --max-restarts SIGTERMs every worker of the failed attempt; the next attempt's processes finish into the
  // same run directory. Each rank is judged by its last process.
  StoredRunAudit stored;
  AuditRun& a = stored.a;
  REQUIRE(find_inputs(a));
  REQUIRE(read_inputs(a));
  FileSummary restarted = a.summaries[2];
  a.summaries[2].ended_by = "SIGTERM";
  restarted.ended_by = "exit";
  restarted.pid += 1;
  restarted.start_unix_ns = a.summaries[2].start_unix_ns + 1;
  a.summaries.push_back(restarted);
  REQUIRE(total_ranks(a));
  check_evidence(a);
  build_report(a);
  write_outputs(a);
  for (const Warning& w : stored.outcome.warnings) CHECK(w.code != WarningCode::kInterrupted);
  const std::string& md = stored.outcome.summary;
  CHECK(md.find("Interrupted") == std::string::npos);
  CHECK(md.find("Ranks written by several processes, their counts summed: rank 2 (pids") != std::string::npos);
}
