// `lingprobe diff RUN_A RUN_B`: what changed between two runs, per stage.
// Each run is audited in memory (as `lingprobe audit` would, writing
// nothing); their rows are then joined:
//   - same signature (SHA-256) in both: its calls compared;
//   - the rest paired where they changed only in shapes: same stage, op,
//     dtypes, tensor ranks, list lengths, scalars, output dtypes and ranks,
//     and the same weight and bias shapes (for the ops whose weights are
//     known: linear, convolutions, addmm, the norms, embedding). One row
//     against one is "shape_changed"; one against several (or several
//     against one, or several against several) is reported as that group;
//   - what is left: only in A, only in B.
// Entries are sorted by FLOPs moved (|B's total - A's total|). Where both
// sides of an entry have counter evidence, their kernels' metrics are
// compared kernel by kernel. Reads files only; no torch.
#pragma once

#include <string>
#include <vector>

#include "audit/audit_warning.h"
#include "format/json_value.h"
#include "format/status.h"

namespace lingprobe::audit {

struct DiffOptions {
  std::string run_a, run_b;   // run directories (OUT/{run_id})
  std::string stage;          // "": every stage
  size_t markdown_rows = 15;  // entries per stage in the Markdown
};

struct DiffOutcome {
  format::Status status;  // kBadInput, kIoFailed (a file not read or written), kTooLarge (a line over 16 MiB)
  std::vector<Warning> warnings;
  format::JsonValue report;  // the whole diff
  std::string markdown;      // its human form
};

DiffOutcome diff_runs(const DiffOptions& options);

}  // namespace lingprobe::audit
