#include "capture/snapshot_cost.h"

#include "capture/cuda_stream.h"
#include "capture/tensor_copy.h"

#include <algorithm>

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

uint64_t host_route_bytes(const SampleKey* key, const TensorsCost& inputs, uint64_t budget_device) {
  const uint64_t known = key ? key->device_copy_bytes.load(std::memory_order_relaxed) : 0;
  const uint64_t whole = std::max(inputs.device_bytes, known);
  return whole > budget_device ? whole : 0;
}

void ask_for_host_buffer(DeviceAccess& device, const SampleKey* key, const TensorsCost& inputs, uint64_t max_bytes) {
  const uint64_t known = key ? key->device_copy_bytes.load(std::memory_order_relaxed) : 0;
  const int on = inputs.device >= 0 ? inputs.device : key ? key->device_copy_device.load() : -1;
  if (on >= 0) device.want_host_buffer(on, std::min(max_bytes, known ? known : 2 * inputs.device_bytes));
}

bool outputs_fit(DeviceAccess* device, SampleKey* key, uint64_t inputs_device, const TensorsCost& outputs,
                 uint64_t room, uint64_t max_bytes) {
  const uint64_t whole = inputs_device + outputs.device_bytes;
  if (!outputs.device_bytes || whole <= room) return true;
  if (key) {
    key->device_copy_bytes.store(whole, std::memory_order_relaxed);
    key->device_copy_device.store(outputs.device, std::memory_order_relaxed);
  }
  if (device) device->want_host_buffer(outputs.device, std::min(max_bytes, whole));
  return false;
}

}  // namespace lingprobe::capture
