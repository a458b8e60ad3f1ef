// The counter window's parts that need no GPU: the verdict (a pure function
// of what the window saw), the launch's per-GPU lock and its epoch, and a
// process without CUPTI or a driver refusing windows with a code.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "gpu/counter_lock.h"
#include "gpu/window_verdict.h"
#include "test_support.h"
using namespace lingprobe::gpu;

namespace {

KernelLaunch launch(uint32_t correlation, const char* name, uint32_t context = 1, uint32_t stream = 7) {
  KernelLaunch k;
  k.mangled = name;
  k.correlation = correlation;
  k.context = context;
  k.stream = stream;
  return k;
}

WindowObservations seen_with(std::vector<KernelLaunch> records) {
  WindowObservations s;
  s.records = std::move(records);
  s.context_id = 1;
  s.stream_id = 7;
  return s;
}

}  // namespace

TEST_CASE("window verdict: the op's launches once each in launch order, one range each, passes", "[verdict]") {
  WindowResult res;
  res.ranges = 2;
  decide_window(seen_with({launch(12, "b"), launch(11, "a"), launch(12, "b")}), res);
  CHECK(res.status == WindowResult::Status::Passed);
  REQUIRE(res.kernels.size() == 2);
  CHECK(res.kernels[0].mangled == "a");
  CHECK(res.kernels[1].mangled == "b");
  CHECK(res.reason.empty());
  CHECK(std::string(status_name(res.status)) == "passed");
}

TEST_CASE("window verdict: what spoils a window, in order of precedence", "[verdict]") {
  SECTION("a failure before the verdict stays") {
    WindowResult res;
    res.reason = "decode: CUPTI_ERROR_UNKNOWN";
    decide_window(seen_with({launch(1, "a")}), res);
    CHECK(res.status == WindowResult::Status::Failed);
    CHECK(res.reason == "decode: CUPTI_ERROR_UNKNOWN");
  }
  SECTION("another client took the Activity records") {
    WindowResult res;
    res.ranges = 1;
    WindowObservations s = seen_with({});
    s.taken_over = true;
    decide_window(s, res);
    CHECK(res.status == WindowResult::Status::Abandoned);
    CHECK(res.reason.find("Activity callbacks") != std::string::npos);
  }
  SECTION("another thread's launch ran inside after the hold") {
    WindowResult res;
    res.ranges = 1;
    WindowObservations s = seen_with({launch(1, "a")});
    s.hold_timeouts = 2;
    decide_window(s, res);
    CHECK(res.status == WindowResult::Status::Abandoned);
    CHECK(res.reason.rfind("2 launch(es)", 0) == 0);
  }
  SECTION("a graph or a device-side launch") {
    WindowResult res;
    res.ranges = 1;
    KernelLaunch k = launch(1, "a");
    k.graph = 5;
    decide_window(seen_with({k}), res);
    CHECK(res.status == WindowResult::Status::Abandoned);
    WindowResult guard;
    guard.ranges = 1;
    WindowObservations s = seen_with({launch(1, "a")});
    s.graph_launched = true;
    decide_window(s, guard);
    CHECK(guard.status == WindowResult::Status::Abandoned);
  }
  SECTION("another stream's or context's kernel is foreign") {
    WindowResult res;
    res.ranges = 2;
    decide_window(seen_with({launch(1, "a"), launch(2, "nccl", 1, 9), launch(3, "other", 2, 7)}), res);
    CHECK(res.status == WindowResult::Status::Contaminated);
    CHECK(res.foreign == std::vector<std::string>{"nccl", "other"});
    CHECK(res.kernels.size() == 1);
  }
  SECTION("ranges and launches disagree, or ranges were dropped") {
    WindowResult res;
    res.ranges = 3;
    decide_window(seen_with({launch(1, "a"), launch(2, "b")}), res);
    CHECK(res.status == WindowResult::Status::Contaminated);
    CHECK(res.reason == "3 range(s) for 2 kernel launch(es) of the op");
    WindowResult dropped;
    dropped.ranges = 1;
    dropped.dropped_ranges = 1;
    decide_window(seen_with({launch(1, "a")}), dropped);
    CHECK(dropped.status == WindowResult::Status::Contaminated);
  }
  SECTION("unknown context and stream ids check nothing") {
    WindowResult res;
    res.ranges = 1;
    WindowObservations s;
    s.records = {launch(1, "a", 4, 4)};
    decide_window(s, res);
    CHECK(res.status == WindowResult::Status::Passed);
  }
}

KernelLaunch timed(uint32_t correlation, const char* name, uint64_t start, uint64_t end) {
  KernelLaunch k = launch(correlation, name);
  k.start_ns = start;
  k.end_ns = end;
  return k;
}

TEST_CASE("timing verdict: the thread's own kernels in start order; other threads' and duplicates left out",
          "[verdict]") {
  TimingResult res;
  // 40 is another thread's launch; 31 is a graph launch of the op's thread with two kernels; 30 arrives twice.
  decide_timing({timed(31, "g2", 300, 350), timed(40, "other", 100, 900), timed(30, "k", 100, 200),
                 timed(31, "g1", 210, 290), timed(30, "k", 100, 200)},
                {30, 31}, res);
  CHECK(res.passed);
  CHECK(res.launches == 2);
  REQUIRE(res.kernels.size() == 3);
  CHECK(res.kernels[0].mangled == "k");
  CHECK(res.kernels[1].mangled == "g1");
  CHECK(res.kernels[2].mangled == "g2");
}

TEST_CASE("timing verdict: a launch without its record, or a record without timestamps, fails", "[verdict]") {
  TimingResult missing;
  decide_timing({timed(30, "k", 100, 200)}, {30, 31}, missing);
  CHECK_FALSE(missing.passed);
  CHECK(missing.reason.find("1 of the op's 2 launch(es) have no kernel record") == 0);
  TimingResult untimed;  // what CUPTI gives under the range profiler
  decide_timing({timed(30, "k", 0, 0)}, {30}, untimed);
  CHECK_FALSE(untimed.passed);
  CHECK(untimed.reason == "CUPTI gave a kernel record without timestamps");
  TimingResult both;  // a forced flush's record without timestamps, then the kernel's whole record: the latter
  decide_timing({timed(30, "k", 0, 0), timed(30, "k", 100, 200)}, {30}, both);
  CHECK(both.passed);
  REQUIRE(both.kernels.size() == 1);
  CHECK(both.kernels[0].end_ns == 200);
  TimingResult none;  // an op that launched nothing (a view) passes with no kernel
  decide_timing({timed(40, "other", 1, 2)}, {}, none);
  CHECK(none.passed);
  CHECK(none.kernels.empty());
}

TEST_CASE("counter lock: one holder per GPU, its epoch odd while held", "[counter_lock]") {
  const std::string path = lingprobe::test::temp_dir("lpunit-lock-");
  auto open_dir = [path] { return ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); };
  CounterLock a(open_dir, 0), b(open_dir, 0);
  CHECK(a.shared_epoch(0, "GPU-x") == 0);
  const int fd = a.lock("GPU-x");
  REQUIRE(fd >= 0);
  CHECK(b.shared_epoch(0, "GPU-x") == 1);  // odd: a window is open on the GPU
  CHECK(b.lock("GPU-x") == CounterLock::kTimedOut);
  const int other = b.lock("GPU-y");  // another GPU: its own lock
  CHECK(other >= 0);
  b.unlock(other);
  a.unlock(fd);
  CHECK(b.shared_epoch(0, "GPU-x") == 2);
  const int again = b.lock("GPU-x");
  CHECK(again >= 0);
  b.unlock(again);
  CounterLock none([] { return -1; }, 0);
  CHECK(none.lock("GPU-x") == -1);  // no shared directory: not serialised
  CHECK(none.shared_epoch(0, "GPU-x") == 0);
}
