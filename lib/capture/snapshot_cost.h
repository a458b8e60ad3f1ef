// What a sampled call's tensors would cost its snapshot, reckoned before any
// is copied (capture/snapshot_capture): the bytes a snapshot stores for them,
// the part on a GPU, and why no snapshot can hold them.
#pragma once

#include "capture/torch_guard.h"

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>

#include "capture/device_access.h"

namespace lingprobe::capture {

struct TensorsCost {
  std::string reason;  // why no snapshot can hold them (unsupported_*, no_storage, no_gpu_access); "" when one can
  uint64_t bytes = 0, device_bytes = 0;
  bool capturing = false;  // a CUDA graph is being captured on a device tensor's stream
  int device = -1;         // the first device tensor's CUDA device
};

// The cost of the tensors in `values` (lists and tuples walked); the first
// reason found stops the count. `device`: the process's GPU access (nullptr:
// none, and a device tensor is `no_gpu_access`).
TensorsCost tensors_cost(c10::ArrayRef<const c10::IValue> values, DeviceAccess* device);

}  // namespace lingprobe::capture
