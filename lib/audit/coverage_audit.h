// `lingprobe audit`: joins a run's metadata files (all ranks, all pids) with
// its own evidence (the snapshots and profiles its records name, checked
// against their SHA-256; anything else on disk is foreign and not counted)
// into the document
// ../shared/seeds/coverage_audit.seed.json is — same keys, same order — plus
// FLOP- and time-weighted coverage, and a human summary. Reads files only;
// no torch.
#pragma once

#include <string>
#include <vector>

#include "audit/audit_warning.h"
#include "format/json_value.h"
#include "format/status.h"

namespace lingprobe::audit {

struct AuditOptions {
  std::vector<std::string> inputs;  // run directories or metadata JSONL files
  std::string output;               // "": RUN/reports/coverage_audit.json
  bool progress = false;            // progress lines on stderr
  bool allow_mixed_runs = false;    // audit files of several launches together (normally refused)
  bool write = true;                // false: only build the report (`lingprobe diff`), write nothing
};

struct AuditOutcome {
  format::Status status;  // kBadInput, kIoFailed (a file not read or written), kTooLarge (a line over 16 MiB)
  std::vector<Warning> warnings;
  std::string report_path;
  std::string summary_path;
  std::string summary;        // the Markdown summary (also printed by the CLI)
  std::string run_dir;        // the run directory the evidence paths are relative to
  format::JsonValue report;   // coverage_audit.json's document
  bool fold_scalars = false;  // the run's signatures have their scalar values folded (LINGPROBE_FOLD_SCALARS)
  std::string ops, ops_deny;  // the run's op selection (LINGPROBE_OPS, LINGPROBE_OPS_DENY; "": every op), its first's
};

AuditOutcome run_audit(const AuditOptions& options);

}  // namespace lingprobe::audit
