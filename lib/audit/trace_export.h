// `lingprobe trace`: a run's call records as a timeline for the Perfetto UI
// (ui.perfetto.dev) or chrome://tracing, in the JSON trace-event format:
// one process track per rank and pid, one thread track per thread, a
// complete slice ("X") per call record named by its op, with its stage as
// category and its signature, input shapes and scalars in args; snapshots as
// instants on the call's thread, counter windows and their lock waits on a
// track of their own beside the thread. Each process's monotonic clock is
// placed on the shared wall clock through its header's start_unix_ns /
// start_mono_ns. Streamed: the files are read twice (their summaries, then
// their call records) and only a thread's calls nested inside one top-level
// call are held (nested records are written end-first; they are put after
// their parent). Reads files only; no torch.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "audit/audit_warning.h"
#include "format/status.h"

namespace lingprobe::audit {

struct TraceOptions {
  std::string run_dir;            // OUT/{run_id} (its metadata/*.jsonl)
  std::string output;             // "": RUN/reports/trace.json
  std::set<int64_t> ranks;        // empty: every rank (and every process that is not a rank)
  double from_s = -1, to_s = -1;  // seconds from the run's earliest process start; < 0: open
  uint64_t max_events = 0;        // call slices written at most (0: no limit); later ones are counted, not written
};

struct TraceOutcome {
  format::Status status;  // kBadInput, kIoFailed (a file not read or written), kTooLarge (a line over 16 MiB)
  std::vector<Warning> warnings;
  std::string output_path;
  uint64_t processes = 0, threads = 0;
  uint64_t slices = 0, snapshots = 0, windows = 0, timed_calls = 0;
  uint64_t outside_filters = 0;  // call records of the chosen ranks outside --from/--to
  uint64_t over_limit = 0;       // call records left out by --max-events
  uint64_t without_times = 0;    // call records with no times (not placed)
};

TraceOutcome write_trace(const TraceOptions& options);

}  // namespace lingprobe::audit
