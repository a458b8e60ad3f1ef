// The dispatcher hook: a global RecordFunction callback (FUNCTION scope,
// inputs and outputs) that turns each selected call into a signature id, a
// count and (optionally) a call record, without building JSON or allocating
// after a signature's first sighting. Performs no file I/O: records go to a
// RecorderSink that the api layer wires to the writer.
//
// "Off" means the callback is not registered at all (it is added at start
// and removed at stop), so the dispatcher neither boxes arguments nor runs
// anything of ours; one relaxed atomic load in the callback guards against
// calls already in flight when recording stops.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "format/op_selection.h"
#include "capture/sampler.h"
#include "runtime/record_buffer.h"
#include "format/records.h"

namespace lingprobe::capture {

class SampledCallHooks;
class StageTiming;

class RecorderSink {
 public:
  virtual ~RecorderSink() = default;
  // A buffer for the calling thread's call records (nullptr: none; records
  // of that thread are then counted as dropped).
  virtual runtime::RecordBuffer* register_thread_buffer(size_t capacity) = 0;
  // A new signature, its SHA-256 and canonical JSON built by the caller (a sampled call needs them at once).
  virtual void on_new_signature(uint32_t id, const std::string& sha256, const std::string& canonical_json) = 0;
  // Builds a signature's SHA-256 and canonical JSON into its two arguments; run once, on any thread.
  using SignatureBuild = std::function<void(std::string& sha256, std::string& canonical_json)>;
  // A new signature whose SHA-256 and JSON the sink builds later with `build`, on its own thread: a first sighting
  // costs the calling thread the id and the outputs' JSON, not the canonical text and its hash
  // (docs/PERFORMANCE.md). Its record must still precede every call record pushed after this returns.
  virtual void on_new_signature_later(uint32_t id, SignatureBuild build) = 0;
  // The SHA-256 and JSON of a signature handed over by on_new_signature_later, built since by the caller for a
  // sampled call: for whatever of the sink needs them at once (its record is already queued: not a second one).
  virtual void on_signature_text(uint32_t id, const std::string& sha256, const std::string& canonical_json) = 0;
  // One op minted its kManySignaturesPerOp-th signature (said once per op): `op` is its name ("aten::item").
  virtual void on_many_signatures(const std::string& op, bool scalars_folded) = 0;
  // A push found the buffer full. Return true to retry (block policy: the
  // sink woke the writer and waited a little), false to drop the record.
  virtual bool on_buffer_full() = 0;
  // A push made the calling thread's buffer half full: drain it soon.
  virtual void on_buffer_half_full() = 0;
};

// Below a recorded top-level call, RecordFunction can be switched off on the
// thread (at::enableRecordFunction) so that its nested calls are neither
// boxed nor seen, by lingprobe or anyone else; switched back on in the call's
// end callback. Only while lingprobe's is the only callback (otherwise
// torch.profiler and the execution-trace observer would lose those calls).
// Auto: only below ops whose learned nested calls per call (their first
// kSuppressLearnCalls calls observed) reach `suppress_min_nested`: one off/on
// pair costs about as much as 3-4 nested calls' boxing (docs/PERFORMANCE.md).
enum class NestedSuppression { Auto, Always, Never };

// An op with this many signatures is worth a word (scalar values minting one per call: FOLD_SCALARS).
constexpr uint32_t kManySignaturesPerOp = 1000;

struct RecorderOptions {
  format::OpSelection selection;
  bool nested = false;
  NestedSuppression suppress_nested = NestedSuppression::Auto;  // ignored with nested
  uint32_t suppress_min_nested = 4;
  bool call_records = true;
  bool call_times = true;     // with call_records: each record's t0_ns and t1_ns read (else both 0)
  bool fold_scalars = false;  // scalar values written as their type (ScalarFold, LINGPROBE_FOLD_SCALARS)
  size_t buffer_records = 65536;
  uint64_t skip_calls = 0;
  double skip_seconds = 0.0;
  // Sampling: the sampler decides in the start callback, the hooks (snapshots,
  // counters) do the work; both null when sampling is off.
  Sampler* sampler = nullptr;
  SampledCallHooks* hooks = nullptr;
  // GPU time per stage: told of each thread's first CUDA op after a stage change; null when off.
  StageTiming* stage_timing = nullptr;
};

struct RecorderStats {
  uint64_t calls_seen = 0;      // top-level (or nested, if on) op calls observed while recording
  uint64_t calls_recorded = 0;  // selected and counted
  uint64_t signatures = 0;
  uint64_t dropped = 0;  // all drop reasons together
  uint64_t nested_seen =
      0;  // nested op calls that reached the callback (each paid the boxing; 0 when all were switched off)
  uint64_t nested_suppressed = 0;  // top-level calls below which RecordFunction was switched off
};

// Prepares the recorder (recording off). Idempotent.
void install_recorder(const RecorderOptions& options, RecorderSink* sink);
// Starts or stops recording (registers or removes the callback). Thread-safe.
void set_recording(bool on);
bool recording();
// In a forked child (pthread_atfork's child handler): recording off without
// taking any lock or calling torch; the callback stays registered, idle.
void stop_after_fork();
// Starts sampling in a recorder installed without it (once; keys first seen
// before this are not sampled).
void enable_sampling(Sampler* sampler, SampledCallHooks* hooks, StageTiming* stage_timing = nullptr);
// Removes the callback; afterwards the hook never touches the sink again.
void uninstall_recorder();

RecorderStats recorder_stats();
// The operators the callback has met (name, name with overload), selected or not.
std::vector<std::pair<std::string, std::string>> recorder_ops_met();
// Every operator torch has registered in this process, as "ns::name" and "ns::name.overload": whether an op pattern
// that matched nothing names a real operator (one that ran only nested) or nothing at all (a typo).
std::vector<std::string> registered_op_names();
// Cumulative per-signature counts and the recorder's drop counters.
format::CountsSnapshot recorder_counts();

// The version of the libtorch lingprobe was compiled against ("2.11.0").
std::string torch_version();

}  // namespace lingprobe::capture
