// The host route of capture's DeviceAccess (docs/SNAPSHOTS.md, "Large
// tensors"): the device copies of a call too large for the device budget go
// into pinned host memory on the op's stream. The memory comes from
// gpu::PinnedReserve, allocated and freed on the evidence writer's thread;
// the copies are queued through the CUDA driver, and each hands its bytes to
// the writer once the stream has made it.
#pragma once

#include <cstdint>
#include <memory>

#include "capture/device_access.h"
#include "gpu/pinned_reserve.h"

namespace lingprobe::api {

class HostRoute {
 public:
  // `run`: a chore on the evidence writer's thread (sink::SnapshotWriter::run_chore).
  explicit HostRoute(gpu::PinnedReserve::RunOnWriter run);
  // DeviceAccess::want_host_buffer, take_host_buffer.
  void want(int device, uint64_t nbytes);
  std::shared_ptr<capture::HostBuffer> take(uint64_t nbytes);

 private:
  gpu::PinnedReserve reserve_;
};

}  // namespace lingprobe::api
