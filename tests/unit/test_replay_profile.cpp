// `lingprobe replay --profile`'s comparison: the run's inline profile and the
// replay's, kernel by kernel and metric by metric.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "replay/replay_profile.h"
#include "test_support.h"

using lingprobe::format::JsonValue;

namespace {
std::string kernel(const char* mangled, double time_us, double dram_mb) {
  return std::string("{\"id\":\"0\",\"name\":\"") + mangled + "\",\"mangled_name\":\"" + mangled +
         "\",\"device\":\"0\",\"grid\":[1,1,1],\"block\":[128,1,1],\"metrics\":{\"gpu__time_duration.sum\":{"
         "\"value\":" +
         std::to_string(time_us) + ",\"unit\":\"us\"},\"dram__bytes_read.sum\":{\"value\":" + std::to_string(dram_mb) +
         ",\"unit\":\"Mbyte\"},\"launch__registers_per_thread\":{\"value\":32,\"unit\":\"register/thread\"}}}";
}
std::string profile(const std::string& root, const std::string& name, const std::string& kernels, const char* status) {
  const std::string d = root + "/" + name;
  ::mkdir(d.c_str(), 0755);
  std::ofstream(d + "/kernels.json") << "[" << kernels << "]";
  std::ofstream(d + "/identity.json") << "{\"status\":\"" << status << "\"}";
  return d;
}
double field(const JsonValue& v, const char* k) {
  const JsonValue* x = v.find(k);
  REQUIRE(x);
  return x->kind() == JsonValue::Kind::Int ? static_cast<double>(x->as_int()) : x->as_float();
}
}  // namespace

TEST_CASE("replay profile: kernels matched by launch order and mangled name, differences per metric", "[replay]") {
  const std::string root = lingprobe::test::temp_dir("lingprobe-rp-");
  const std::string run = profile(root, "run", kernel("_Z4gemmv", 100, 50) + "," + kernel("_Z3addv", 10, 8), "passed");
  const std::string same =
      profile(root, "same", kernel("_Z4gemmv", 102, 40) + "," + kernel("_Z3addv", 10, 8), "passed");
  const std::string other =
      profile(root, "other", kernel("_Z4gemmv", 100, 50) + "," + kernel("_Z3mulv", 10, 8), "passed");
  std::string error;
  JsonValue c = lingprobe::replay::compare_profiles(run, same, error);
  REQUIRE(error.empty());
  CHECK(c.find("kernels_match")->as_bool());
  CHECK(field(c, "run_time_us") == Approx(110));
  CHECK(field(c, "replay_time_us") == Approx(112));
  CHECK(field(c, "max_abs_rel_diff") == Approx(0.2));  // the GEMM's DRAM reads, 50 -> 40 MB
  CHECK(c.find("max_abs_rel_diff_metric")->as_string() == "dram__bytes_read.sum");
  const JsonValue& gemm = c.find("kernels")->items()[0];
  CHECK(field(*gemm.find("metrics")->find("gpu__time_duration.sum"), "rel_diff") == Approx(0.02));
  CHECK(lingprobe::replay::profile_line(c).find("kernels 2 run / 2 replay (same), time 110.0 -> 112.0 us (+1.8%), "
                                                "max |diff| 20.0% (dram__bytes_read.sum)") != std::string::npos);
  c = lingprobe::replay::compare_profiles(run, other, error);
  CHECK_FALSE(c.find("kernels_match")->as_bool());
  CHECK(c.find("kernels")->items()[1].find("replay_mangled_name")->as_string() == "_Z3mulv");
  CHECK(lingprobe::replay::profile_line(c).find("(DIFFER)") != std::string::npos);
  CHECK(lingprobe::replay::compare_profiles(run, std::string(root) + "/missing", error).is_null());
  CHECK(error.find("missing/kernels.json") != std::string::npos);
}
