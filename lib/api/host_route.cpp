#include "api/host_route.h"

#include <string>
#include <utility>

#include "gpu/cuda_driver.h"

namespace lingprobe::api {
namespace {

// Pinned memory and copy events through the CUDA driver (loaded by then: a call copied device tensors).
class DriverMemory : public gpu::PinnedReserve::Memory {
 public:
  void* allocate(int device, size_t nbytes) override {
    std::string error;
    gpu::CudaDriver* d = gpu::CudaDriver::get(&error);
    return d ? d->allocate_pinned(device, nbytes, error) : nullptr;
  }
  void release(int device, void* host) override {
    if (gpu::CudaDriver* d = gpu::CudaDriver::loaded()) d->free_pinned(device, host);
  }
  bool wait_and_destroy(int device, void* event) override {
    gpu::CudaDriver* d = gpu::CudaDriver::loaded();
    if (!d) return false;
    const bool done = d->wait_event(device, event);
    d->destroy_event(device, event);
    return done;
  }
};

// One copy's bytes in the pinned buffer, handed on once the op's stream has made the copy.
class PinnedTransfer : public capture::DeviceTransfer {
 public:
  PinnedTransfer(std::shared_ptr<gpu::PinnedReserve::Lease> lease, int device, void* event, const void* bytes, size_t n)
      : lease_(std::move(lease)), device_(device), event_(event), bytes_(bytes), n_(n) {}
  std::string stream(const std::function<bool(const void*, size_t)>& out) override {
    gpu::CudaDriver* d = gpu::CudaDriver::loaded();
    if (!d || !d->wait_event(device_, event_)) return "waiting for the op's stream to copy to pinned host memory";
    return out(bytes_, n_) ? "" : "write failed";
  }

 private:
  std::shared_ptr<gpu::PinnedReserve::Lease> lease_;  // the memory lives while a transfer into it does
  int device_;
  void* event_;  // the lease's: destroyed when the memory is freed
  const void* bytes_;
  size_t n_;
};

class PinnedBuffer : public capture::HostBuffer {
 public:
  explicit PinnedBuffer(std::shared_ptr<gpu::PinnedReserve::Lease> lease) : lease_(std::move(lease)) {}
  uint64_t size() const override { return lease_->size(); }
  std::unique_ptr<capture::DeviceTransfer> copy(int device, void* stream, const void* device_ptr, size_t nbytes,
                                                std::string& error) override {
    gpu::CudaDriver* d = gpu::CudaDriver::get(&error);
    void* slice = d ? lease_->slice(nbytes) : nullptr;
    if (d && !slice) error = "no room left in the call's pinned buffer";
    bool queued = false;
    void* event = slice ? d->copy_to_pinned(device, stream, slice, device_ptr, nbytes, queued, error) : nullptr;
    try {
      if (event) lease_->add_event(device, event);
    } catch (...) {
      d->destroy_event(device, event);
      event = nullptr;
    }
    if (event) return std::make_unique<PinnedTransfer>(lease_, device, event, slice, nbytes);
    if (queued) lease_->untracked_copy();  // in flight, and nothing will say when it is done
    return nullptr;
  }

 private:
  std::shared_ptr<gpu::PinnedReserve::Lease> lease_;
};

// Stateless, and never destroyed before a lease that outlives its reserve.
DriverMemory g_driver_memory;

}  // namespace

HostRoute::HostRoute(gpu::PinnedReserve::RunOnWriter run) : reserve_(&g_driver_memory, std::move(run)) {}

void HostRoute::want(int device, uint64_t nbytes) { reserve_.want(device, static_cast<size_t>(nbytes)); }

std::shared_ptr<capture::HostBuffer> HostRoute::take(uint64_t nbytes) {
  std::shared_ptr<gpu::PinnedReserve::Lease> lease = reserve_.take(static_cast<size_t>(nbytes));
  return lease ? std::make_shared<PinnedBuffer>(std::move(lease)) : nullptr;
}

}  // namespace lingprobe::api
