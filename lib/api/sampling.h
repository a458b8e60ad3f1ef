// The sampling half of a session, wired by api: the sampler (capture), the
// snapshot capture (capture), the claims and the snapshot writer (sink) and
// the GPU access (gpu), joined by small adapters. session.cpp stays free of
// torch headers; this pair is the one torch-facing part of api.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "api/config.h"
#include "format/records.h"

namespace lingprobe::capture {
class Sampler;
class SampledCallHooks;
class StageTiming;
}  // namespace lingprobe::capture
namespace lingprobe::sink {
class MetadataWriter;
}

namespace lingprobe::api {

// What sampling left, for the exit line (exit_report).
struct SamplingTally {
  uint64_t snapshots = 0;             // files written by this process
  double stall_s = 0;                 // the calling threads' time in counter and timing windows
  uint64_t budget_profile_calls = 0;  // sampled calls refused counters: LINGPROBE_PROFILE_BUDGET_S spent
};

class SamplingSession {
 public:
  // Nothing is created (and nullptr returned) when sampling is off.
  static std::unique_ptr<SamplingSession> create(const Config& config, int64_t rank, int64_t world_size,
                                                 const std::string& who, const std::string& run_dir,
                                                 const std::string& run_id, sink::MetadataWriter* metadata);
  ~SamplingSession();

  capture::Sampler* sampler();
  capture::SampledCallHooks* hooks();
  capture::StageTiming* stage_timing();  // nullptr unless PROFILE with STAGE_GPU_TIME
  void on_new_signature(uint32_t id, const std::string& sha256, const std::string& canonical_json);
  void poll();                                      // the writer thread, every cycle
  void add_counts(format::CountsSnapshot& counts);  // drops and sampling figures into a counts record
  void set_identity(int64_t rank, int64_t world_size, const std::string& who);
  void finalize();    // drains the snapshot writer (before the metadata writer)
  void after_fork();  // in a forked child (no GPU call, no lock)
  uint64_t snapshots_written() const;
  uint64_t snapshot_bytes() const;
  SamplingTally tally() const;

 private:
  struct Parts;
  explicit SamplingSession(std::unique_ptr<Parts> parts);
  void say_if_nothing_ran_on_the_gpu();
  std::unique_ptr<Parts> parts_;
  std::atomic<bool> plan_written_{false};  // the plan record, once (finalize may run twice)
  std::atomic<bool> exit_said_{false};     // the exit warning, once
};

// Process-wide, with or without a sampling session: while held (another
// CUPTI client such as torch.profiler is starting or running), no counter
// window opens (sampled calls count as `profiler_active`). `hold` waits up to
// `wait_seconds` for a window already open on another thread to close;
// false if it stayed open. Release with hold = false (holds nest).
bool hold_counters(bool hold, int wait_seconds = 30);

}  // namespace lingprobe::api
