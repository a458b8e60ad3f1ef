// The evidence budgets: snapshot bytes per process and per launch, copies in
// flight, counter-window seconds, and the set-up calls' eighth of each.
#include <catch2/catch.hpp>

#include <cstring>

#include "capture/evidence_budgets.h"

using lingprobe::capture::EvidenceBudgets;
using lingprobe::capture::RunBudget;

namespace {

struct FakeRun : RunBudget {
  uint64_t left;
  explicit FakeRun(uint64_t bytes) : left(bytes) {}
  bool reserve(uint64_t bytes) override {
    if (bytes > left) return false;
    left -= bytes;
    return true;
  }
  void give_back(uint64_t bytes) override { left += bytes; }
};

bool is(const char* reason, const char* expected) { return reason && std::strcmp(reason, expected) == 0; }

}  // namespace

TEST_CASE("snapshot bytes: the process budget, and what is given back can be taken again", "[budgets]") {
  EvidenceBudgets b(800, 1000, 300, nullptr);
  CHECK(b.reserve(500, 0, false) == nullptr);
  CHECK(is(b.reserve(400, 0, false), "budget_process"));
  b.give_back(500, false);
  CHECK(b.reserve(800, 0, false) == nullptr);
}

TEST_CASE("set-up calls may take an eighth of the bytes; the rest stays for the compute", "[budgets]") {
  EvidenceBudgets b(800, 1000, 300, nullptr);
  CHECK(b.reserve(100, 0, true) == nullptr);
  CHECK(is(b.reserve(1, 0, true), "setup_share"));
  CHECK(b.reserve(700, 0, false) == nullptr);  // a refused set-up call took nothing
}

TEST_CASE("device bytes are checked against the copies in flight", "[budgets]") {
  EvidenceBudgets b(1 << 20, 1000, 300, nullptr);
  b.device_in_flight() += 900;
  CHECK(is(b.reserve(200, 200, false), "budget_device"));
  CHECK(b.reserve(200, 0, false) == nullptr);  // host tensors do not wait on the device
  b.device_in_flight() -= 900;
  CHECK(b.reserve(200, 200, false) == nullptr);
}

TEST_CASE("the launch-wide budget refuses after the process's own, and undoes the process's share", "[budgets]") {
  FakeRun run(300);
  EvidenceBudgets b(1000, 1000, 300, &run);
  CHECK(b.reserve(300, 0, false) == nullptr);
  CHECK(is(b.reserve(100, 0, false), "budget_run"));
  b.give_back(300, false);
  CHECK(run.left == 300);
  CHECK(is(b.reserve(700, 0, false), "budget_run"));  // 700 > the run's 300
  CHECK(b.reserve(300, 0, false) == nullptr);         // the process budget was not charged by the refusal
}

TEST_CASE("counter-window seconds: spent by all calls, and set-up calls stop at their eighth", "[budgets]") {
  EvidenceBudgets b(1000, 1000, 8.0, nullptr);
  CHECK(b.window_refusal(false) == nullptr);
  b.charge_window(1.0, true);
  CHECK(is(b.window_refusal(true), "setup_share"));
  CHECK(b.window_refusal(false) == nullptr);
  b.charge_window(7.0, false);
  CHECK(is(b.window_refusal(false), "budget_profile"));
  b.charge_window(-1.0, false);  // a clock step back charges nothing
  CHECK(is(b.window_refusal(false), "budget_profile"));
}
