// GPU time per stage: the counts record's "stage_gpu" and "stage_gpu_lost"
// written by the metadata writer and read back by the audit's reader, and
// the capability report's measured denominator built from them.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "audit/metadata_reader.h"
#include "audit/stage_time.h"
#include "format/canonical_json.h"
#include "format/json_parse.h"
#include "sink/metadata_writer.h"
#include "test_support.h"

using namespace lingprobe;

namespace {
audit::FileSummary rank_with(std::map<std::string, std::map<std::string, uint64_t>> stages) {
  audit::FileSummary f;
  f.role = "rank";
  f.stage_gpu = std::move(stages);
  return f;
}
double num(const format::JsonValue& v, const char* key) {
  const format::JsonValue* x = v.find(key);
  REQUIRE(x);
  return x->kind() == format::JsonValue::Kind::Int ? static_cast<double>(x->as_int()) : x->as_float();
}
}  // namespace

TEST_CASE("stage GPU time round-trips through the counts record", "[report][stage_time]") {
  const std::string dir = test::temp_dir("lingprobe-stage-");
  const std::string path = dir + "/m.jsonl";
  {
    sink::MetadataWriter w(
        {path,
         "{\"format\":\"lingprobe-metadata/"
         "1\",\"kind\":\"header\",\"pid\":1,\"rank\":0,\"role\":\"rank\",\"run_id\":\"r\",\"world_size\":1}",
         10000},
        [] {
          format::CountsSnapshot s;
          s.sampling["keys"] = 2;
          s.stage_gpu["dit"] = {{"gpu_us", 1500}, {"intervals", 3}, {"clean_gpu_us", 900}, {"clean_intervals", 2}};
          s.stage_gpu["vae \"x\""] = {{"gpu_us", 7}, {"intervals", 1}};
          s.stage_gpu_lost["stream_capturing"] = 4;
          return s;
        });
    w.add_signature(0, std::string(64, 'a'), "{\"op\":\"aten.add.Tensor\"}");  // the file opens with its first record
    w.finalize();
  }
  std::ifstream f(path);
  std::string line, counts;
  while (std::getline(f, line))
    if (line.find("\"kind\":\"counts\"") != std::string::npos) counts = line;
  REQUIRE(!counts.empty());
  auto parsed = format::parse_json(counts);
  REQUIRE(parsed.status.ok());
  CHECK(format::canonical_json(parsed.value) == counts);  // keys in canonical order, escapes included
  audit::FileSummary s;
  const audit::ReadResult read = audit::read_metadata_file(path, s);
  INFO(read.status.message());
  REQUIRE(read.status.ok());
  CHECK(s.stage_gpu.at("dit").at("gpu_us") == 1500);
  CHECK(s.stage_gpu.at("dit").at("clean_intervals") == 2);
  CHECK(s.stage_gpu.at("vae \"x\"").at("intervals") == 1);
  CHECK(s.stage_gpu_lost.at("stream_capturing") == 4);
  CHECK(s.sampling.at("keys") == 2);
  CHECK(s.unsampled.empty());  // the sampling block's (empty) "unsampled" reasons, unchanged by stage_gpu
}

TEST_CASE("no stage measurement: no denominator", "[report][stage_time]") {
  audit::FileSummary a;
  const auto v = audit::stage_time_view({&a}, {{"dit", 5.0}});
  CHECK(v.json.is_null());
  CHECK(v.denominator_us == 0);
  CHECK(v.markdown.empty());
}

TEST_CASE("stage GPU time: ranks summed, windows taken out, attributed and unattributed", "[report][stage_time]") {
  // dit: all clean on rank 0, 1 of 2 clean on rank 1 -> 3 of 4 clean: mean 1000 x 4 = 4000 without windows.
  // vae: clean throughout -> the measurement. text: no clean interval -> unknown, out of the totals.
  audit::FileSummary r0 =
      rank_with({{"dit", {{"gpu_us", 2000}, {"intervals", 2}, {"clean_gpu_us", 2000}, {"clean_intervals", 2}}},
                 {"vae", {{"gpu_us", 500}, {"intervals", 1}, {"clean_gpu_us", 500}, {"clean_intervals", 1}}}});
  audit::FileSummary r1 =
      rank_with({{"dit", {{"gpu_us", 9000}, {"intervals", 2}, {"clean_gpu_us", 1000}, {"clean_intervals", 1}}},
                 {"text", {{"gpu_us", 300}, {"intervals", 1}}}});
  r1.stage_gpu_lost["event_failed"] = 1;
  const auto v = audit::stage_time_view({&r0, &r1}, {{"dit", 3000.0}, {"vae", 800.0}});
  REQUIRE(!v.json.is_null());
  const format::JsonValue& by = *v.json.find("by_stage");
  const format::JsonValue& dit = *by.find("dit");
  CHECK(num(dit, "gpu_time_us") == 11000);
  CHECK(num(dit, "intervals") == 4);
  CHECK(num(dit, "clean_intervals") == 3);
  CHECK(num(dit, "gpu_time_without_windows_us") == Approx(4000));
  CHECK(num(dit, "unattributed_us") == Approx(1000));
  CHECK(num(dit, "attributed_fraction") == Approx(0.75));
  const format::JsonValue& vae = *by.find("vae");
  CHECK(num(vae, "gpu_time_without_windows_us") == Approx(500));
  CHECK(num(vae, "unattributed_us") == 0);  // estimates in isolation may exceed the span: clamped
  const format::JsonValue& text = *by.find("text");
  CHECK(text.find("gpu_time_without_windows_us")->is_null());
  CHECK(text.find("attributed_fraction")->is_null());
  CHECK(v.without_windows_us.count("dit") == 1);
  CHECK(v.without_windows_us.count("text") == 0);  // its jobs get no share of the measured time
  CHECK(num(v.json, "gpu_time_us") == 11800);
  CHECK(v.denominator_us == Approx(4500));
  CHECK(num(v.json, "attributed_us") == Approx(3800));
  CHECK(num(*v.json.find("intervals_lost"), "event_failed") == 1);
  const std::string scope = v.json.find("scope")->as_string();
  CHECK(scope.find("mean x all intervals") != std::string::npos);
  CHECK(scope.find("no clean interval are left out") != std::string::npos);
  CHECK(v.markdown.find("| text | 0.000 s | 1 (0) | unknown (no clean interval) |") != std::string::npos);
  CHECK(v.markdown.find("| dit | 0.011 s | 4 (3) | 0.004 s | 0.003 s | 0.001 s (25%) |") != std::string::npos);
}
