// gpu/window_settle: a timed call does not begin within 2 ms of a counter
// window's end on its GPU (the gate's weight cast timed right after a window
// read 4.6-11.7% short of the trace in every run: docs/COUNTERS.md).
#include <catch2/catch.hpp>

#include <chrono>

#include "gpu/window_settle.h"

using lingprobe::gpu::WindowSettle;
using std::chrono::microseconds;

TEST_CASE("window settle: held back within 2 ms of a window's end on the same device only", "[gpu]") {
  WindowSettle settle;
  const auto t = std::chrono::steady_clock::now();
  CHECK_FALSE(settle.settling(0, t));  // no window yet
  CHECK(settle.since_ns(0, t) == -1);
  settle.counter_call_ended(0, t);
  CHECK(settle.settling(0, t));
  CHECK(settle.settling(0, t + microseconds(1999)));
  CHECK(settle.since_ns(0, t + microseconds(1999)) == 1999000);
  CHECK_FALSE(settle.settling(0, t + microseconds(2000)));
  CHECK_FALSE(settle.settling(1, t + microseconds(10)));  // another GPU's state is its own
  settle.counter_call_ended(0, t + microseconds(5000));   // the last window counts
  CHECK(settle.settling(0, t + microseconds(6500)));
  CHECK_FALSE(settle.settling(-1, t));                      // no device
  CHECK_FALSE(settle.settling(WindowSettle::kDevices, t));  // beyond the table: never held back
}
