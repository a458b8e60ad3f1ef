// Timed calls (gpu/cupti_timing) over fakes of CUPTI's functions, no GPU:
// the op's thread stops its call without waiting, later calls begin while
// earlier ones are pending, each call gets its own kernels' records when the
// writer ends it, and the session (Activity, the launch callback) ends with
// the last pending call. Before, a second timed call while the first was
// pending was refused (window_busy), and the Llama corpus kept 9 of 74 keys
// timed (docs/COUNTERS.md, "Tried: a timed call that does not wait").
#include <catch2/catch.hpp>

#ifdef LINGPROBE_HAVE_CUPTI
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "gpu/counter_windows.h"
#include "gpu/cupti_api.h"
#include "gpu/cupti_profiler.h"
#include "gpu/cupti_window.h"

using namespace lingprobe::gpu;

namespace {

struct FakeCupti {
  static inline int subscribes = 0, unsubscribes = 0, enables = 0, disables = 0;
  static inline CUpti_BuffersCallbackRequestFunc requested = nullptr;
  static inline CUpti_BuffersCallbackCompleteFunc completed = nullptr;
  static inline std::vector<CUpti_ActivityKernel10> delivered;  // what the next flush completes

  static CUptiResult GetResultString(CUptiResult, const char** s) {
    *s = "fake";
    return CUPTI_SUCCESS;
  }
  static CUptiResult Subscribe(CUpti_SubscriberHandle* h, CUpti_CallbackFunc, void*) {
    ++subscribes;
    *h = reinterpret_cast<CUpti_SubscriberHandle>(uintptr_t{1});
    return CUPTI_SUCCESS;
  }
  static CUptiResult Unsubscribe(CUpti_SubscriberHandle) {
    ++unsubscribes;
    return CUPTI_SUCCESS;
  }
  static CUptiResult EnableCallback(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain, CUpti_CallbackId) {
    return CUPTI_SUCCESS;
  }
  static CUptiResult ActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc r,
                                               CUpti_BuffersCallbackCompleteFunc c) {
    requested = r, completed = c;
    return CUPTI_SUCCESS;
  }
  static CUptiResult ActivityEnable(CUpti_ActivityKind) {
    ++enables;
    return CUPTI_SUCCESS;
  }
  static CUptiResult ActivityDisable(CUpti_ActivityKind) {
    ++disables;
    return CUPTI_SUCCESS;
  }
  // Kernels still running: their records share the buffer, so an unforced flush returns nothing until they
  // end (after `unforced_flushes_left` more such flushes); a forced one returns them without timestamps.
  static inline std::vector<CUpti_ActivityKernel10> running;
  static inline int unforced_flushes_left = 0, forced_flushes = 0;
  static CUptiResult ActivityFlushAll(uint32_t flag) {
    if (flag == CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) {
      ++forced_flushes;
      for (auto k : running) delivered.push_back((k.start = k.end = 0, k));
      running.clear();
    } else if (!running.empty()) {
      if (--unforced_flushes_left > 0) return CUPTI_SUCCESS;
      delivered.insert(delivered.end(), running.begin(), running.end());
      running.clear();
    }
    if (delivered.empty()) return CUPTI_SUCCESS;
    uint8_t* buffer = nullptr;
    size_t size = 0, max_records = 0;
    requested(&buffer, &size, &max_records);
    const size_t bytes = delivered.size() * sizeof(CUpti_ActivityKernel10);
    std::memcpy(buffer, delivered.data(), bytes);
    delivered.clear();
    completed(nullptr, 0, buffer, size, bytes);
    return CUPTI_SUCCESS;
  }
  static CUptiResult ActivityGetNextRecord(uint8_t* buffer, size_t valid, CUpti_Activity** record) {
    uint8_t* next = *record ? reinterpret_cast<uint8_t*>(*record) + sizeof(CUpti_ActivityKernel10) : buffer;
    if (next + sizeof(CUpti_ActivityKernel10) > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *record = reinterpret_cast<CUpti_Activity*>(next);
    return CUPTI_SUCCESS;
  }
};

Cupti& fake_cupti() {
  static Cupti::Api api = [] {
    Cupti::Api a{};
    a.GetResultString = FakeCupti::GetResultString;
    a.Subscribe = FakeCupti::Subscribe;
    a.Unsubscribe = FakeCupti::Unsubscribe;
    a.EnableCallback = FakeCupti::EnableCallback;
    a.ActivityRegisterCallbacks = FakeCupti::ActivityRegisterCallbacks;
    a.ActivityEnable = FakeCupti::ActivityEnable;
    a.ActivityDisable = FakeCupti::ActivityDisable;
    a.ActivityFlushAll = FakeCupti::ActivityFlushAll;
    a.ActivityGetNextRecord = FakeCupti::ActivityGetNextRecord;
    return a;
  }();
  static Cupti* cupti = Cupti::with_api(&api);
  return *cupti;
}

// A kernel (or a graph) launch on the calling thread, as the driver callback sees it.
void launch(uint32_t correlation, CUpti_CallbackId cbid = CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel) {
  CUpti_CallbackData cb{};
  cb.callbackSite = CUPTI_API_ENTER;
  cb.correlationId = correlation;
  on_driver_api(nullptr, CUPTI_CB_DOMAIN_DRIVER_API, cbid, &cb);
}

CUpti_ActivityKernel10 kernel(uint32_t correlation, uint64_t start, uint64_t end) {
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.correlationId = correlation;
  k.start = start;
  k.end = end;
  return k;
}

}  // namespace

TEST_CASE("timed calls: pending together, each ended with its own kernels; the last ends the session",
          "[gpu][timing]") {
  Cupti& cupti = fake_cupti();
  void* ctx = reinterpret_cast<void*>(uintptr_t{0x10});
  const int subscribes = FakeCupti::subscribes, disables = FakeCupti::disables;

  REQUIRE(cupti.begin_timing(ctx).ok());  // the first call starts the session
  launch(10);
  launch(11);
  const std::vector<uint32_t> first = cupti.stop_timing();
  launch(12);  // after the op's end: not the call's
  CHECK(first == std::vector<uint32_t>{10, 11});

  REQUIRE(cupti.begin_timing(ctx).ok());  // while the first is pending: joins its session
  CHECK(FakeCupti::subscribes == subscribes + 1);
  bool other_thread_began = true;
  std::thread([&] { other_thread_began = cupti.begin_timing(ctx).ok(); }).join();
  CHECK_FALSE(other_thread_began);                                                 // one call open at a time
  CHECK_FALSE(cupti.begin_timing(reinterpret_cast<void*>(uintptr_t{0x20})).ok());  // nor one on another context
  launch(20);
  const std::vector<uint32_t> second = cupti.stop_timing();
  CHECK(second == std::vector<uint32_t>{20});

  FakeCupti::delivered = {kernel(11, 300, 400), kernel(10, 100, 250), kernel(12, 500, 600), kernel(20, 700, 900)};
  const TimingResult a = cupti.end_timing(first, nullptr);
  REQUIRE(a.passed);
  REQUIRE(a.kernels.size() == 2);
  CHECK(a.kernels[0].correlation == 10);  // in start order
  CHECK(a.kernels[1].correlation == 11);
  CHECK(FakeCupti::disables == disables);  // the second call is pending: Activity stays on

  const TimingResult b = cupti.end_timing(second, nullptr);  // its record arrived with the first's flush
  REQUIRE(b.passed);
  REQUIRE(b.kernels.size() == 1);
  CHECK(b.flushes == 0);  // so it flushed nothing (before, one flush per call held the op thread's launches)
  CHECK(b.kernels[0].end_ns - b.kernels[0].start_ns == 200);
  CHECK(FakeCupti::unsubscribes >= 1);     // the last pending call ended the session
  CHECK(FakeCupti::disables == disables);  // the kind left armed for the next one

  REQUIRE(cupti.begin_timing(ctx).ok());  // a new session
  CHECK(FakeCupti::subscribes == subscribes + 2);
  launch(30);
  const std::vector<uint32_t> third = cupti.stop_timing();
  const TimingResult c = cupti.end_timing(third, nullptr);  // no record for 30: failed, and the session ends
  CHECK_FALSE(c.passed);
  // launches without records: another client took the callbacks; its trace keeps the kind, armed for nobody
  Cupti::disarm_timing_activity();
  CHECK(FakeCupti::disables == disables);
}

TEST_CASE("timed calls: the kernel kind stays armed between sessions until disarmed: idle, before a window, a hold",
          "[gpu][timing]") {
  Cupti& cupti = fake_cupti();
  void* ctx = reinterpret_cast<void*>(uintptr_t{0x10});
  Cupti::disarm_timing_activity();  // whatever an earlier case left armed
  const int enables = FakeCupti::enables, disables = FakeCupti::disables, forced = FakeCupti::forced_flushes;
  auto timed_call = [&](uint32_t correlation) {
    REQUIRE(cupti.begin_timing(ctx).ok());
    launch(correlation);
    const std::vector<uint32_t> own = cupti.stop_timing();
    FakeCupti::delivered = {kernel(correlation, 100, 200)};
    REQUIRE(cupti.end_timing(own, nullptr).passed);
  };

  timed_call(40);  // the session starts and ends
  CHECK(FakeCupti::enables == enables + 1);
  CHECK(FakeCupti::disables == disables);  // armed
  timed_call(41);  // a new session reads the armed kind's records: not enabled again (its next launch ~200 us)
  CHECK(FakeCupti::enables == enables + 1);

  Cupti::disarm_timing_activity(std::chrono::hours(1));  // the writer's poll, armed for less than that: kept
  CHECK(FakeCupti::disables == disables);
  Cupti::disarm_timing_activity();  // disabled, and our buffers handed back
  CHECK(FakeCupti::disables == disables + 1);
  CHECK(FakeCupti::forced_flushes == forced + 1);
  Cupti::disarm_timing_activity();  // once
  CHECK(FakeCupti::disables == disables + 1);

  timed_call(42);  // enabled again
  CHECK(FakeCupti::enables == enables + 2);
  REQUIRE(hold_counters(true, 1));  // a profiler starting: the kind disabled before it registers its buffers
  CHECK(FakeCupti::disables == disables + 2);
  hold_counters(false, 0);
}

TEST_CASE("timed calls: a call's end does not flush a later pending call's running kernel without its timestamps",
          "[gpu][timing]") {
  Cupti& cupti = fake_cupti();
  void* ctx = reinterpret_cast<void*>(uintptr_t{0x10});
  REQUIRE(cupti.begin_timing(ctx).ok());
  launch(40);
  const std::vector<uint32_t> first = cupti.stop_timing();
  REQUIRE(cupti.begin_timing(ctx).ok());
  launch(41);  // queued behind the first call's kernel: still running when the writer ends the first
  const std::vector<uint32_t> second = cupti.stop_timing();

  SECTION("it ends soon: the first call's flush waits for it, unforced") {
    FakeCupti::delivered = {kernel(40, 100, 200)};
    FakeCupti::running = {kernel(41, 210, 400)};
    FakeCupti::unforced_flushes_left = 3;
    const int forced = FakeCupti::forced_flushes;
    const TimingResult a = cupti.end_timing(first, nullptr);
    CHECK(a.passed);
    CHECK(FakeCupti::forced_flushes == forced);  // before: forced, and the second call's record came without times
    CHECK(a.flushes == 3);                       // what the record reports of it
    CHECK_FALSE(a.forced_flush);
    CHECK(a.records_wait_seconds >= 2 * 200e-6);  // two waits between the three
    const TimingResult b = cupti.end_timing(second, nullptr);
    REQUIRE(b.passed);
    CHECK(b.kernels.at(0).end_ns - b.kernels.at(0).start_ns == 190);
  }
  SECTION("it runs past the wait: forced, the first passes and the second fails (its key is timed later)") {
    FakeCupti::delivered = {kernel(40, 100, 200)};
    FakeCupti::running = {kernel(41, 210, 400)};
    FakeCupti::unforced_flushes_left = 1 << 30;
    const TimingResult a = cupti.end_timing(first, nullptr);
    CHECK(a.passed);
    CHECK(a.forced_flush);
    CHECK(a.flushes > 1);
    CHECK(a.records_wait_seconds >= 0.05);
    const TimingResult b = cupti.end_timing(second, nullptr);
    CHECK_FALSE(b.passed);
    CHECK(b.reason == "CUPTI gave a kernel record without timestamps");
  }
  FakeCupti::running.clear();
  FakeCupti::delivered.clear();
}

TEST_CASE("timed calls: a call that launched nothing (a view) flushes nothing, so a later pending call keeps its times",
          "[gpu][timing]") {
  Cupti& cupti = fake_cupti();
  void* ctx = reinterpret_cast<void*>(uintptr_t{0x10});
  REQUIRE(cupti.begin_timing(ctx).ok());
  const std::vector<uint32_t> view = cupti.stop_timing();
  REQUIRE(cupti.begin_timing(ctx).ok());
  launch(50);
  const std::vector<uint32_t> second = cupti.stop_timing();
  FakeCupti::running = {kernel(50, 300, 500)};  // queued, still running when the view's call ends
  FakeCupti::unforced_flushes_left = 2;
  const int forced = FakeCupti::forced_flushes;
  const TimingResult v = cupti.end_timing(view, nullptr);
  CHECK(v.passed);
  CHECK(v.kernels.empty());
  CHECK(v.flushes == 0);
  CHECK(FakeCupti::forced_flushes == forced);  // before: a forced flush, and the second call's record lost its times
  const TimingResult b = cupti.end_timing(second, nullptr);
  REQUIRE(b.passed);
  CHECK(b.kernels.at(0).end_ns - b.kernels.at(0).start_ns == 200);
  FakeCupti::running.clear();
  FakeCupti::delivered.clear();
}

TEST_CASE("timed calls: a graph's call flushes even when one of its kernels came already, so none is left out",
          "[gpu][timing]") {
  Cupti& cupti = fake_cupti();
  void* ctx = reinterpret_cast<void*>(uintptr_t{0x10});
  REQUIRE(cupti.begin_timing(ctx).ok());
  launch(60);
  const std::vector<uint32_t> first = cupti.stop_timing();
  REQUIRE(cupti.begin_timing(ctx).ok());
  launch(61, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch);  // two nodes, both under the launch's id
  const std::vector<uint32_t> graph = cupti.stop_timing();
  FakeCupti::delivered = {kernel(60, 100, 200), kernel(61, 300, 400)};  // the graph's first node in the same buffer
  REQUIRE(cupti.end_timing(first, nullptr).passed);
  FakeCupti::delivered = {kernel(61, 500, 700)};  // its second node, in the next buffer
  const TimingResult g = cupti.end_timing(graph, nullptr);
  REQUIRE(g.passed);
  CHECK(g.kernels.size() == 2);  // without its own flush: the first node alone, and the call passed short
  CHECK(g.flushes >= 1);
  FakeCupti::delivered.clear();
}
#endif
