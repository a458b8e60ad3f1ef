// Which timed calls wait because a counter window just ended on their GPU.
// A window ends with the context synchronised and the GPU idle, its L2 as
// the replay passes left it: the program's kernels dispatched right after
// start on a GPU the run without lingprobe never has there. The gate's
// weight cast timed as the next call after a window read 4.6-11.7% short of
// torch.profiler's trace of the same call in every run (docs/COUNTERS.md).
// A call due for timing alone (not for a snapshot or counters too) that
// would begin within kSettle of a window's call ending on its device is
// refused (capture: `after_counter_window`, no backoff, at most 3 times per
// key: then it is timed there), so the key is timed at a later call; views
// and other threads' calls in between do not shorten the wait. The end is
// stamped twice: at the window's close (other threads wait from there) and
// again when lingprobe's own work at that call is done (capture's end hook,
// also for a call that raised or was abandoned): the metrics evaluated
// after the close took the host past a 2 ms rule stamped there. kSettle is
// host time from the later stamp, 2 ms: by then the program has queued and
// the GPU run its next calls' kernels. Per process: another process's
// window on a shared GPU is not seen. Lock-free, any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace lingprobe::gpu {

class WindowSettle {
 public:
  static constexpr std::chrono::microseconds kSettle{2000};
  static constexpr int kDevices = 64;  // devices beyond are never held back
  // A counter window's call on `device` ended at `at`.
  void counter_call_ended(int device, std::chrono::steady_clock::time_point at);
  // Is `now` within kSettle of the last window's end on `device`?
  bool settling(int device, std::chrono::steady_clock::time_point now) const;
  // Nanoseconds from the last window's call end on `device` to `now`; -1 when none ended there yet.
  int64_t since_ns(int device, std::chrono::steady_clock::time_point now) const;

 private:
  std::array<std::atomic<int64_t>, kDevices> closed_ns_{};  // 0: no window yet
};

}  // namespace lingprobe::gpu
