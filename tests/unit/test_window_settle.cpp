// gpu/window_settle: a timed call does not begin within 100 us of a counter
// window's end on its GPU (the gate's weight cast timed right after a window
// read 7-12% short of the trace in every run: docs/COUNTERS.md).
#include <catch2/catch.hpp>

#include <chrono>

#include "gpu/window_settle.h"

using lingprobe::gpu::WindowSettle;
using std::chrono::microseconds;

TEST_CASE("window settle: held back within 100 us of a window's end on the same device only", "[gpu]") {
  WindowSettle settle;
  const auto t = std::chrono::steady_clock::now();
  CHECK_FALSE(settle.settling(0, t));  // no window yet
  settle.window_closed(0, t);
  CHECK(settle.settling(0, t));
  CHECK(settle.settling(0, t + microseconds(99)));
  CHECK_FALSE(settle.settling(0, t + microseconds(100)));
  CHECK_FALSE(settle.settling(1, t + microseconds(10)));  // another GPU's state is its own
  settle.window_closed(0, t + microseconds(500));         // the last window counts
  CHECK(settle.settling(0, t + microseconds(550)));
  CHECK_FALSE(settle.settling(-1, t));                      // no device
  CHECK_FALSE(settle.settling(WindowSettle::kDevices, t));  // beyond the table: never held back
}
