// `lingprobe report`: the document ../shared/seeds/capability_report.seed.json
// is (generated_at, status, jobs[], scope), built from one run's own files
// (files only, no torch): one job per profiled call (the run's profile
// records, checked against their manifest's SHA-256), each with its
// snapshot's hash, its replay's correctness, its kernels and their counters,
// plus what the seeds lacked: the signature, the run's calls of it, FLOPs
// per call, achieved FLOP/s and DRAM bandwidth against the device's peak for
// the op's dtype and math mode (docs/COUNTERS.md's table), the job's share of
// the run's estimated GPU time, and a whole-run view. Also writes
// reports/roofline.svg and a "Capability" section into reports/summary.md.
#pragma once

#include <string>
#include <vector>

#include "audit/audit_warning.h"
#include "format/json_value.h"
#include "format/status.h"

namespace lingprobe::audit {

struct ReportOptions {
  std::string run_dir;
  std::string generated_at;  // "" : now (UTC, ISO 8601)
};

struct ReportOutcome {
  format::Status status;  // kBadInput, kIoFailed (a file not read or written), kTooLarge (a line over 16 MiB)
  std::vector<Warning> warnings;
  std::string report_path, svg_path;
  std::vector<std::string> written;  // files replaced so far (some, when writing failed midway)
  std::string summary;               // the capability section (also appended to summary.md)
};

ReportOutcome run_report(const ReportOptions& options);

// Peak rates of a GPU for a math mode ("bf16", "fp16", "tf32", "fp32", "fp64",
// "int8"): datasheet FLOP/s and DRAM bytes/s; false for an unknown GPU.
struct Peak {
  double flops = 0;       // dense, per second
  double dram_bytes = 0;  // per second
  const char* source = "";
};
bool device_peak(const std::string& gpu_name, const std::string& mode, Peak& out);

// The math mode a signature's arithmetic ran in ("bf16", "tf32", ...; ""
// where the table has no roof), given the call's math policy (may be null).
std::string math_mode(const format::JsonValue& signature, const format::JsonValue* policy);

}  // namespace lingprobe::audit
