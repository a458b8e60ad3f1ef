// The stage's rows rolled up per operator (audit/operator_table): what a user
// asks first ("which operators dominate"), from signatures built by hand.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "audit/operator_table.h"
#include "format/signature_fields.h"

using namespace lingprobe;
using namespace lingprobe::audit;

namespace {

Signature row(const std::string& op, uint64_t calls, int64_t host_ns, std::optional<int64_t> flops,
              std::optional<double> kernel_us = std::nullopt) {
  Signature s;
  s.op = op;
  s.calls = calls;
  s.timed_calls = host_ns ? calls : 0;
  s.flop_calls = calls;
  s.host_ns = host_ns;
  s.flops = flops;
  s.kernel_time_us = kernel_us;
  return s;
}

}  // namespace

TEST_CASE("an operator's overloads and signatures are one row, the largest host time first", "[operator_table]") {
  const std::vector<Signature> rows = {row("aten.conv2d.default", 4, 3'000'000, 1000, 10.0),
                                       row("aten.conv2d.padding", 2, 1'000'000, 500),
                                       row("aten.uniform_.default", 10, 5'000'000, std::nullopt),
                                       row("aten.add.Tensor", 6, 1'000'000, 100), row("aten.add_.Tensor", 1, 0, 100)};
  std::vector<const Signature*> group;
  for (const auto& r : rows) group.push_back(&r);
  const format::JsonValue ops = operators_json(group);
  REQUIRE(ops.items().size() == 4);  // add and add_ are two operators: the in-place one writes its input
  const auto& first = ops.items()[0];
  CHECK(first.find("operator")->as_string() == "aten.uniform_");
  CHECK(first.find("flops")->is_null());
  CHECK(first.find("flop_share")->is_null());
  CHECK(first.find("signatures_without_flop_formula")->as_int() == 1);
  CHECK(first.find("host_time_share")->as_float() == Approx(0.5));
  const auto& conv = ops.items()[1];
  CHECK(conv.find("operator")->as_string() == "aten.conv2d");
  CHECK(conv.find("signatures")->as_int() == 2);
  CHECK(conv.find("calls")->as_int() == 6);
  CHECK(conv.find("host_time_us")->as_float() == Approx(4000.0));
  CHECK(conv.find("flops")->as_int() == 5000);  // 4 x 1000 + 2 x 500, an integer
  CHECK(conv.find("flop_share")->as_float() == Approx(5000.0 / 5700.0));
  CHECK(conv.find("kernel_time_us")->as_float() == Approx(40.0));  // the measured signature only, 4 calls
  CHECK(conv.find("signatures_with_kernel_time")->as_int() == 1);
  CHECK(ops.items()[2].find("operator")->as_string() == "aten.add");
  CHECK(ops.items()[3].find("operator")->as_string() == "aten.add_");

  const std::string md = operators_markdown(ops, 2);
  CHECK(md.find("| `aten.uniform_` | 5.0 | 50.0% | 10 | 1 | unknown | - | - |") != std::string::npos);
  CHECK(md.find("| `aten.conv2d` | 4.0 | 40.0% | 6 | 2 | 5.00K | 87.7% | 0.040 (1 of 2) |") != std::string::npos);
  CHECK(md.find("2 more operator(s): 10.0% of the host time") != std::string::npos);
  // initialisation's share said apart: uniform_ is random by definition, conv2d is not
  CHECK(first.find("random_or_uninitialised")->as_bool());
  CHECK_FALSE(conv.find("random_or_uninitialised")->as_bool());
  CHECK(md.find("50.0% of the stage's host time is in ops whose results are random or uninitialised by definition "
                "(`aten.uniform_`): model construction") != std::string::npos);
  CHECK(md.find("aten.add`") == std::string::npos);
}

TEST_CASE("with LINGPROBE_NESTED=1 an operator that ran only nested has no FLOPs or host time of its own",
          "[operator_table]") {
  // linear at top level; addmm below it (a row, but its FLOPs and time are the linear's)
  Signature linear = row("aten.linear.default", 2, 2'000'000, 100);
  Signature addmm = row("aten.addmm.default", 2, 0, 100);
  addmm.flop_calls = 0;
  const format::JsonValue ops = operators_json({&linear, &addmm});
  const auto& nested = ops.items()[1];
  REQUIRE(nested.find("operator")->as_string() == "aten.addmm");
  CHECK(nested.find("flops")->is_null());
  CHECK(nested.find("host_time_us")->is_null());
  CHECK(nested.find("timed_calls")->as_int() == 0);
  CHECK(ops.items()[0].find("flop_share")->as_float() == Approx(1.0));
  CHECK(operators_markdown(ops, 10).find("| `aten.addmm` | - | - | 2 | 1 | nested | - | - |") != std::string::npos);
}

TEST_CASE("without call records the operators rank by FLOPs and their host time is unknown", "[operator_table]") {
  const std::vector<Signature> rows = {row("aten.mm.default", 2, 0, 10), row("aten.linear.default", 1, 0, 100),
                                       row("aten.relu.default", 3, 0, std::nullopt)};
  std::vector<const Signature*> group;
  for (const auto& r : rows) group.push_back(&r);
  const format::JsonValue ops = operators_json(group);
  CHECK(ops.items()[0].find("operator")->as_string() == "aten.linear");
  CHECK(ops.items()[0].find("host_time_us")->is_null());
  CHECK(ops.items()[0].find("host_time_share")->is_null());
  CHECK(ops.items()[1].find("operator")->as_string() == "aten.mm");
  CHECK(ops.items()[2].find("operator")->as_string() == "aten.relu");
  CHECK(operator_of("aten.linear.default") == "aten.linear");
  CHECK(operator_of("torchvision.nms.default") == "torchvision.nms");
  CHECK(operator_of("linear") == "linear");
}

TEST_CASE("calls that raised are counted per operator and told apart under the table", "[operator_table]") {
  Signature raised = row("aten.add.Tensor", 3, 9000, 0);
  raised.value = format::JsonValue::object({{"output", format::raised_output()}});
  const Signature ran = row("aten.add.Tensor", 1, 1000, 3);
  const auto ops = operators_json({&raised, &ran});
  const auto& add = ops.items().at(0);
  CHECK(add.find("calls")->as_int() == 4);
  CHECK(add.find("raised_calls")->as_int() == 3);
  CHECK(add.find("raised_host_time_share")->as_float() == Approx(0.9));
  const std::string md = operators_markdown(ops, 10);
  CHECK(md.find("3 call(s) raised (`aten.add` 3): their rows read `-> raised`") != std::string::npos);
  CHECK(md.find("90.0% of the stage's host time is the exception's") != std::string::npos);

  const auto clean = operators_json({&ran});
  CHECK(clean.items().at(0).find("raised_calls")->as_int() == 0);
  CHECK(clean.items().at(0).find("raised_host_time_share")->is_null());
  CHECK(operators_markdown(clean, 10).find("raised") == std::string::npos);
}
