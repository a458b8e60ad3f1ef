// The verdict of a counter window, a pure function of what the window saw:
// its launch records, its ranges, and the events the launch guard counted.
// Apart from CUPTI so that it is unit-tested without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lingprobe::gpu {

// While a window is open another thread's launch waits at its entry at most this long (cupti_profiler).
constexpr int kHoldSeconds = 20;

struct KernelLaunch {
  std::string mangled;  // as CUPTI reports it
  uint32_t correlation = 0, stream = 0, device = 0, context = 0, graph = 0;
  int32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  uint32_t registers = 0;
  int32_t static_shared = 0, dynamic_shared = 0;
  bool device_launched = false;
  uint64_t start_ns = 0, end_ns = 0;  // CUPTI's timestamps (0 under the range profiler)
};

struct WindowResult {
  enum class Status { Passed, Abandoned, Contaminated, Failed, Unavailable };
  Status status = Status::Failed;
  std::string reason;                       // why not passed
  std::vector<KernelLaunch> kernels;        // this window's kernels, in launch order
  std::vector<std::vector<double>> values;  // per range (kernel): one value per metric of the set
  size_t ranges = 0, dropped_ranges = 0, dropped_records = 0;
  std::vector<std::string> foreign;  // kernels of other streams or contexts seen in the window
  bool launch_guard = false;         // the launch callback (CUPTI's subscriber) was armed
  uint32_t launches_held = 0;        // other threads' kernel/graph launches held at their entry until the window closed
};

const char* status_name(WindowResult::Status s);

// What the window saw, as end_window gathers it.
struct WindowObservations {
  std::vector<KernelLaunch> records;  // the Activity launch records of the window, in any order, duplicates possible
  uint32_t context_id = 0, stream_id = 0;  // the op's (0: unknown, not checked)
  bool graph_launched = false;             // the launch guard saw a graph launch on the window's thread
  uint32_t hold_timeouts = 0;  // other threads' launches that waited the whole hold and ran inside the window
  bool taken_over = false;     // ranges but no launch record: another client took the Activity callbacks
};

// Fills res.kernels (the op's launches, once each, in launch order), res.foreign, res.status and res.reason
// (kept when already set: a failure before the verdict). res.ranges and res.dropped_ranges are read.
void decide_window(WindowObservations seen, WindowResult& res);

// A timing window's kernels: the launches of its thread, timed by CUPTI Activity.
struct TimingResult {
  bool passed = false;
  std::string reason;                 // why not passed
  std::vector<KernelLaunch> kernels;  // in start order, each with start_ns < end_ns
  uint32_t launches = 0;              // the thread's launch calls in the window
  // How the records were read (timed calls, on the writer's thread): the seconds from the end event's wait to the
  // records in hand, the cuptiActivityFlushAll calls made, and whether the last was forced (unforced ones never
  // handed the records over within their wait).
  double records_wait_seconds = 0;
  uint32_t flushes = 0;
  bool forced_flush = false;
};

// Fills res from the window's records (any thread's, in any order,
// duplicates possible) and the correlation ids of its own thread's launches
// (res.reason kept when already set: a failure before the verdict).
void decide_timing(std::vector<KernelLaunch> records, const std::vector<uint32_t>& own, TimingResult& res);

}  // namespace lingprobe::gpu
