// Streams one metadata JSONL file (SPEC section 4) in bounded memory: 16 MiB
// chunks, one simdjson DOM parse per line (so every line is fully validated;
// call records in the writer's own layout are validated without one), the
// file's SHA-256 computed in the same pass. stream_metadata_file hands each
// record to a visitor (`lingprobe trace`); read_metadata_file keeps only what
// the audit needs: header fields, signatures, the last counts record,
// call-record counts (a fallback for files killed before their first counts
// record) and top-level time per signature, snapshot/profile evidence.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string_view>
#include <string>
#include <unordered_map>
#include <vector>

#include "format/status.h"

namespace simdjson::dom {
class object;  // simdjson.h stays out of this header's includers (a torch-linked tool among them)
}

namespace lingprobe::audit {

struct Evidence {
  uint32_t id = 0;
  uint64_t seq = 0;
  std::string path;  // relative to the run directory
  std::string sha256;
  std::string status;             // profiles: passed, failed, ...
  double window_seconds = -1;     // profiles: the window's wall time, lock wait included (-1: not recorded)
  double lock_wait_seconds = -1;  // profiles: of which waiting for the GPU's counter lock
};

// A key's timed call (a "kernel_timing" record, LINGPROBE_PROFILE_TIMING):
// its kernels' durations by CUPTI Activity, without the range profiler.
struct KernelTiming {
  uint32_t id = 0;
  uint64_t seq = 0;
  std::string status;   // passed (failed timings are not written)
  std::string kernels;  // JSON text: kernels.json's layout, one metric (gpu__time_duration.sum)
  double window_seconds = -1;
};

// A sampled call's evidence refused (a "refusal" record: once per key,
// evidence and reason).
struct Refusal {
  std::string input_sha256, op, stage;
  std::string evidence;  // snapshot, counters, snapshot+counters
  std::string reason;
  uint64_t call = 0;  // the key's call count in that process when first refused
};

// A process's sample plan (a "plan" record, at finalize): the plan it
// followed and the planned keys it never met.
struct PlanRecord {
  std::string source, error, basis;
  uint64_t keys = 0, ranked = 0, over_budget = 0;
  uint64_t unranked = 0;  // keys with no FLOP formula left without a share (never planned)
  double covered_share = 0;
  struct Key {
    std::string input_sha256, op, stage;
    double share = 0;
  };
  std::vector<Key> unmet;
};

// Top-level (depth 0) call records of one signature: their count, summed
// duration, and the first start and last end (the file's monotonic clock).
// For a c10d op also the time from each call's start to the next top-level
// call of its thread: the collective's wait (Work.wait() runs outside ops).
struct CallTimes {
  uint64_t top_level_records = 0;  // depth-0 call records, timed or not (LINGPROBE_CALL_TIMES=0 writes them untimed)
  uint64_t top_level_calls = 0;    // of them, those with times
  int64_t top_level_ns = 0;
  int64_t first_t0_ns = 0, last_t1_ns = 0;
  int64_t through_wait_ns = 0;
  // `calls` more top-level calls, `ns` long in all, spanning [first, last].
  void add(uint64_t calls, int64_t ns, int64_t first, int64_t last) {
    first_t0_ns = top_level_calls ? std::min(first_t0_ns, first) : first;
    last_t1_ns = top_level_calls ? std::max(last_t1_ns, last) : last;
    top_level_calls += calls;
    top_level_ns += ns;
  }
};

struct FileSummary {
  std::string path;
  std::string sha256;
  bool has_header = false;
  std::string format, run_id, role;
  int64_t rank = 0, world_size = 0, pid = -1, parent_pid = -1;
  int64_t start_unix_ns = -1, start_mono_ns = -1;               // the header's clocks (-1: absent)
  std::string ops;                                              // the header's config: LINGPROBE_OPS ("" all)
  std::string ops_deny;                                         // ... LINGPROBE_OPS_DENY
  bool fold_scalars = false;                                    // ... LINGPROBE_FOLD_SCALARS
  bool nested_calls = false;                                    // ... LINGPROBE_NESTED
  std::unordered_map<uint32_t, std::string> signature_sha;      // file-local id -> sha256
  std::unordered_map<std::string, std::string> signature_json;  // sha256 -> canonical text
  bool has_counts = false;
  bool final_counts = false;
  std::string ended_by;  // the final counts' "ended_by": "finalize", "exit", a signal's name ("SIGTERM"), or ""
  // Ended by a signal (a job interrupted: its records up to then are complete).
  bool interrupted() const { return ended_by.rfind("SIG", 0) == 0; }
  std::map<uint32_t, uint64_t> counts;        // from the last counts record
  std::map<uint32_t, uint64_t> call_records;  // call records per id
  std::map<uint32_t, CallTimes> call_times;   // ids with call records
  std::map<std::string, std::map<std::string, uint64_t>> dropped;
  std::map<std::string, uint64_t> sampling, unsampled;               // the last counts record's "sampling"
  std::map<std::string, std::map<std::string, uint64_t>> stage_gpu;  // the last counts record's GPU time per stage
  std::map<std::string, uint64_t> stage_gpu_lost;
  std::map<std::string, uint64_t> nested;        // the last counts record's nested calls: "seen", "suppressed_below"
  std::map<std::string, uint64_t> compile_time;  // ... its compile-time calls on fake tensors, by kind
  std::map<std::string, std::map<std::string, uint64_t>> collectives;  // ... its c10d calls per stage: "calls", "us"
  std::vector<Evidence> snapshots, profiles;
  std::vector<KernelTiming> timings;
  std::vector<Refusal> refusals;
  std::vector<PlanRecord> plans;
  uint64_t lines = 0, bytes = 0;
  bool truncated_last_line = false;
};

struct ReadResult {
  format::Status status;  // ok, or "FILE:LINE: what was wrong": kIoFailed (cannot open or read), kBadInput, kTooLarge
};

// One call record's fields.
struct CallLine {
  uint64_t seq = 0;
  uint32_t id = 0, tid = 0, depth = 0;
  int64_t t0_ns = 0, t1_ns = 0;
};

// Receives a file's records in file order. Each returns "" to go on, or what
// was wrong: the stream stops with that error, naming the line.
class RecordVisitor {
 public:
  virtual ~RecordVisitor() = default;
  virtual std::string call(const CallLine& call) = 0;  // a call record (its id required; other fields 0 where absent)
  virtual std::string record(std::string_view kind, simdjson::dom::object record) = 0;  // any other record
};

struct StreamStats {
  std::string sha256;  // of the whole file
  uint64_t lines = 0, bytes = 0;
  bool truncated_last_line = false;  // a last line without newline that did not parse (or the visitor refused)
};

// `progress(bytes_done)` is called every few MiB (may be empty).
ReadResult stream_metadata_file(const std::string& path, RecordVisitor& visitor, StreamStats& stats,
                                const std::function<void(uint64_t)>& progress = {});

ReadResult read_metadata_file(const std::string& path, FileSummary& out,
                              const std::function<void(uint64_t)>& progress = {});

// Each rank's last process among `rank_files` (by its header's start; a restarted process after the one it
// replaced): a rank was interrupted when that one was, not an elastic restart's first attempt.
std::map<int64_t, const FileSummary*> last_process_per_rank(const std::vector<const FileSummary*>& rank_files);

}  // namespace lingprobe::audit
