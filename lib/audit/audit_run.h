// The coverage audit's phases and the state they hand on (run_audit, in
// coverage_audit.cpp, runs them in order): 1-2 the inputs found and read
// (audit_inputs.cpp), 2b the ranks' totals, 3 the evidence checked, 4 the
// report (coverage_audit.cpp), 5 the summary and the files written
// (audit_summary.cpp). Internal to the audit layer.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "audit/coverage_audit.h"
#include "audit/key_evidence.h"
#include "audit/metadata_reader.h"
#include "audit/rank_view.h"
#include "format/json_value.h"

namespace lingprobe::audit {

using format::JsonValue;

struct Signature {
  std::string sha;
  JsonValue value;
  std::string stage, op;
  std::optional<int64_t> flops;
  std::map<int64_t, uint64_t> calls_by_rank;
  uint64_t calls = 0;
  std::vector<Evidence> snapshots;
  std::vector<Evidence> profiles;         // with counters
  std::optional<double> kernel_time_us;   // measured, per call: the timed call's, else the first profile's counters
  std::optional<double> timed_kernel_us;  // the key's timed call (kernel_timing record, CUPTI Activity), per call
  bool timed_call = false;                // a passed timed call, with kernels or none (an op that launched none)
  uint64_t timed_calls = 0;               // calls with a call record (top-level: their host time below)
  // The calls whose FLOPs count: every call, or with LINGPROBE_NESTED=1 and call records the top-level ones only (a
  // conv2d's convolution and _convolution run inside it: its FLOPs once, not three times).
  uint64_t flop_calls = 0;
  int64_t host_ns = 0;  // wall time on the calling thread inside those calls
};

// Each rank's stall caused by counter windows (its profile records and counts).
struct WindowStall {
  uint64_t windows = 0;
  std::map<std::string, uint64_t> by_status;
  double window_s = 0, lock_wait_s = 0, max_window_s = 0;
  int64_t stall_us = -1;        // the counts record's total: refused waits for the lock and timing windows included
  uint64_t timing_windows = 0;  // the keys' timed calls (kernel_timing records), apart from the counter windows
  double timing_s = 0;
};

// The audit's state from one phase to the next.
struct AuditRun {
  AuditRun(const AuditOptions& o, AuditOutcome& out) : options(o), outcome(out) {}
  const AuditOptions& options;
  AuditOutcome& outcome;
  // 1. inputs
  std::vector<std::string> files;
  std::string run_dir;
  // 2. the files read
  std::vector<FileSummary> summaries;
  std::set<int64_t> ranks_never_written;  // ranks whose metadata file is empty or headerless (killed at once)
  uint64_t bytes_total = 0;
  std::set<std::string> run_ids;
  bool any_rank = false;
  // 2b. the ranks' totals
  std::map<std::string, Signature> sigs;
  std::set<int64_t> ranks;
  std::string run_id;
  int64_t world_size = -1;
  // `dropped` split: records the run lost (calls, call records, lines, stage names) against sampled calls that went
  // without some evidence (snapshots, profiles, timings: each such call leaves its key to a later one).
  uint64_t records_lost = 0, evidence_refused = 0;
  std::map<std::string, uint64_t> nested;        // calls nested below recorded ones (LINGPROBE_SUPPRESS_NESTED)
  std::map<std::string, uint64_t> compile_time;  // compile-time calls on fake tensors
  std::map<std::string, std::map<std::string, uint64_t>> dropped;
  std::map<std::string, uint64_t> sampling, unsampled;  // summed over the ranks' files
  std::vector<Refusal> refusals;                        // every rank's refusal records
  std::vector<PlanRecord> plans;                        // every process's sample plan record
  JsonValue sources = JsonValue::array();
  JsonValue others = JsonValue::array();
  uint64_t other_calls = 0;
  std::vector<std::pair<std::string, std::string>> source_rows;
  size_t used_files = 0;
  std::vector<const FileSummary*> row_files;  // the files whose calls make the rows
  std::map<int64_t, WindowStall> stalls;
  RankView ranks_view;
  // 3. evidence
  JsonValue rejected = JsonValue::array(), foreign = JsonValue::array(), unrecorded = JsonValue::array();
  // 4. the report
  std::vector<const Signature*> all;
  std::map<std::string, std::vector<const Signature*>> by_stage;
  JsonValue stages = JsonValue::array(), overall, report = JsonValue::object();
  std::vector<KeyEvidence> refused_keys;
  std::string stall_table;
};

bool find_inputs(AuditRun& a);     // 1. the metadata files and the run directory; false: outcome.status (kBadInput)
bool read_inputs(AuditRun& a);     // 2. every file read and validated; false: outcome.status (a read's code, kBadInput)
bool total_ranks(AuditRun& a);     // 2b. the ranks' files summed; false: outcome.status (kBadInput)
void check_evidence(AuditRun& a);  // 3. only this run's own, unaltered evidence counts
void build_report(AuditRun& a);    // 4. coverage_audit.json's document
void write_outputs(AuditRun& a);   // 5. summary.md's audit part, then the files (outcome.status: kIoFailed)

// The rank a metadata file's name gives (metadata_rank3_pid123.jsonl: 3), else -1.
int64_t rank_in_file_name(const std::string& name);

// The audit refused on malformed or inconsistent input: outcome.status is kBadInput with `message`; false.
bool bad_input(AuditOutcome& outcome, std::string message);

}  // namespace lingprobe::audit
