// The peak table of the capability report (docs/COUNTERS.md): datasheet
// figures per GPU and math mode; unknown GPUs and modes have none.
#include <catch2/catch.hpp>

#include "audit/capability_report.h"

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
  CHECK_FALSE(device_peak("NVIDIA H200", "", p));  // integer ops: no roof
  CHECK_FALSE(device_peak("NVIDIA GH200 480GB", "bf16", p));  // other figures than the H200 SXM
  CHECK_FALSE(device_peak("NVIDIA H100 NVL", "bf16", p));
  CHECK_FALSE(device_peak("NVIDIA H200 NVL", "bf16", p));
  CHECK_FALSE(device_peak("", "bf16", p));
}
