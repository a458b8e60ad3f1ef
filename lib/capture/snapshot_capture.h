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
// on the writer thread through DeviceAccess; those of a call that could never
// fit the device budget go into pinned host memory on the op's stream (the
// host route), a buffer the key's earlier refused call asked for.
//
// Counters and snapshots are apart: a call whose snapshot a budget refuses
// still gets its counter window. Whatever a call cannot give (a budget,
// copies in flight, meta tensors, a CPU call where a GPU is used, a busy
// window) is refused for that evidence only, reported once per key and
// reason, and left to a later call of the key (capture/sampler).
//
// Set-up calls (a call that writes or moves a parameter, or whose result is
// random or uninitialised by definition: model construction, checkpoint
// loading, to_empty's empty_strided) may use an eighth of the process's
// snapshot bytes and of its counter-window seconds, so that a program that
// builds its model in the process still has budgets left for its compute.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "capture/device_access.h"
#include "capture/evidence_budgets.h"
#include "capture/evidence_drops.h"
#include "capture/sampled_call.h"
#include "capture/sampler.h"
#include "capture/snapshot_cost.h"
#include "format/records.h"
#include "format/snapshot_file.h"
#include "runtime/snapshot_job.h"

namespace lingprobe::capture {

class SnapshotSink {
 public:
  virtual ~SnapshotSink() = default;
  virtual void submit(runtime::SnapshotJob job) = 0;
};

struct SnapshotOptions {
  bool snapshots = true;      // copy the tensors (LINGPROBE_SNAPSHOTS)
  bool profile = false;       // measure the kernels' counters (LINGPROBE_PROFILE)
  bool fold_scalars = false;  // signatures with scalar values as their type: the snapshot says so for its replay
  uint64_t budget_process = 4ull << 30;
  uint64_t budget_device = 2ull << 30;  // device copies waiting for the writer
  int64_t rank = 0;
  std::string run_id;
  bool gpu_on_machine = false;    // the machine shows an NVIDIA GPU (without it, no call has counters)
  bool gpu_calls_only = false;    // calls without a CUDA tensor or device are refused (not_on_gpu)
  double profile_budget_s = 300;  // counter-window seconds per process
  // The largest snapshot a call may have (its tensors' stored bytes, inputs
  // and outputs): the archive has no ZIP64, so one over 4 GiB is refused as
  // `too_large` before any copy or byte is written (the room left is for the
  // document and the archive's headers).
  uint64_t max_snapshot_bytes = (4ull << 30) - (64ull << 20);
};

class SnapshotCapture : public SampledCallHooks {
 public:
  SnapshotCapture(Sampler* sampler, SnapshotSink* sink, RunBudget* run_budget, DeviceAccess* device,
                  SnapshotOptions options);
  CallRefusal refusal(const SampledCall& call) override;
  void* begin(const SampledCall& call) override;
  void end(void* token, c10::ArrayRef<const c10::IValue> outputs, uint32_t signature_id, uint64_t seq) override;
  void abandon(void* token) override;

  void set_rank(int64_t rank) { rank_.store(rank); }
  format::DropCounts drops() const { return drops_.counts(); }

 private:
  struct Pending;
  struct Captured;
  bool reserve(uint64_t bytes, uint64_t device_bytes, bool setup, std::string& reason);
  TensorsCost inputs_cost(const SampledCall& call) const;
  // `evidence` of this call refused for `reason`: counted, reported, and settled when no later call could give it.
  void refuse(Pending& p, uint8_t evidence, const std::string& reason);
  // Nothing of this call is kept: the key waits for a later call.
  void give_up(std::unique_ptr<Pending> p);
  uint8_t elsewhere(uint8_t kept);  // the kinds a kept job's launch had already (Evidence bits)
  // What the call took, undone: its bytes given back, its window closed and charged. Whether a window was open.
  bool undo(Pending& p);
  // As give_up, after undo, counted under `why` ("abandoned": its end never came; "raised": the op threw).
  void drop(std::unique_ptr<Pending> p, const char* why);
  void open_window(Pending& p, const SampledCall& call, uint8_t evidence);
  void close_window(Pending& p, runtime::SnapshotJob& job);
  void copy_written_arguments(Pending& p, const SampledCall& call);
  void copy_written_arguments_or_throw(Pending& p, const SampledCall& call);
  void finish(std::unique_ptr<Pending> p, c10::ArrayRef<const c10::IValue> outputs, uint32_t signature_id,
              uint64_t seq);
  format::PickleValue snapshot_document(Pending& p, c10::ArrayRef<const c10::IValue> outputs, uint64_t seq,
                                        std::vector<std::unique_ptr<format::BlobSource>>& blobs);
  void submit(std::unique_ptr<Pending> p, runtime::SnapshotJob job, uint32_t signature_id, uint64_t seq);

  Sampler* sampler_;
  SnapshotSink* sink_;
  DeviceAccess* device_;
  SnapshotOptions options_;
  EvidenceBudgets budgets_;
  std::atomic<int64_t> rank_;
  EvidenceDrops drops_;
};

}  // namespace lingprobe::capture
