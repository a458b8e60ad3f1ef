// The capability report's first two phases: the run read as the report
// needs it (the ranks' calls per signature, the signature texts, the profile
// and snapshot records), and one job per profile record, its evidence checked
// against the SHA-256 the run recorded (audit/capability_report runs them,
// then totals and writes). Reads files only; no torch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "audit/audit_warning.h"
#include "audit/metadata_reader.h"
#include "format/json_value.h"

namespace lingprobe::audit {

// One profiled signature: its figures and its capability_report.json entry.
struct Job {
  format::JsonValue json;
  std::string sha, stage, mode, h16;
  double est_us = 0, flops_per_s = 0, intensity = 0, peak_flops = 0, peak_dram = 0, frac_flops = -1, frac_dram = -1;
  double time_us = 0, dram_bytes_per_s = 0;
  double counters_time_us = 0;  // the counter window's own kernel time (the DRAM rate's denominator)
  std::string time_source;      // activity: the key's timed call; counters: the profiled call's own
  double cast_us = 0;          // of time_us, autocast's casts of the inputs (copy kernels in an arithmetic op's window)
  double recoverable_us = -1;  // est_us x (1 - the bounding roof's fraction); -1: no roof known
  uint64_t calls = 0;
  std::string label;       // the op
  std::string shape;       // its first tensor argument's shape ("[1,4680,5120]"), "" if none
  bool passed = false;     // only passed jobs' figures enter the totals and the roofline
  bool over_roof = false;  // a fraction of a roof over 1: a defect (its status says so; its fractions are not shown)
};

// A profile or snapshot record of a counted file: the signature and the evidence it names.
struct EvidenceRecord {
  std::string sha, path, evidence_sha;
  uint64_t seq;
  int64_t rank;
};

// A key's timed call (kernel_timing record): its kernels in kernels.json's layout.
struct TimedCall {
  int64_t rank = 0;
  uint64_t seq = 0;
  format::JsonValue kernels;
};

// The run as the report reads it.
struct ReportInputs {
  std::vector<FileSummary> summaries;
  std::vector<const FileSummary*> counted;   // the files whose calls count: the ranks' (not a launcher's, a child's)
  std::map<std::string, uint64_t> calls;     // per signature
  std::map<std::string, std::string> texts;  // signature JSON
  std::vector<EvidenceRecord> profiles, snapshots;
  std::map<std::string, TimedCall> timings;  // per signature: its first timed call
};

// 1. Every metadata file of the run read; else the first file's failure (read_metadata_file's codes).
format::Status read_report_inputs(const std::vector<std::string>& files, ReportInputs& in);

// 2. The job of one profile record; false (with a warning) when its files are missing, altered since the run, or
// unreadable.
bool profile_job(const std::string& run, const EvidenceRecord& p, const ReportInputs& in,
                 std::vector<Warning>& warnings, Job& j);

// A JSON value's text or number; "" or 0 when absent or of another kind.
std::string json_text(const format::JsonValue* v);
// 1.23 KFLOP/s: three significant digits and an SI prefix.
std::string human(double x, const char* unit);
double json_number(const format::JsonValue* v);

}  // namespace lingprobe::audit
