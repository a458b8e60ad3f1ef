// IValue -> signature tests over calls the real dispatcher boxed: a
// thread-local RecordFunction callback captures the top-level call's schema,
// inputs and outputs exactly as the recorder's global callback will see them.
#include "capture/torch_guard.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>

#include "capture/signature_builder.h"
#include "format/canonical_json.h"
#include "format/json_parse.h"
#include "format/sha256.h"
#include "test_support.h"

using lingprobe::capture::build_signature;
using lingprobe::format::canonical_json;
using lingprobe::format::JsonValue;

namespace {

struct Captured {
  c10::optional<c10::FunctionSchema> schema;
  std::vector<c10::IValue> inputs;
  std::vector<c10::IValue> outputs;
  int depth = 0;
  bool done = false;
};
thread_local Captured* g_captured = nullptr;

c10::ArrayRef<const c10::IValue> as_ref(const std::vector<c10::IValue>& v) {
  return c10::ArrayRef<const c10::IValue>(static_cast<const c10::IValue*>(v.data()), v.size());
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Captured* c = g_captured;
  if (c && c->depth++ == 0 && !c->done) {
    c->schema = fn.operator_schema();
    auto in = fn.inputs();
    c->inputs.assign(in.begin(), in.end());
  }
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  Captured* c = g_captured;
  if (c && --c->depth == 0 && !c->done) {
    c->outputs = fn.outputs();
    c->done = true;
  }
}

// Runs `call` and returns the canonical signature of its top-level op.
std::string signature_of(const std::function<void()>& call, const std::string& stage = "unstaged") {
  Captured captured;
  g_captured = &captured;
  auto handle = at::addThreadLocalCallback(at::RecordFunctionCallback(on_start, on_end)
                                               .needsInputs(true)
                                               .needsOutputs(true)
                                               .scopes({at::RecordScope::FUNCTION}));
  call();
  at::removeCallback(handle);
  g_captured = nullptr;
  REQUIRE(captured.done);
  REQUIRE(captured.schema.has_value());
  return canonical_json(build_signature(*captured.schema, as_ref(captured.inputs), as_ref(captured.outputs), stage));
}

// The canonical text of a seed row's signature, re-staged.
std::string seed_signature(const std::string& sha) {
  auto seed =
      lingprobe::format::parse_json(lingprobe::test::read_file(lingprobe::test::seed_path("coverage_audit.seed.json")));
  REQUIRE(seed.status.ok());
  for (const auto& row : seed.value.find("rows")->items())
    if (row.find("signature_sha256")->as_string() == sha) return canonical_json(*row.find("signature"));
  FAIL("seed row " << sha << " not found");
  return {};
}

at::TensorOptions meta(at::ScalarType t) { return at::TensorOptions().device(at::kMeta).dtype(t); }

}  // namespace

TEST_CASE("at::linear on meta tensors reproduces the seed's strided DiT signature", "[capture][seed]") {
  // Seed row 697ad043…: [1,2640,5120] view of a [1,10560,5120] tensor (chunk).
  auto base = at::empty({1, 10560, 5120}, meta(at::kBFloat16));
  auto x = base.chunk(4, 1)[1];
  auto w = at::empty({5120, 5120}, meta(at::kBFloat16));
  auto b = at::empty({5120}, meta(at::kBFloat16));
  const std::string sig = signature_of([&] { at::linear(x, w, b); }, "dit");
  CHECK(sig == seed_signature("697ad043e70ad8413b17addb52caa1db79ce79f8cedf8b49b4ed075d8e8a9f37"));
  CHECK(lingprobe::format::sha256_hex(sig) == "697ad043e70ad8413b17addb52caa1db79ce79f8cedf8b49b4ed075d8e8a9f37");
}

TEST_CASE("at::conv3d drops stride/padding/dilation/groups defaults like the seed", "[capture][seed]") {
  // Seed row b611cd0d…: the VAE's 1x1x1 conv2 on the whole latent. Real CPU
  // tensors (C++ has no meta kernel for convolution in torch 1.13).
  auto x = at::zeros({1, 16, 3, 88, 160}, at::kFloat);
  auto w = at::zeros({16, 16, 1, 1, 1}, at::kFloat);
  auto b = at::zeros({16}, at::kFloat);
  const std::string sig = signature_of([&] { at::conv3d(x, w, b, {1, 1, 1}, {0, 0, 0}, {1, 1, 1}, 1); }, "vae");
  CHECK(sig == seed_signature("b611cd0d7be4ea169fdc4990587d638a3a4d3346571857d9742cc12b6e402b9e"));
}

TEST_CASE("a non-default later arg keeps the defaulted args before it", "[capture][trim]") {
  auto x = at::empty({1, 4, 3, 8, 8}, at::kFloat);
  auto w = at::empty({4, 4, 1, 1, 1}, at::kFloat);
  // stride and bias at their defaults but followed by padding=1: they stay;
  // dilation and groups at their defaults form the dropped tail. (Spelled out
  // in full: C++'s own default for dilation is [1], not the schema's [1,1,1].)
  const std::string sig = signature_of([&] { at::conv3d(x, w, {}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, 1); });
  auto parsed = lingprobe::format::parse_json(sig);
  REQUIRE(parsed.status.ok());
  const auto& args = parsed.value.find("args")->items();
  REQUIRE(args.size() == 5);
  CHECK(args[2].is_null());  // undefined optional bias
  CHECK(canonical_json(args[3]) == "[1,1,1]");
  CHECK(canonical_json(args[4]) == "[1,1,1]");
}

TEST_CASE("Tensor::to(kByte) is aten.to.dtype with the dtype as a string", "[capture][seed]") {
  auto x = at::empty({1, 3, 9, 704, 1280}, meta(at::kFloat));
  const std::string sig = signature_of([&] { x.to(at::kByte); }, "output");
  // Seed row 59ef4c5b…: non_blocking/copy dropped, memory_format (kwarg-only) omitted.
  CHECK(sig == seed_signature("59ef4c5b540ee17f324e99f46c07bf2544db0e771c768ae3ce80ed65fde6f8a9"));
}

TEST_CASE("keyword-only args go to kwargs under their schema names", "[capture][kwargs]") {
  auto x = at::ones({2, 3}, at::kFloat);
  const std::string sig = signature_of([&] { at::sum(x, {1}, /*keepdim=*/false, at::kDouble); });
  CHECK(sig == R"({"args":[{"dtype":"torch.float32","shape":[2,3],"stride":[3,1]},[1]],)"
               R"("kwargs":{"dtype":"torch.float64"},"op":"aten.sum.dim_IntList",)"
               R"("output":{"dtype":"torch.float64","shape":[2],"stride":[1]},"stage":"unstaged"})");
  // dtype left at its default (None) is omitted; keepdim=true is positional.
  const std::string sig2 = signature_of([&] { at::sum(x, {0}, /*keepdim=*/true); });
  CHECK(sig2.find(R"("kwargs":{})") != std::string::npos);
  CHECK(sig2.find(R"([0],true])") != std::string::npos);
}

TEST_CASE("scalars: float repr, bool, int, None, Layout, MemoryFormat, Device type", "[capture][scalars]") {
  auto x = at::ones({4}, at::kFloat);
  // add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1): alpha=0.1 is a kwarg float.
  CHECK(signature_of([&] { at::add(x, x, 0.1); }).find(R"("kwargs":{"alpha":0.1})") != std::string::npos);
  // alpha=1 (an int equal to the default) is dropped; alpha=1.0 (a float) is not: IValue equality is tag-strict.
  CHECK(signature_of([&] { at::add(x, x, 1); }).find(R"("kwargs":{})") != std::string::npos);
  CHECK(signature_of([&] { at::add(x, x, 1.0); }).find(R"("kwargs":{"alpha":1.0})") != std::string::npos);
  // leaky_relu(Tensor self, Scalar negative_slope=0.01): 1e-06 written as Python writes it.
  CHECK(signature_of([&] { at::leaky_relu(x, 1e-06); }).find(R"(,1e-06],)") != std::string::npos);
  // masked_fill with -inf: Python json's bare -Infinity.
  auto mask = at::zeros({4}, at::kBool);
  CHECK(signature_of([&] {
          at::masked_fill(x, mask, -std::numeric_limits<double>::infinity());
        }).find(R"(,-Infinity],)") != std::string::npos);
  // empty.memory_format: size positional; dtype, layout, device, pin_memory, memory_format kwarg-only.
  const std::string e = signature_of([&] {
    at::empty({2, 3}, at::TensorOptions().dtype(at::kHalf).layout(at::kStrided).device(at::kCPU),
              at::MemoryFormat::Contiguous);
  });
  CHECK(e.find(R"("dtype":"torch.float16")") != std::string::npos);
  CHECK(e.find(R"("layout":"torch.strided")") != std::string::npos);
  CHECK(e.find(R"("device":"cpu")") != std::string::npos);
  CHECK(e.find(R"("memory_format":"torch.contiguous_format")") != std::string::npos);
  // cumsum(Tensor self, int dim, *, ScalarType? dtype=None): int positional.
  CHECK(signature_of([&] { at::cumsum(x, 0); }).find(R"([{"dtype":"torch.float32","shape":[4],"stride":[1]},0])") !=
        std::string::npos);
}

TEST_CASE("tuple outputs are lists; list inputs nest", "[capture][outputs]") {
  auto x = at::ones({2, 6}, at::kFloat);
  const std::string mx = signature_of([&] { at::max(x, 1); });  // max.dim -> (values, indices)
  CHECK(
      mx.find(
          R"("output":[{"dtype":"torch.float32","shape":[2],"stride":[1]},{"dtype":"torch.int64","shape":[2],"stride":[1]}])") !=
      std::string::npos);
  const std::string cat = signature_of([&] { at::cat({x, x}, 0); });
  CHECK(
      cat.find(
          R"("args":[[{"dtype":"torch.float32","shape":[2,6],"stride":[6,1]},{"dtype":"torch.float32","shape":[2,6],"stride":[6,1]}]])") !=
      std::string::npos);
  const std::string chunk = signature_of([&] { at::chunk(x, 3, 1); });
  CHECK(chunk.find(R"("output":[{"dtype":"torch.float32","shape":[2,2],"stride":[6,1]},)") != std::string::npos);
}

TEST_CASE("a call that raised has the output {\"raised\":true}; an op without returns keeps null",
          "[capture][outputs]") {
  auto a = at::ones({3}, at::kFloat);
  auto b = at::ones({4}, at::kFloat);
  const std::string raised = signature_of([&] {
    try {
      at::add(a, b);
    } catch (const c10::Error&) {
    }
  });
  CHECK(raised.find(R"("op":"aten.add.Tensor")") != std::string::npos);
  CHECK(raised.find(R"("output":{"raised":true})") != std::string::npos);
  std::vector<at::Tensor> list{a};
  const std::string no_returns = signature_of([&] { at::_foreach_add_(list, 1.0); });
  CHECK(no_returns.find(R"("op":"aten._foreach_add_.Scalar")") != std::string::npos);
  CHECK(no_returns.find(R"("output":null)") != std::string::npos);
}

TEST_CASE("dtype names follow Python's spelling", "[capture][dtype]") {
  using lingprobe::capture::python_dtype_name;
  CHECK(python_dtype_name(at::kByte) == "torch.uint8");
  CHECK(python_dtype_name(at::kChar) == "torch.int8");
  CHECK(python_dtype_name(at::kLong) == "torch.int64");
  CHECK(python_dtype_name(at::kBFloat16) == "torch.bfloat16");
  CHECK(python_dtype_name(at::kHalf) == "torch.float16");
  CHECK(python_dtype_name(at::kComplexFloat) == "torch.complex64");
  CHECK(python_dtype_name(at::kBool) == "torch.bool");
}

TEST_CASE("op names are namespace.name.overload with default for an empty overload", "[capture][op]") {
  using lingprobe::capture::dotted_op_name;
  CHECK(dotted_op_name(c10::OperatorName("aten::linear", "")) == "aten.linear.default");
  CHECK(dotted_op_name(c10::OperatorName("aten::to", "dtype")) == "aten.to.dtype");
  CHECK(dotted_op_name(c10::OperatorName("myns::op", "out")) == "myns.op.out");
}

TEST_CASE("inputs that do not match the schema are written untrimmed, never a crash", "[capture][fallback]") {
  auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("aten::linear", "");
  std::vector<c10::IValue> inputs{c10::IValue(at::ones({2, 2})), c10::IValue(int64_t(3))};
  std::vector<c10::IValue> outputs{c10::IValue(at::Generator())};
  const std::string sig = canonical_json(build_signature(handle.schema(), as_ref(inputs), as_ref(outputs), "s"));
  CHECK(sig.find(R"("args":[{"dtype":"torch.float32","shape":[2,2],"stride":[2,1]},3])") != std::string::npos);
  CHECK(sig.find(R"("output":"<Generator>")") != std::string::npos);
}
