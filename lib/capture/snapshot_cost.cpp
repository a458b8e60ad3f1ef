#include "capture/snapshot_cost.h"

#include "capture/cuda_stream.h"
#include "capture/tensor_copy.h"

namespace lingprobe::capture {

TensorsCost tensors_cost(c10::ArrayRef<const c10::IValue> values, DeviceAccess* device) {
  TensorsCost cost;
  for (const auto& v : values)
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined() || !cost.reason.empty()) return;
      cost.reason = unsupported(t);
      if (!cost.reason.empty()) return;
      const uint64_t b = stored_bytes(t);
      cost.bytes += b;
      if (!t.is_cuda()) return;
      cost.device_bytes += b;
      if (cost.device < 0) cost.device = t.get_device();
      if (!device || !kHasStreamNativeHandle)
        cost.reason = "no_gpu_access";
      else if (device->stream_capture(current_stream_handle(t.device())) != DeviceAccess::Capture::None)
        cost.capturing = true;
    });
  return cost;
}

}  // namespace lingprobe::capture
