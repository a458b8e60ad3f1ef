// The calling thread's autocast state (thread-local in torch), read and
// written through whichever API this torch has: torch >= 2.4 takes a device
// type, older ones (1.13) have per-device functions. Sampled calls record it
// (capture/snapshot_capture); replay re-enters it (replay/replay).
#pragma once

#include "capture/torch_guard.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace lingprobe::capture {

struct AutocastState {
  bool cuda = false, cpu = false, cache = true;
  at::ScalarType cuda_dtype = at::kHalf, cpu_dtype = at::kBFloat16;

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  static AutocastState current() {
    using namespace at::autocast;
    return {is_autocast_enabled(at::kCUDA), is_autocast_enabled(at::kCPU), is_autocast_cache_enabled(),
            get_autocast_dtype(at::kCUDA), get_autocast_dtype(at::kCPU)};
  }
  void apply() const {
    using namespace at::autocast;
    set_autocast_enabled(at::kCUDA, cuda);
    set_autocast_enabled(at::kCPU, cpu);
    set_autocast_dtype(at::kCUDA, cuda_dtype);
    set_autocast_dtype(at::kCPU, cpu_dtype);
    set_autocast_cache_enabled(cache);
  }
#else
  static AutocastState current() {
    using namespace at::autocast;
    return {is_enabled(), is_cpu_enabled(), is_autocast_cache_enabled(), get_autocast_gpu_dtype(),
            get_autocast_cpu_dtype()};
  }
  void apply() const {
    using namespace at::autocast;
    set_enabled(cuda);
    set_cpu_enabled(cpu);
    set_autocast_gpu_dtype(cuda_dtype);
    set_autocast_cpu_dtype(cpu_dtype);
    set_autocast_cache_enabled(cache);
  }
#endif
};

}  // namespace lingprobe::capture
