// What a sampled call's tensors would cost its snapshot, reckoned before any
// is copied (capture/snapshot_capture): the bytes a snapshot stores for them,
// the part on a GPU, and why no snapshot can hold them; and which way their
// device copies go. A call whose device copies could never fit the device
// budget, even with none in flight, takes the host route (docs/SNAPSHOTS.md,
// "Large tensors"): its copies go into pinned host memory on the op's stream,
// a buffer asked for at an earlier call of its key and allocated off the
// calling thread meanwhile.
#pragma once

#include "capture/torch_guard.h"

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>

#include "capture/device_access.h"
#include "capture/sampler.h"

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

// The device bytes of a call that takes the host route, else 0: its inputs', or the inputs' and outputs' an
// earlier call of its key had, where they exceed `budget_device`.
uint64_t host_route_bytes(const SampleKey* key, const TensorsCost& inputs, uint64_t budget_device);

// Asks `device` for a pinned buffer for a host-route call that found none ready: the key's known bytes, else twice
// its inputs' (the outputs' are not known yet), at most `max_bytes`; on its inputs' device, else its outputs'.
void ask_for_host_buffer(DeviceAccess& device, const SampleKey* key, const TensorsCost& inputs, uint64_t max_bytes);

// Whether a call's outputs' device copies fit with its inputs' `inputs_device` in `room` (its pinned buffer, or
// the device budget). Where not, the key remembers the whole and its device, and a buffer that holds them is asked
// for, which the key's next try takes.
bool outputs_fit(DeviceAccess* device, SampleKey* key, uint64_t inputs_device, const TensorsCost& outputs,
                 uint64_t room, uint64_t max_bytes);

}  // namespace lingprobe::capture
