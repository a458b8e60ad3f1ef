// The peak table of the capability report (docs/COUNTERS.md): datasheet
// figures per GPU and math mode; unknown GPUs and modes have none.
#include <catch2/catch.hpp>

#include "audit/capability_report.h"
#include "audit/profile_evidence.h"
#include "format/json_parse.h"

using lingprobe::audit::device_peak;
using lingprobe::audit::Peak;

TEST_CASE("peaks: H200 and H100 by math mode", "[report]") {
  Peak p;
  REQUIRE(device_peak("NVIDIA H200", "bf16", p));
  CHECK(p.flops == Approx(989.4e12));
  CHECK(p.dram_bytes == Approx(4.8e12));
  REQUIRE(device_peak("NVIDIA H200", "tf32", p));
  CHECK(p.flops == Approx(494.7e12));
  REQUIRE(device_peak("NVIDIA H200", "fp32", p));
  CHECK(p.flops == Approx(67e12));
  REQUIRE(device_peak("NVIDIA H200", "fp8", p));
  CHECK(p.flops == Approx(1978.8e12));
  REQUIRE(device_peak("NVIDIA H200", "int8", p));
  CHECK(p.flops == Approx(1978.8e12));
  REQUIRE(device_peak("NVIDIA H100 80GB HBM3", "fp16", p));
  CHECK(p.flops == Approx(989.4e12));
  CHECK(p.dram_bytes == Approx(3.35e12));
  REQUIRE(device_peak("NVIDIA H100 PCIe", "bf16", p));
  CHECK(p.flops == Approx(756.5e12));
  CHECK(p.dram_bytes == Approx(2.0e12));
  CHECK(std::string(p.source).find("PCIe") != std::string::npos);
}

TEST_CASE("peaks: none for an unknown GPU or mode", "[report]") {
  Peak p;
  CHECK_FALSE(device_peak("NVIDIA A100-SXM4-80GB", "bf16", p));
  CHECK_FALSE(device_peak("NVIDIA H200", "fp4", p));
  CHECK_FALSE(device_peak("NVIDIA H200", "", p));             // integer ops: no roof
  CHECK_FALSE(device_peak("NVIDIA GH200 480GB", "bf16", p));  // other figures than the H200 SXM
  CHECK_FALSE(device_peak("NVIDIA H100 NVL", "bf16", p));
  CHECK_FALSE(device_peak("NVIDIA H200 NVL", "bf16", p));
  CHECK_FALSE(device_peak("", "bf16", p));
}

namespace {
lingprobe::format::JsonValue signature(const char* text) {
  auto parsed = lingprobe::format::parse_json(text);
  REQUIRE(parsed.status.ok());
  return parsed.value;
}
}  // namespace

TEST_CASE("math mode: what ran, not the pre-cast inputs of an autocast region", "[report]") {
  using lingprobe::audit::math_mode;
  // A linear inside a bf16 autocast region: fp32 activations, bf16 weights, a bf16 output (the DiT's 1003% case).
  const auto autocast_linear = signature(R"({"op":"aten.linear.default","args":[
      {"dtype":"torch.float32","shape":[1,8,16],"stride":[128,16,1]},{"dtype":"torch.bfloat16","shape":[4,16],"stride":[16,1]},null],
      "kwargs":{},"output":{"dtype":"torch.bfloat16","shape":[1,8,4],"stride":[32,4,1]},"stage":"dit"})");
  CHECK(math_mode(autocast_linear, nullptr) == "bf16");
  // An fp8 GEMM computes in fp8 and writes bf16: the narrower dtype.
  const auto fp8 = signature(R"({"op":"aten._scaled_mm.default","args":[
      {"dtype":"torch.float8_e4m3fn","shape":[16,32],"stride":[32,1]},{"dtype":"torch.float8_e4m3fn","shape":[32,16],"stride":[1,32]}],
      "kwargs":{},"output":{"dtype":"torch.bfloat16","shape":[16,16],"stride":[16,1]},"stage":"dit"})");
  CHECK(math_mode(fp8, nullptr) == "fp8");
  // fp32 GEMM: TF32 from the call's policy, else torch's default (off).
  const auto fp32 = signature(R"({"op":"aten.mm.default","args":[{"dtype":"torch.float32","shape":[4,4],"stride":[4,1]},
      {"dtype":"torch.float32","shape":[4,4],"stride":[4,1]}],"kwargs":{},
      "output":{"dtype":"torch.float32","shape":[4,4],"stride":[4,1]},"stage":"s"})");
  CHECK(math_mode(fp32, nullptr) == "fp32");
  const auto policy = signature(R"({"matmul_allow_tf32":true})");
  CHECK(math_mode(fp32, &policy) == "tf32");
  // Not a GEMM: the first argument's dtype, whatever the output (a cast).
  const auto cast =
      signature(R"({"op":"aten.to.dtype","args":[{"dtype":"torch.float32","shape":[4],"stride":[1]},"torch.bfloat16",
      false,false,null],"kwargs":{},"output":{"dtype":"torch.bfloat16","shape":[4],"stride":[1]},"stage":"s"})");
  CHECK(math_mode(cast, nullptr) == "fp32");
}

TEST_CASE("casts: the copy kernels of an autocast linear's window are told apart from its GEMM", "[report]") {
  // The kernels a bf16 autocast linear on fp32 activations launched on the H200 (T5, docs/gpu/third-party-h200).
  const auto kernels = signature(R"([
      {"name":"void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}>",
       "metrics":{"gpu__time_duration.sum":{"value":3.5,"unit":"us"}}},
      {"name":"void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)>",
       "metrics":{"gpu__time_duration.sum":{"value":1500,"unit":"ns"}}},
      {"name":"nvjet_sm90_tst_64x48_64x15_2x4_h_bz_TNT","metrics":{"gpu__time_duration.sum":{"value":20.0,"unit":"us"}}}])");
  CHECK(lingprobe::audit::copy_kernels_time_us(kernels) == Approx(5.0));
  CHECK(lingprobe::audit::kernels_time_us(kernels).value() == Approx(25.0));
  CHECK(lingprobe::audit::copy_kernels_time_us(signature(R"([{"name":"nvjet","metrics":{}}])")) == 0.0);
}
