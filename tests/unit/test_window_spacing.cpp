// capture/window_spacing: which calls are not timed because they come right
// after their thread's counter window (the gate's weight cast read 7-12%
// short there in every run: docs/COUNTERS.md).
#include <catch2/catch.hpp>

#include <thread>

#include "capture/sampler.h"
#include "capture/window_spacing.h"

using namespace lingprobe::capture;

TEST_CASE("window spacing: only the thread's next call after its counter window is held back", "[capture]") {
  WindowSpacing spacing;
  CHECK_FALSE(spacing.follows_counter_window(8));  // no window yet
  spacing.counter_window_opened(7);
  CHECK(spacing.follows_counter_window(8));
  CHECK_FALSE(spacing.follows_counter_window(7));  // the window's own call
  CHECK_FALSE(spacing.follows_counter_window(9));  // a call ran between: the GPU is back in the run's state
  CHECK_FALSE(spacing.follows_counter_window(0));  // unknown
  spacing.counter_window_opened(20);
  CHECK(spacing.follows_counter_window(21));
  CHECK_FALSE(spacing.follows_counter_window(8));  // the last window counts
}

TEST_CASE("window spacing: each thread and each capture sees its own windows", "[capture]") {
  WindowSpacing spacing, other;
  spacing.counter_window_opened(3);
  CHECK_FALSE(other.follows_counter_window(4));
  bool seen_elsewhere = true;
  std::thread([&] { seen_elsewhere = spacing.follows_counter_window(4); }).join();
  CHECK_FALSE(seen_elsewhere);
  CHECK(spacing.follows_counter_window(4));
}

TEST_CASE("window spacing: the refusal is named and reported once per key, with no backoff early", "[capture]") {
  CHECK(std::string(call_refusal_name(CallRefusal::AfterCounterWindow)) == "after_counter_window");
  Sampler sampler;
  SamplingOptions o;
  o.enabled = true;
  o.coordination = Coordination::None;
  o.evidence = kCounters;
  sampler.configure(o, nullptr, 0, 1);
  std::vector<std::string> reported;
  sampler.set_refusal_sink([&](const SampleKey&, const char* evidence, const std::string& reason, uint64_t) {
    reported.push_back(std::string(evidence) + ":" + reason);
  });
  SampleKey* k = sampler.key_for(std::string(64, 'a'), "aten::mm", "aten::mm", "unstaged");
  REQUIRE(sampler.due(k));
  sampler.refused_early(k, CallRefusal::AfterCounterWindow);
  REQUIRE(sampler.due(k));  // the next call is looked at
  sampler.refused_early(k, CallRefusal::AfterCounterWindow);
  CHECK(reported == std::vector<std::string>{"counters:after_counter_window"});
  CHECK(sampler.due(k));
}
