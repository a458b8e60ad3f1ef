// The current stream of a tensor's CUDA device as a cudaStream_t, for the
// torch-facing parts of capture (snapshot copies, counter windows, the stage
// clock). c10::Stream::native_handle() exists from torch 2.2 on; before, it
// is nullptr and lingprobe does no GPU work of its own.
#pragma once

#include "capture/torch_guard.h"

#include <c10/core/Device.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>

namespace lingprobe::capture {

#define LINGPROBE_STREAM_HANDLE (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2))
constexpr bool kHasStreamNativeHandle = LINGPROBE_STREAM_HANDLE;

inline void* current_stream_handle(const c10::Device& device) {
#if LINGPROBE_STREAM_HANDLE
  const auto* impl = c10::impl::getDeviceGuardImpl(device.type());
  return impl->getStream(device).native_handle();
#else
  (void)device;
  return nullptr;
#endif
}

}  // namespace lingprobe::capture
