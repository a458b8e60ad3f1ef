#include "capture/call_window.h"

#include "capture/torch_guard.h"

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "capture/cuda_stream.h"
#include "capture/tensor_copy.h"

namespace lingprobe::capture {
namespace {

bool is_collective(const std::string& name) {
  static const char* const kCollectives[] = {
      "c10d::", "_c10d_functional::", "c10d_functional::", "_c10d_functional_autograd::", "symm_mem::"};
  return std::any_of(std::begin(kCollectives), std::end(kCollectives),
                     [&](const char* prefix) { return name.rfind(prefix, 0) == 0; });
}

// The op's device: its first CUDA tensor's, else a factory call's CUDA device argument (randint(device="cuda")).
std::optional<c10::Device> cuda_device_of(const SampledCall& call) {
  std::optional<c10::Device> cuda;
  for (const auto& v : call.inputs) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!cuda && t.defined() && t.is_cuda()) cuda = t.device();
    });
    if (!cuda && v.isDevice() && v.toDevice().is_cuda()) {
      cuda = v.toDevice();
      if (!cuda->has_index()) cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice();
    }
  }
  return cuda;
}

}  // namespace

bool window_refusal_settles(const std::string& reason) {
  return reason == "collective" || reason == "counters_unavailable" || reason == "not_built_with_cupti";
}

CallRefusal early_refusal(const SampledCall& call, bool gpu_calls_only, bool timing_only, DeviceAccess* device) {
  bool gpu = false, storage = true;
  for (const auto& v : call.inputs) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined()) return;
      storage = storage && !t.is_meta() && t.has_storage();
      gpu = gpu || t.is_cuda();
    });
    if (v.isDevice()) {  // factory ops and to(device): where the result goes
      storage = storage && v.toDevice().type() != c10::DeviceType::Meta;
      gpu = gpu || v.toDevice().is_cuda();
    }
  }
  if (!storage) return CallRefusal::NoStorage;
  if (gpu_calls_only && !gpu) return CallRefusal::NotOnGpu;
  if (timing_only && gpu && device && Sampler::may_refuse_after_window(call.key)) {
    const std::optional<c10::Device> cuda = cuda_device_of(call);  // a factory's device argument too
    if (cuda && device->settling_after_window(cuda->index())) return CallRefusal::AfterCounterWindow;
  }
  return CallRefusal::None;
}

CallWindow open_call_window(const SampledCall& call, bool timing, bool setup, bool gpu_on_machine,
                            EvidenceBudgets& budgets, DeviceAccess& device) {
  auto refused = [](std::string reason, bool settled = false) {
    CallWindow w;
    w.refusal = std::move(reason);
    w.settled = settled;
    return w;
  };
  if (is_collective(call.schema->name())) return refused("collective", true);
  if (const char* spent = budgets.window_refusal(setup)) return refused(spent);
  if (at::hasThreadLocalCallbacks()) return refused("profiler_active");
  const std::optional<c10::Device> cuda = cuda_device_of(call);
  if (!cuda) return refused("no_cuda_tensor", !gpu_on_machine);  // settled: no call of this machine has one
  void* stream = current_stream_handle(*cuda);
  if (device.stream_capture(stream) != DeviceAccess::Capture::None) return refused("stream_capturing");
  CallWindow w;
  std::string reason;
  const auto t0 = std::chrono::steady_clock::now();
  w.window =
      timing ? device.open_timing(cuda->index(), stream, reason) : device.open_counters(cuda->index(), stream, reason);
  if (!w.window) {  // a refused window's wait (the counter lock, the probe) is stall too
    budgets.charge_window(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), setup);
    w.refusal = reason.empty() ? "window_not_opened" : reason;
    w.settled = window_refusal_settles(w.refusal);
  }
  w.device = cuda->index();
  return w;
}

}  // namespace lingprobe::capture
