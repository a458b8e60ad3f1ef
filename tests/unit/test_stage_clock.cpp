// The stage clock over fake events: intervals per stage, clean or not by the
// window epoch, capture and failures counted as lost, pending events resolved
// only when done, thread exit, finalize (racing the writer's poll), fork.
#include <catch2/catch.hpp>

#include <atomic>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "gpu/stage_clock.h"

using lingprobe::gpu::StageClock;
using lingprobe::gpu::StageEvents;

namespace {

// Events are numbered; each is recorded at the fake GPU time `now_ms` and is done unless held.
class FakeEvents : public StageEvents {
 public:
  std::mutex mu;
  std::map<uintptr_t, float> at;  // live events -> time recorded
  std::set<void*> capturing_streams, held;
  std::atomic<int> calls{0};
  float now_ms = 0;
  uintptr_t next = 1;
  bool fail_record = false;

  bool capturing(void* stream) override {
    ++calls;
    std::lock_guard<std::mutex> l(mu);
    return capturing_streams.count(stream) > 0;
  }
  void* record(int, void*) override {
    ++calls;
    std::lock_guard<std::mutex> l(mu);
    if (fail_record) return nullptr;
    at[next] = now_ms;
    return reinterpret_cast<void*>(next++);
  }
  State state(int, void* e) override {
    std::lock_guard<std::mutex> l(mu);
    return held.count(e) ? State::Pending : State::Done;
  }
  bool elapsed_ms(int, void* a, void* b, float& ms) override {
    std::lock_guard<std::mutex> l(mu);
    ms = at.at(reinterpret_cast<uintptr_t>(b)) - at.at(reinterpret_cast<uintptr_t>(a));
    return true;
  }
  void destroy(int, void* e) override {
    std::lock_guard<std::mutex> l(mu);
    REQUIRE(at.erase(reinterpret_cast<uintptr_t>(e)) == 1);  // destroyed once, and only events it made
  }
  size_t live() {
    std::lock_guard<std::mutex> l(mu);
    return at.size();
  }
};

void* stream(uintptr_t n) { return reinterpret_cast<void*>(n); }

}  // namespace

TEST_CASE("stage clock: intervals per stage, clean unless a window moved or was open", "[stage_clock]") {
  auto owned = std::make_unique<FakeEvents>();
  FakeEvents& ev = *owned;
  std::atomic<uint64_t> epoch{0};
  StageClock clock(std::move(owned), [&](int) { return epoch.load(); });
  clock.begin(1, 0, stream(7));
  ev.now_ms = 2;
  clock.end();  // dit: 2 ms, clean
  clock.begin(1, 0, stream(7));
  epoch = 1;  // a window opens...
  ev.now_ms = 5;
  epoch = 2;                     // ...and closes
  clock.end();                   // 3 ms, not clean
  clock.begin(2, 0, stream(7));  // the epoch did not move, but a window of another process is open (high half odd)
  epoch = 2 | (uint64_t{1} << 32);
  clock.begin(2, 0, stream(7));  // (an unheard change: the previous interval ends here)
  ev.now_ms = 6;
  clock.end();
  clock.poll();
  auto t = clock.totals();
  CHECK(t[1].intervals == 2);
  CHECK(t[1].gpu_us == Approx(5000));
  CHECK(t[1].clean_intervals == 1);
  CHECK(t[1].clean_gpu_us == Approx(2000));
  CHECK(t[2].intervals == 2);
  CHECK(t[2].clean_intervals == 0);  // started with a window open
  CHECK(clock.lost().empty());
  CHECK(ev.live() == 0);
}

TEST_CASE("stage clock: capture and failed events are lost and counted, nothing leaks", "[stage_clock]") {
  auto owned = std::make_unique<FakeEvents>();
  FakeEvents& ev = *owned;
  StageClock clock(std::move(owned), nullptr);
  ev.capturing_streams.insert(stream(1));
  clock.begin(1, 0, stream(1));  // a capturing stream gets no event
  clock.end();
  clock.begin(1, 0, stream(2));
  ev.capturing_streams.insert(stream(2));  // captured by the time the stage ends
  clock.end();
  ev.fail_record = true;
  clock.begin(1, 0, stream(3));
  clock.poll();
  auto lost = clock.lost();
  CHECK(lost["stream_capturing"] == 2);
  CHECK(lost["event_failed"] == 1);
  CHECK(clock.totals().empty());
  CHECK(ev.live() == 0);
}

TEST_CASE("stage clock: pending events wait for poll; finalize waits a bounded time", "[stage_clock]") {
  auto owned = std::make_unique<FakeEvents>();
  FakeEvents& ev = *owned;
  StageClock clock(std::move(owned), nullptr);
  clock.begin(1, 0, stream(1));
  ev.now_ms = 1;
  clock.end();
  ev.held.insert(reinterpret_cast<void*>(2));  // the end event: the GPU has not reached it
  clock.poll();
  CHECK(clock.totals().empty());
  ev.held.clear();
  clock.poll();
  CHECK(clock.totals()[1].intervals == 1);
  clock.begin(1, 0, stream(1));
  ev.held.insert(reinterpret_cast<void*>(4));  // finalize's own end event never completes
  clock.finalize(20);
  CHECK(clock.lost()["unfinished_at_exit"] == 1);
  CHECK(ev.live() == 0);
  const int calls = ev.calls.load();
  clock.begin(1, 0, stream(1));  // after finalize: nothing
  clock.end();
  clock.poll();
  CHECK(ev.calls.load() == calls);
}

TEST_CASE("stage clock: a thread's exit ends its interval; finalize ends the others'", "[stage_clock]") {
  auto owned = std::make_unique<FakeEvents>();
  FakeEvents& ev = *owned;
  StageClock clock(std::move(owned), nullptr);
  std::thread([&] { clock.begin(3, 0, stream(1)); }).join();  // exits without a stage change
  clock.poll();
  CHECK(clock.totals()[3].intervals == 1);
  std::atomic<bool> go{false}, begun{false};
  std::thread t([&] {
    clock.begin(4, 0, stream(1));
    begun = true;
    while (!go) std::this_thread::yield();
  });
  while (!begun) std::this_thread::yield();
  clock.finalize(100);  // the running thread's interval is closed from here
  go = true;
  t.join();
  CHECK(clock.totals()[4].intervals == 1);
  CHECK(ev.live() == 0);
}

TEST_CASE("stage clock: finalize racing the writer's poll loses no interval", "[stage_clock]") {
  for (int round = 0; round < 20; ++round) {
    auto owned = std::make_unique<FakeEvents>();
    FakeEvents& ev = *owned;
    StageClock clock(std::move(owned), nullptr);
    constexpr int kThreads = 4, kIntervals = 50;
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i)
      threads.emplace_back([&] {
        for (int k = 0; k < kIntervals; ++k) {
          clock.begin(1, 0, stream(1));
          clock.end();
        }
      });
    for (auto& t : threads) t.join();
    std::atomic<bool> stop{false};
    std::thread writer([&] {
      while (!stop) clock.poll();
    });
    clock.finalize(1000);
    stop = true;
    writer.join();
    CHECK(clock.totals()[1].intervals == kThreads * kIntervals);
    CHECK(clock.lost().empty());
    CHECK(ev.live() == 0);
  }
}

TEST_CASE("stage clock: after a fork the clock calls nothing", "[stage_clock]") {
  auto owned = std::make_unique<FakeEvents>();
  FakeEvents& ev = *owned;
  StageClock clock(std::move(owned), nullptr);
  clock.begin(1, 0, stream(1));
  const int calls = ev.calls.load();
  clock.abandon_after_fork();
  clock.end();
  clock.begin(2, 0, stream(1));
  clock.poll();
  CHECK(ev.calls.load() == calls);
}
