// diff's signature comparison: a layer pairs with itself at another input
// size, not with another layer; where two signatures differ, said by path.
#include <catch2/catch.hpp>

#include "audit/signature_compare.h"
#include "audit/signature_text.h"
#include "format/json_parse.h"

using namespace lingprobe;

namespace {

format::JsonValue linear(const char* input_shape, const char* weight_shape, const char* stride = "[5120,1]") {
  const std::string text = std::string(R"({"args":[{"dtype":"torch.bfloat16","shape":)") + input_shape +
                           R"(,"stride":[1,1]},{"dtype":"torch.bfloat16","shape":)" + weight_shape + R"(,"stride":)" +
                           stride + R"(}],"kwargs":{},"op":"aten.linear.default",)" +
                           R"("output":{"dtype":"torch.bfloat16","shape":[1,1]},"stage":"dit"})";
  auto parsed = format::parse_json(text);
  REQUIRE(parsed.status.ok());
  return parsed.value;
}

}  // namespace

TEST_CASE("signature compare: one layer at two input sizes pairs, another layer does not", "[audit][diff]") {
  const auto small = linear("[1,2640,5120]", "[5120,5120]"), large = linear("[1,4680,5120]", "[5120,5120]");
  const auto other = linear("[1,2640,5120]", "[13824,5120]");
  const std::string key = audit::pairing_key(small, "dit", "aten.linear.default");
  CHECK(key == audit::pairing_key(large, "dit", "aten.linear.default"));
  CHECK(key != audit::pairing_key(other, "dit", "aten.linear.default"));   // other weights: another layer
  CHECK(key != audit::pairing_key(small, "vae", "aten.linear.default"));   // another stage
  CHECK(audit::signature_shapes(small) < audit::signature_shapes(large));  // size order
  std::vector<std::string> d;
  audit::differences(small, large, "", d);
  REQUIRE(d.size() == 1);
  CHECK(d[0] == "args[0].shape: [1,2640,5120] -> [1,4680,5120]");
  const auto strided = linear("[1,2640,5120]", "[5120,5120]", "[1,5120]");
  CHECK(audit::without_strides(strided) == audit::without_strides(small));
  CHECK_FALSE(strided == small);
}

TEST_CASE("signature text: one line says each tensor's dtype, so a run against its autocast twin reads apart",
          "[audit][diff]") {
  // A new user's `lingprobe diff` of an fp32 run against a bf16-autocast one listed 110 rows only in A and 110
  // only in B whose lines were identical: the line gave shapes only.
  const auto bf16 = linear("[1,2640,5120]", "[5120,5120]");
  auto parsed = format::parse_json(
      R"({"args":[{"dtype":"torch.float32","shape":[1,2640,5120],"stride":[1,1]},{"dtype":"torch.float32",)"
      R"("shape":[5120,5120],"stride":[5120,1]},true,2,"x"],"kwargs":{},"op":"aten.linear.default","output":null,)"
      R"("stage":"dit"})");
  REQUIRE(parsed.status.ok());
  CHECK(audit::short_signature(bf16) == "aten.linear.default(bf16[1,2640,5120], bf16[5120,5120]) -> bf16[1,1]");
  CHECK(audit::short_signature(parsed.value) ==
        "aten.linear.default(f32[1,2640,5120], f32[5120,5120], true, 2, \"x\")");
  // a tensor whose sizes could not be read (a nested tensor) keeps its null shape, without a dtype glued to it
  auto nested = format::parse_json(
      R"({"args":[{"dtype":"torch.float32","shape":null,"stride":null}],"kwargs":{},"op":"aten.relu.default",)"
      R"("output":null,"stage":"s"})");
  REQUIRE(nested.status.ok());
  CHECK(audit::short_signature(nested.value) == "aten.relu.default(null)");
}

TEST_CASE("signature text: keyword arguments, lists of tensors and the output read apart", "[audit][diff]") {
  // A new user's training run listed `aten.add_.Tensor(f32[16], f32[16])` twice: the two differed in alpha, a
  // keyword argument the line left out. An autocast conv's pre-cast line read as its fp32 twin's: they differ in
  // the output's dtype. A cat's inputs printed as whole JSON objects.
  auto add = format::parse_json(
      R"({"args":[{"dtype":"torch.float32","shape":[16],"stride":[1]},{"dtype":"torch.float32","shape":[16],)"
      R"("stride":[1]}],"kwargs":{"alpha":-0.1},"op":"aten.add_.Tensor","output":{"dtype":"torch.float32",)"
      R"("shape":[16],"stride":[1]},"stage":"s"})");
  REQUIRE(add.status.ok());
  CHECK(audit::short_signature(add.value) == "aten.add_.Tensor(f32[16], f32[16], alpha=-0.1) -> f32[16]");
  auto cat = format::parse_json(
      R"({"args":[[{"dtype":"torch.bfloat16","shape":[2,3],"stride":[3,1]},{"dtype":"torch.bfloat16","shape":[2,5],)"
      R"("stride":[5,1]}],1],"kwargs":{},"op":"aten.cat.default","output":[{"dtype":"torch.bfloat16","shape":[2,8],)"
      R"("stride":[8,1]},null],"stage":"s"})");
  REQUIRE(cat.status.ok());
  CHECK(audit::short_signature(cat.value) == "aten.cat.default([bf16[2,3],bf16[2,5]], 1) -> [bf16[2,8],null]");
}
