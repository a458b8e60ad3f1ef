// Sampled calls (SPEC section 4): their real tensors (snapshots) and their
// kernels' hardware counters (a counter window opened last before the op
// and closed first after it, so that lingprobe's own copies stay outside
// it), captured on the calling thread and handed to the sink's writer.
// Arguments the schema marks as written are copied in the start callback,
// before the op changes them; the others are held by reference then and
// copied in the end callback (the op did not write them), with the outputs.
// A view is copied compactly (its elements) with its shape, strides,
// storage offset and data-pointer alignment recorded; an overlapping view as
// the storage span it covers. lingprobe's own tensor work runs with
// RecordFunction off and in inference mode; device copies are queued on the
// op's stream (the calling thread never waits) and travel to the host later
// on the writer thread through DeviceAccess. Tensors without storage (meta,
// fake), stream capture, budgets and device OOM drop the sample, counted.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "capture/device_access.h"
#include "capture/sampled_call.h"
#include "capture/sampler.h"
#include "format/records.h"
#include "format/snapshot_file.h"

namespace lingprobe::capture {

class SnapshotSink {
 public:
  virtual ~SnapshotSink() = default;
  virtual void submit(format::SnapshotJob job) = 0;
};

// The launch-wide byte budget (through the claims directory).
class RunBudget {
 public:
  virtual ~RunBudget() = default;
  virtual bool reserve(uint64_t bytes) = 0;
  virtual void give_back(uint64_t bytes) = 0;
};

struct SnapshotOptions {
  bool snapshots = true;   // copy the tensors (LINGPROBE_SNAPSHOTS)
  bool profile = false;    // measure the kernels' counters (LINGPROBE_PROFILE)
  uint64_t budget_process = 4ull << 30;
  uint64_t budget_device = 2ull << 30;  // device copies waiting for the writer
  int64_t rank = 0;
  std::string run_id;
};

class SnapshotCapture : public SampledCallHooks {
 public:
  SnapshotCapture(Sampler* sampler, SnapshotSink* sink, RunBudget* run_budget, DeviceAccess* device,
                  SnapshotOptions options);
  void* begin(const SampledCall& call) override;
  void end(void* token, c10::ArrayRef<const c10::IValue> outputs, uint32_t signature_id, uint64_t seq) override;
  void abandon(void* token) override;

  void set_rank(int64_t rank) { rank_.store(rank); }
  void count_drop(const std::string& reason);
  format::DropCounts drops() const;  // {"snapshots": {reason: n}, "profiles": {reason: n}}

 private:
  struct Pending;
  struct Captured;
  bool reserve(uint64_t bytes, uint64_t device_bytes, std::string& reason);
  void give_back(uint64_t bytes);
  void drop(Pending* p, const std::string& reason, SampleResult result = SampleResult::Dropped);
  void open_window(Pending& p, const SampledCall& call);
  void finish(std::unique_ptr<Pending> p, c10::ArrayRef<const c10::IValue> outputs, uint32_t signature_id, uint64_t seq);
  void submit(std::unique_ptr<Pending> p, format::SnapshotJob job, uint32_t signature_id, uint64_t seq);
  void finish_profile_only(std::unique_ptr<Pending> p, format::SnapshotJob job, c10::ArrayRef<const c10::IValue> outputs,
                           uint32_t signature_id, uint64_t seq);

  Sampler* sampler_;
  SnapshotSink* sink_;
  RunBudget* run_budget_;
  DeviceAccess* device_;
  SnapshotOptions options_;
  std::atomic<int64_t> rank_;
  std::atomic<uint64_t> process_bytes_{0}, device_bytes_{0};
  void count_profile(const std::string& reason);
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> drops_, profile_drops_;
};

// The math settings of at::globalContext() that change which GEMM, conv and
// attention kernels run, as text (replay applies them back).
format::PickleValue current_math_policy();

}  // namespace lingprobe::capture
