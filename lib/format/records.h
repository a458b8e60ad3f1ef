// In-memory forms of the metadata records that cross from capture to sink
// (SPEC section 4): a call, and the cumulative counts with drop counters.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace lingprobe::format {

struct CallRecord {
  uint64_t seq;
  int64_t t0_ns;
  int64_t t1_ns;
  uint32_t signature_id;
  uint32_t tid;
  uint32_t depth;
};

// dropped[what][reason] = n, as written in "counts" records.
using DropCounts = std::map<std::string, std::map<std::string, uint64_t>>;

struct CountsSnapshot {
  std::vector<std::pair<uint32_t, uint64_t>> calls;  // signature id -> calls
  DropCounts dropped;
  // Sampling (snapshots, counters): "keys", "sampled", "samples", ... and
  // what stays unsampled by reason. Written only when sampling is on.
  std::map<std::string, uint64_t> sampling;
  std::map<std::string, uint64_t> unsampled;
  // GPU time per stage (LINGPROBE_STAGE_GPU_TIME), by stage name: "gpu_us",
  // "intervals", "clean_gpu_us", "clean_intervals"; and intervals lost by reason.
  std::map<std::string, std::map<std::string, uint64_t>> stage_gpu;
  std::map<std::string, uint64_t> stage_gpu_lost;
  // Calls nested below recorded top-level calls (LINGPROBE_SUPPRESS_NESTED): "seen" (reached the callback, each
  // boxed by the dispatcher) and "suppressed_below" (top-level calls below which RecordFunction was switched off).
  // Written only when top-level calls are recorded (not with NESTED).
  std::map<std::string, uint64_t> nested;
  // Calls torch.compile's tracing ran on fake tensors (capture/compile_tracing; top-level ones, every one with
  // NESTED), by how they were recognised: "fake_tensor_mode", "fake_tensor_inputs", "fake_tensor_outputs".
  // Outside the rows; written when any.
  std::map<std::string, uint64_t> compile_time;
  // Top-level c10d calls per stage name, whatever the op selection: "calls" and "us", each call timed from its
  // start to the start of its thread's next top-level call (the wait for the collective included). Written when any.
  std::map<std::string, std::map<std::string, uint64_t>> collectives;
};

}  // namespace lingprobe::format
