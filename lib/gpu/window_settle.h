// Which timed calls wait because a counter window just ended on their GPU.
// A window ends with the context synchronised and the GPU idle, its L2 as
// the replay passes left it: the program's kernels dispatched right after
// start on a GPU the run without lingprobe never has there. The gate's
// weight cast timed as the next call after a window read 7-12% short of
// torch.profiler's trace of the same call in every run (docs/COUNTERS.md).
// A timed call that would begin within kSettle of a window's end on its
// device is refused (capture: `after_counter_window`, no backoff), so the
// key is timed at a later call; views and other threads' calls in between
// do not shorten the wait. Lock-free, any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

namespace lingprobe::gpu {

class WindowSettle {
 public:
  static constexpr std::chrono::microseconds kSettle{100};
  static constexpr int kDevices = 64;  // devices beyond are never held back
  // A counter window on `device` ended at `at`.
  void window_closed(int device, std::chrono::steady_clock::time_point at);
  // Is `now` within kSettle of the last window's end on `device`?
  bool settling(int device, std::chrono::steady_clock::time_point now) const;

 private:
  std::array<std::atomic<int64_t>, kDevices> closed_ns_{};  // 0: no window yet
};

}  // namespace lingprobe::gpu
