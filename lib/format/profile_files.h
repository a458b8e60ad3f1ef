// What one profiled call's counters become on disk (SPEC section 4:
// profiles/{stem}/): kernels.json in the capability seed's kernel layout
// (metrics as {value, unit} in the seed's fixed units: us, %, Mbyte = 1e6 B,
// Tbyte/s, register/thread, Kbyte/block), metrics.csv in the layout of
//   ncu --csv --page raw --print-units base --print-kernel-base mangled --metrics <the set>
// (base units: nsecond, %, byte, byte/second, register/thread, byte/block),
// and identity.json. Pure functions of the measured data; no torch, no CUDA.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/json_value.h"

namespace lingprobe::format {

struct ProfiledKernel {
  std::string name, mangled_name;
  int device = 0;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  uint32_t registers_per_thread = 0;
  int64_t shared_bytes_per_block = 0;  // static + dynamic + the 1 KiB the driver reserves (as ncu reports it)
  std::vector<double> values;          // one per metric of ProfileData::metrics, as CUPTI evaluates them (base units)
  // A timed call's kernel: its start and end on the GPU's clock (CUPTI Activity, ns), so that a reader sees how long
  // the GPU idled before it (validate --against-trace); 0 elsewhere (a counter window's replayed kernels).
  uint64_t gpu_start_ns = 0, gpu_end_ns = 0;
};

struct ProfileData {
  std::string status;  // passed | failed | abandoned | contaminated | counters_unavailable
  std::string reason;
  std::vector<std::string> metrics;
  size_t passes = 0;
  std::string compute_capability;  // "9.0"
  std::vector<ProfiledKernel> kernels;
  std::vector<std::string> foreign_kernels;
  double window_seconds = 0;     // wall time of the window, the lock wait included (the calling thread's stall)
  double lock_wait_seconds = 0;  // of which waiting for the GPU's counter lock (another rank's window)
  JsonValue guard;               // guard_own_pid_history.json (gpu/nvml_guard); null: none taken
  JsonValue identity = JsonValue::object();  // signature, GPU, driver, CUDA/CUPTI, clocks, process
  std::string log;
};

// The seed's unit of a metric and the factor from CUPTI's base unit to it.
struct SeedUnit {
  const char* unit;
  double factor;
};
SeedUnit seed_unit(const std::string& metric);

JsonValue kernels_json(const ProfileData& p);
std::string metrics_csv(const ProfileData& p, int pid, const std::string& process, const std::string& host);

}  // namespace lingprobe::format
