// LINGPROBE_SAMPLE_PLAN (issue 26 item 3): an earlier run's audit ranks its
// input keys by their share of its measured time or FLOPs; the plan takes
// them in that order while their snapshot bytes and counter windows fit the
// budgets, and the sampler samples only those keys.
#include <catch2/catch.hpp>

#include "capture/sample_plan.h"
#include "capture/sampler.h"
#include "format/json_parse.h"
#include "format/signature_fields.h"

using namespace lingprobe;
using format::JsonValue;

namespace {

// A float32 linear on [m, k] x [n, k]: its signature's JSON.
std::string linear(int m, int k, int n, const char* stage = "dit") {
  auto t = [](int a, int b) {
    return "{\"dtype\":\"torch.float32\",\"shape\":[" + std::to_string(a) + "," + std::to_string(b) + "],\"stride\":[" +
           std::to_string(b) + ",1]}";
  };
  return "{\"args\":[" + t(m, k) + "," + t(n, k) +
         "],\"kwargs\":{},\"op\":\"aten.linear.default\",\"output\":" + t(m, n) + ",\"stage\":\"" + stage + "\"}";
}

std::string row(const std::string& sig, int calls, const char* flops, const char* time_us = "null") {
  return "{\"signature\":" + sig + ",\"calls\":" + std::to_string(calls) + ",\"flops_per_call\":" + flops +
         ",\"kernel_time_us_per_call\":" + time_us + "}";
}

JsonValue audit_of(const std::vector<std::string>& rows, const std::string& extra = "") {
  std::string text = "{\"rows\":[";
  for (size_t i = 0; i < rows.size(); ++i) text += (i ? "," : "") + rows[i];
  text += "]" + extra + "}";
  auto parsed = format::parse_json(text);
  REQUIRE(parsed.status.ok());
  return parsed.value;
}

JsonValue sig(const std::string& text) { return format::parse_json(text).value; }

}  // namespace

TEST_CASE("plan: a signature's input key and snapshot bytes", "[plan]") {
  const JsonValue s = sig(linear(4, 8, 16));
  CHECK(format::signature_tensor_bytes(s) == (4 * 8 + 16 * 8 + 4 * 16) * 4);
  // the input key ignores the output, as the recorder's hash of a call's inputs does
  JsonValue other_output = sig(linear(4, 8, 16));
  other_output.set("output", JsonValue::null());
  CHECK(format::input_key_sha256(s) == format::input_key_sha256(other_output));
  CHECK(format::input_key_sha256(s) != format::input_key_sha256(sig(linear(4, 8, 16, "vae"))));
  // an expanded (stride 0) view is stored as the span it covers
  const JsonValue expanded =
      sig("{\"args\":[{\"dtype\":\"torch.bfloat16\",\"shape\":[1024,64],\"stride\":[0,1]}],\"kwargs\":{},\"op\":\"aten."
          "relu."
          "default\",\"output\":null,\"stage\":\"unstaged\"}");
  CHECK(format::signature_tensor_bytes(expanded) == 64 * 2);
}

TEST_CASE("plan: keys ranked by FLOPs share, taken while the byte budget lasts", "[plan]") {
  // big: 80% of the FLOPs, 2 MiB of tensors; mid: 15%, 704 KiB; small: 5%, 560 KiB; a view without FLOPs is
  // never planned
  const std::string big = linear(512, 256, 512), mid = linear(64, 256, 512), small = linear(16, 256, 512);
  const JsonValue audit = audit_of({row(small, 10, "4194304"), row(big, 6, "134217728"), row(mid, 3, "50331648"),
                                    row(linear(1, 1, 1, "view"), 1000, "null"), row(linear(2, 2, 2), 9, "0")});
  capture::PlanBudgets b;
  b.snapshots = true;
  b.snapshot_bytes = 3u << 19;  // 1.5 MiB: the big key's snapshot does not fit, the next two do
  capture::SamplePlan plan;
  REQUIRE(build_sample_plan(audit, b, plan).empty());
  CHECK(plan.basis == "flops");
  CHECK(plan.ranked == 3);
  CHECK(plan.unranked == 1);  // the key without a formula, said in the log and the report; a formula's 0 is not
  CHECK(plan.over_budget == 1);
  REQUIRE(plan.keys.size() == 2);
  CHECK(plan.keys[0].input_sha == format::input_key_sha256(sig(mid)));  // the big key passed over, the next taken
  CHECK(plan.keys[1].input_sha == format::input_key_sha256(sig(small)));
  const double total = 6 * 134217728.0 + 3 * 50331648.0 + 10 * 4194304.0;
  CHECK(plan.covered_share == Approx((3 * 50331648.0 + 10 * 4194304.0) / total));
  b.snapshot_bytes = 64u << 20;
  REQUIRE(build_sample_plan(audit, b, plan).empty());
  CHECK(plan.keys.size() == 3);
  CHECK(plan.keys[0].input_sha == format::input_key_sha256(sig(big)));
  CHECK(plan.covered_share == Approx(1.0));
}

TEST_CASE("plan: measured time ranks where every key has it; windows bound the counters", "[plan]") {
  // by FLOPs a > b, by measured time b > a (b is memory-bound)
  const std::string a = linear(256, 256, 256), bkey = linear(8, 4096, 4096);
  const JsonValue audit = audit_of({row(a, 10, "33554432", "5.0"), row(bkey, 10, "16777216", "90.0")},
                                   ",\"counter_windows\":{\"by_rank\":[{\"windows\":4,\"window_seconds_total\":2.0}]}");
  capture::PlanBudgets b;
  b.counters = true;
  b.stall_seconds = 0.75;  // one window of the earlier run's mean (0.5 s)
  capture::SamplePlan plan;
  REQUIRE(build_sample_plan(audit, b, plan).empty());
  CHECK(plan.basis == "measured_time");
  REQUIRE(plan.keys.size() == 1);
  CHECK(plan.keys[0].input_sha == format::input_key_sha256(sig(bkey)));
  CHECK(plan.over_budget == 1);
}

TEST_CASE("plan: where only some keys were measured, FLOPs rank them all", "[plan]") {
  // a was profiled (a short time), b was not: a time share over the measured keys alone would put a first
  const std::string a = linear(16, 256, 256), bkey = linear(1024, 1024, 1024);
  // c has no FLOP formula and was measured: FLOPs rank, so it has no share, and the plan says so
  const std::string c = linear(8, 8, 8, "attention");
  const JsonValue audit =
      audit_of({row(a, 10, "2097152", "3.0"), row(bkey, 10, "2147483648"), row(c, 5, "null", "900")});
  capture::PlanBudgets b;
  b.counters = true;
  b.stall_seconds = 1.5;  // one window of the default 1 s
  capture::SamplePlan plan;
  REQUIRE(build_sample_plan(audit, b, plan).empty());
  CHECK(plan.basis == "flops");
  REQUIRE(plan.keys.size() == 1);
  CHECK(plan.keys[0].input_sha == format::input_key_sha256(sig(bkey)));
  CHECK(plan.ranked == 2);
  CHECK(plan.unranked == 1);
}

TEST_CASE("plan: a file that is not an audit is refused with its reason", "[plan]") {
  capture::SamplePlan plan;
  CHECK(build_sample_plan(format::parse_json("{\"jobs\":[]}").value, {}, plan) ==
        "no `rows` (not a coverage_audit.json)");
}

TEST_CASE("plan: the sampler samples only planned keys and reports the ones never met", "[plan]") {
  capture::Sampler sampler;
  capture::SamplingOptions o;
  o.enabled = true;
  o.coordination = capture::Coordination::None;
  o.plan = std::make_shared<std::set<std::string>>(std::set<std::string>{std::string(64, 'a'), std::string(64, 'b')});
  sampler.configure(o, nullptr, 0, 1);
  CHECK(sampler.key_for(std::string(64, 'a'), "aten::mm", "aten::mm", "unstaged") != nullptr);
  CHECK(sampler.key_for(std::string(64, 'c'), "aten::mm", "aten::mm", "unstaged") == nullptr);
  CHECK(sampler.plan_unmet() == std::vector<std::string>{std::string(64, 'b')});
}
