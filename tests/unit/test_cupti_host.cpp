// CUPTI's host side needs no GPU: the seed's eight metrics on GH100 give a
// config image and a pass count here (CI), as on the H200. And the profile
// files' layout from recorded figures (units, ncu's raw CSV).
#include <catch2/catch.hpp>

#include <string>

#include "format/profile_files.h"
#ifdef LINGPROBE_HAVE_CUPTI
#include "gpu/cupti_profiler.h"
#endif

using namespace lingprobe;

#ifdef LINGPROBE_HAVE_CUPTI
TEST_CASE("cupti host: the seed's metrics on GH100 without a GPU", "[cupti]") {
  std::string error;
  gpu::Cupti* cupti = gpu::Cupti::get(&error);
  if (!cupti) {
    WARN("libcupti not loadable here (" << error << "): host-side check skipped");
    return;
  }
  gpu::MetricSet set;
  const format::Status built = cupti->build_metric_set("GH100", gpu::seed_metrics(), {}, set);
  if (built.message().find("libnvperf") != std::string::npos) {  // the environment, not lingprobe: skipped
    WARN("CUPTI's host library is missing: " << built.message());
    return;
  }
  REQUIRE(built.ok());
  CHECK(!set.config_image.empty());
  CHECK(set.passes == 8);  // sm__throughput and lts__throughput are the multi-pass ones (SPEC section 5)
  std::vector<std::string> one_pass;
  for (const auto& m : gpu::seed_metrics())
    if (m.rfind("sm__throughput", 0) != 0 && m.rfind("lts__throughput", 0) != 0) one_pass.push_back(m);
  gpu::MetricSet small;
  REQUIRE(cupti->build_metric_set("GH100", one_pass, {}, small).ok());
  CHECK(small.passes == 1);
  gpu::MetricSet bad;
  const format::Status unknown = cupti->build_metric_set("GH100", {"no__such_metric.sum"}, {}, bad);
  CHECK(unknown.code() == format::StatusCode::kFailed);
  CHECK(unknown.message().find("not accepted") != std::string::npos);
  CHECK_FALSE(cupti->build_metric_set("NOT_A_CHIP", gpu::seed_metrics(), {}, bad).ok());
}
#endif

TEST_CASE("profile files: the seed's units, ncu's raw CSV layout", "[cupti]") {
  format::ProfileData p;
  p.status = "passed";
  p.metrics = {"gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed", "dram__bytes_read.sum",
               "dram__bytes.sum.per_second"};
  p.compute_capability = "9.0";
  format::ProfiledKernel k;
  k.name = "nvjet_sm90_tst_256x144";
  k.mangled_name = "nvjet_sm90_tst_256x144";
  k.grid[0] = 132, k.grid[1] = k.grid[2] = 1;
  k.block[0] = 384, k.block[1] = k.block[2] = 1;
  k.registers_per_thread = 168;
  k.shared_bytes_per_block = 213204 + 1024;
  k.values = {292448.0, 94.03, 314121984.0, 1.220688e12};
  p.kernels.push_back(k);
  const format::JsonValue j = format::kernels_json(p);
  const format::JsonValue& m = *j.items()[0].find("metrics");
  CHECK(m.find("gpu__time_duration.sum")->find("value")->as_float() == Approx(292.448));
  CHECK(m.find("gpu__time_duration.sum")->find("unit")->as_string() == "us");
  CHECK(m.find("dram__bytes_read.sum")->find("value")->as_float() == Approx(314.121984));
  CHECK(m.find("dram__bytes_read.sum")->find("unit")->as_string() == "Mbyte");
  CHECK(m.find("dram__bytes.sum.per_second")->find("value")->as_float() == Approx(1.220688));
  CHECK(m.find("launch__shared_mem_per_block")->find("value")->as_float() == Approx(214.228));  // SPEC: 214.23 KB
  CHECK(m.find("launch__registers_per_thread")->find("unit")->as_string() == "register/thread");
  CHECK(j.items()[0].find("gpu_start_ns") == nullptr);  // a counter window's kernel: replayed, no GPU clock times
  p.kernels[0].gpu_start_ns = 5000, p.kernels[0].gpu_end_ns = 297448;  // a timed call's: where it ran on the GPU
  const format::JsonValue timed = format::kernels_json(p);
  CHECK(timed.items()[0].find("gpu_start_ns")->as_int() == 5000);
  CHECK(timed.items()[0].find("gpu_end_ns")->as_int() == 297448);
  const std::string csv = format::metrics_csv(p, 42, "python3", "h");
  CHECK(csv.rfind("\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\"", 0) == 0);
  CHECK(csv.find("\"nsecond\"") != std::string::npos);
  CHECK(csv.find("\"292448\"") != std::string::npos);
  CHECK(csv.find("\"214228\"") != std::string::npos);
}
