#include "api/sampling.h"

#include "capture/torch_guard.h"

#include <mutex>

#include "capture/sampler.h"
#include "capture/snapshot_capture.h"
#include "gpu/cuda_driver.h"
#include "sink/claims.h"
#include "sink/snapshot_writer.h"

namespace lingprobe::api {
namespace {

// capture's GPU needs, over the CUDA driver (loaded on first use).
class CudaAccess : public capture::DeviceAccess {
 public:
  Capture stream_capture(void* stream) override {
    gpu::CudaDriver* d = gpu::CudaDriver::get();
    if (!d) return Capture::Unknown;
    switch (d->stream_capture(stream)) {
      case gpu::CudaDriver::Capture::None: return Capture::None;
      case gpu::CudaDriver::Capture::Active: return Capture::Active;
      default: return Capture::Unknown;
    }
  }
  std::shared_ptr<void> relax_capture_mode() override {
    gpu::CudaDriver* d = gpu::CudaDriver::get();
    if (!d) return nullptr;
    const int previous = d->relax_capture_mode();
    return std::shared_ptr<void>(nullptr, [d, previous](void*) { d->restore_capture_mode(previous); });
  }
  std::unique_ptr<capture::DeviceTransfer> transfer(int device, void* stream, const void* ptr, size_t n,
                                                    std::string& error) override {
    gpu::CudaDriver* d = gpu::CudaDriver::get(&error);
    if (!d) return nullptr;
    void* ev = d->record_event(device, stream, error);
    if (!ev) return nullptr;
    return std::make_unique<Transfer>(d, device, ev, ptr, n);
  }

 private:
  class Transfer : public capture::DeviceTransfer {
   public:
    Transfer(gpu::CudaDriver* d, int device, void* ev, const void* ptr, size_t n)
        : d_(d), device_(device), ev_(ev), ptr_(ptr), n_(n) {}
    ~Transfer() override { d_->destroy_event(device_, ev_); }
    std::string stream(const std::function<bool(const void*, size_t)>& out) override {
      return d_->copy_to_host(device_, ev_, ptr_, n_, out);
    }

   private:
    gpu::CudaDriver* d_;
    int device_;
    void* ev_;
    const void* ptr_;
    size_t n_;
  };
};

class Broker : public capture::ClaimBroker, public capture::RunBudget {
 public:
  Broker(sink::Claims* claims, uint64_t run_limit) : claims_(claims), run_limit_(run_limit) {}
  Outcome claim_key(const std::string& sha) override {
    switch (claims_->claim_key(sha)) {
      case sink::Claims::Outcome::Owned: return Outcome::Owned;
      case sink::Claims::Outcome::Held: return Outcome::HeldElsewhere;
      default: return Outcome::Unavailable;
    }
  }
  void release_key(const std::string& sha, bool failed, uint64_t bytes) override { claims_->release_key(sha, failed, bytes); }
  KeyProgress key_progress(const std::string& sha) override {
    switch (claims_->key_state(sha)) {
      case sink::Claims::KeyState::Done: return KeyProgress::Done;
      case sink::Claims::KeyState::InProgress: return KeyProgress::InProgress;
      default: return KeyProgress::Free;
    }
  }
  bool signature_sampled(const std::string& sha) override { return claims_->signature_claimed(sha); }
  bool reserve(uint64_t bytes) override { return claims_->reserve_bytes(bytes, run_limit_); }
  void give_back(uint64_t bytes) override { claims_->give_back_bytes(bytes); }

 private:
  sink::Claims* claims_;
  uint64_t run_limit_;
};

class WriterSink : public capture::SnapshotSink {
 public:
  explicit WriterSink(sink::SnapshotWriter* w) : w_(w) {}
  void submit(format::SnapshotJob job) override { w_->submit(std::move(job)); }

 private:
  sink::SnapshotWriter* w_;
};

capture::Coordination coordination_of(SampleCoordination c) {
  switch (c) {
    case SampleCoordination::Hash: return capture::Coordination::Hash;
    case SampleCoordination::None: return capture::Coordination::None;
    case SampleCoordination::Claims: break;
  }
  return capture::Coordination::Claims;
}

}  // namespace

struct SamplingSession::Parts {
  sink::Claims claims;
  Broker broker;
  sink::SnapshotWriter writer;
  WriterSink writer_sink;
  CudaAccess cuda;
  capture::Sampler sampler;
  capture::SnapshotCapture snapshots;
  bool coordinated;

  Parts(const Config& c, int64_t rank, const std::string& who, const std::string& run_dir, const std::string& run_id,
        sink::MetadataWriter* metadata)
      : claims(run_dir, rank),
        broker(&claims, static_cast<uint64_t>(c.sample_budget_run)),
        writer(run_dir, who, metadata, c.sample_coordination == SampleCoordination::Claims ? &claims : nullptr),
        writer_sink(&writer),
        snapshots(&sampler, &writer_sink, &broker, &cuda,
                  capture::SnapshotOptions{static_cast<uint64_t>(c.sample_budget_process),
                                           static_cast<uint64_t>(c.sample_budget_device), rank, run_id}),
        coordinated(c.sample_coordination == SampleCoordination::Claims) {}
};

SamplingSession::SamplingSession(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}
SamplingSession::~SamplingSession() { finalize(); }

std::unique_ptr<SamplingSession> SamplingSession::create(const Config& c, int64_t rank, int64_t world_size,
                                                         const std::string& who, const std::string& run_dir,
                                                         const std::string& run_id, sink::MetadataWriter* metadata) {
  if (!c.snapshots) return nullptr;
  auto parts = std::make_unique<Parts>(c, rank, who, run_dir, run_id, metadata);
  capture::SamplingOptions so;
  so.enabled = true;
  so.first = static_cast<uint64_t>(c.sample_first);
  so.skip = static_cast<uint64_t>(c.sample_skip);
  so.every = static_cast<uint64_t>(c.sample_every);
  so.probability = c.sample_probability;
  so.seed = static_cast<uint64_t>(c.sample_seed);
  (void)so.selection.parse(c.sample_ops, "");  // validated with the configuration
  so.coordination = coordination_of(c.sample_coordination);
  parts->sampler.configure(so, &parts->broker, rank, world_size);
  return std::unique_ptr<SamplingSession>(new SamplingSession(std::move(parts)));
}

capture::Sampler* SamplingSession::sampler() { return &parts_->sampler; }
capture::SampledCallHooks* SamplingSession::hooks() { return &parts_->snapshots; }

void SamplingSession::on_new_signature(uint32_t id, const std::string& sha, const std::string& text) {
  parts_->writer.add_signature(id, sha, text);
}

void SamplingSession::poll() { parts_->sampler.poll(); }

void SamplingSession::add_counts(format::CountsSnapshot& counts) {
  for (const auto& [what, reasons] : parts_->snapshots.drops())
    for (const auto& [reason, n] : reasons) counts.dropped[what][reason] += n;
  const capture::SamplingStats s = parts_->sampler.stats();
  counts.sampling["keys"] = s.keys;
  counts.sampling["keys_sampled"] = s.sampled;
  counts.sampling["samples"] = s.samples;
  counts.sampling["snapshots_written"] = parts_->writer.written();
  counts.sampling["snapshot_bytes"] = parts_->writer.bytes_written();
  counts.unsampled = parts_->sampler.unsampled_reasons();
}

void SamplingSession::set_identity(int64_t rank, int64_t world_size, const std::string& who) {
  parts_->sampler.set_rank(rank, world_size);
  parts_->snapshots.set_rank(rank);
  parts_->writer.set_who(who);
  parts_->claims.set_rank(rank);
}

void SamplingSession::finalize() { parts_->writer.finalize(); }
uint64_t SamplingSession::snapshots_written() const { return parts_->writer.written(); }
uint64_t SamplingSession::snapshot_bytes() const { return parts_->writer.bytes_written(); }

}  // namespace lingprobe::api
