// Which timed calls wait because a counter window just ended on their GPU.
// A window ends with the context synchronised and the GPU idle, its L2 as
// the replay passes left it: the program's kernels dispatched right after
// start on a GPU the run without lingprobe never has there. The gate's
// weight cast timed as the next call after a window read 5-12% short of
// torch.profiler's trace of the same call in every run (docs/COUNTERS.md).
// A timed call that would begin within kSettle of a window's call ending on
// its device is refused (capture: `after_counter_window`, no backoff), so the
// key is timed at a later call; views and other threads' calls in between
// do not shorten the wait. The call's end is stamped when lingprobe's own
// work at it is done (capture's end hook), not at the window's close: the
// metrics evaluated after the close take the host milliseconds, so a rule
// from the close never fired. kSettle is host time from there, 2 ms: by
// then the program has queued and the GPU run its next calls' kernels.
// Lock-free, any thread.
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
