// The NVML guard's verdict over its samples (pure), and its behaviour on a
// machine without NVML or without the device (CI): `unknown` with a reason,
// never a failure.
#include <catch2/catch.hpp>

#include <unistd.h>

#include "format/canonical_json.h"
#include "gpu/nvml_guard.h"

using namespace lingprobe::gpu;

namespace {
GuardSample s(std::vector<uint32_t> pids, bool ok = true) {
  GuardSample g;
  g.ok = ok;
  for (uint32_t p : pids) g.processes.push_back({p, 1u << 20});
  return g;
}
}  // namespace

TEST_CASE("nvml guard: alone when only our pid computes on the device", "[nvml]") {
  GuardVerdict v = judge({s({4242}), s({4242}), s({4242})}, {77, 4242});
  CHECK(v.verdict == "alone");
  CHECK(v.matched_by == "pid");
  CHECK(v.others.empty());
}

TEST_CASE("nvml guard: shared names the other pids, before, during or after", "[nvml]") {
  GuardVerdict v = judge({s({4242}), s({4242, 9001}), s({4242})}, {4242});
  CHECK(v.verdict == "shared");
  CHECK(v.others == std::vector<uint32_t>{9001});
}

TEST_CASE("nvml guard: a sole process that is not our pid is us (pid namespace)", "[nvml]") {
  GuardVerdict v = judge({s({123456}), s({123456})}, {12});
  CHECK(v.verdict == "alone");
  CHECK(v.matched_by == "sole_process");
}

TEST_CASE("nvml guard: several unmatched processes are shared, every pid listed", "[nvml]") {
  GuardVerdict v = judge({s({1000, 1001}), s({1000, 1001, 1002})}, {12});
  CHECK(v.verdict == "shared");
  CHECK(v.matched_by == "none");
  CHECK(v.others.size() == 3);
  CHECK(!v.reason.empty());
}

TEST_CASE("nvml guard: no list or an empty list is unknown, with the reason", "[nvml]") {
  CHECK(judge({s({}, false), s({}, false)}, {12}).verdict == "unknown");
  GuardVerdict v = judge({s({}), s({})}, {12});
  CHECK(v.verdict == "unknown");
  CHECK(v.reason.find("no compute process") != std::string::npos);
}

TEST_CASE("nvml guard: our pids include getpid()", "[nvml]") {
  const auto pids = own_pids();
  REQUIRE(!pids.empty());
  CHECK(pids.back() == static_cast<uint32_t>(getpid()));  // NSpid's last entry is the innermost namespace's
}

TEST_CASE("nvml guard: a device NVML does not know gives unknown, not a failure", "[nvml]") {
  NvmlGuard guard("GPU-00000000-0000-0000-0000-000000000000", 1);
  const auto j = guard.finish();
  REQUIRE(j.find("verdict"));
  CHECK(j.find("verdict")->as_string() == "unknown");
  CHECK(j.find("reason")->kind() == lingprobe::format::JsonValue::Kind::String);
  CHECK(lingprobe::format::canonical_json(guard.finish()) == lingprobe::format::canonical_json(j));  // idempotent
}
