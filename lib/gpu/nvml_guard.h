// Who else computed on the GPU while a counter window was open: NVML's
// compute processes of the device before the window, sampled from a thread
// of its own during it, and after it (guard_own_pid_history.json of a
// profile). DRAM and L2 counters are device-wide, so another process's
// kernels inside the window inflate them. Also the clocks as found (NVML's
// current SM and memory clocks), not the rated ones.
//
// NVML (libnvidia-ml.so.1) is loaded at run time; without it, or without the
// device, the verdict is `unknown` with the reason: never a failure. Our pid
// is matched through the pid namespace (every NSpid of /proc/self/status):
// inside a container NVML may list host pids, or none at all.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "format/json_value.h"

namespace lingprobe::gpu {

struct ComputeProcess {
  uint32_t pid = 0;
  uint64_t used_memory_bytes = 0;
};

struct GuardSample {
  double t_seconds = 0;  // since the guard started
  bool ok = false;       // NVML answered
  std::vector<ComputeProcess> processes;
};

// The verdict over all samples (pure, for tests): `alone` (every sample shows
// only this process, matched by pid or as the sole compute process while it
// holds a context), `shared` (another process in some sample: `others`), or
// `unknown` (`reason`).
struct GuardVerdict {
  std::string verdict, matched_by, reason;
  std::vector<uint32_t> others;
};
GuardVerdict judge(const std::vector<GuardSample>& samples, const std::vector<uint32_t>& own_pids);

// This process's pid in every pid namespace /proc/self/status names (NSpid), outermost first.
std::vector<uint32_t> own_pids();

class NvmlGuard {
 public:
  // Samples device `uuid` ("GPU-..."), now, then every `period_ms` on its own thread.
  explicit NvmlGuard(const std::string& uuid, int period_ms = 5);
  ~NvmlGuard();
  NvmlGuard(const NvmlGuard&) = delete;
  NvmlGuard& operator=(const NvmlGuard&) = delete;

  // Stops the thread, samples once more and returns the history:
  // {device_uuid, nvml, own_pids, before, during{samples, period_ms, changes[]}, after,
  //  verdict, matched_by, other_pids, reason, clocks_mhz_before, clocks_mhz_after}. Idempotent.
  format::JsonValue finish();

  // NVML's driver version string ("580.95.05"), "" without NVML.
  static std::string driver_version();

 private:
  GuardSample sample();
  // The device's clocks now, in MHz ({sm, memory, sm_max, memory_max}); empty object without the device.
  format::JsonValue clocks() const;
  std::string uuid_;
  int period_ms_;
  void* device_ = nullptr;
  std::string error_;
  double t0_ = 0;
  std::vector<GuardSample> before_, during_, after_;
  format::JsonValue clocks_before_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  bool finished_ = false;
  format::JsonValue result_;
};

}  // namespace lingprobe::gpu
