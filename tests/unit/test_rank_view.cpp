// The rank view's straggler verdict: a gap between the ranks' waits in
// collectives is named only when it stands clear of a shared machine's
// scheduler noise (issue 25: a balanced 2-rank gloo job on 2 loaded cores was
// named a straggler over a 6.4 ms gap in 6 all_reduces).
#include <catch2/catch.hpp>

#include "audit/rank_view.h"

using namespace lingprobe;

namespace {
audit::FileSummary rank_file(int64_t rank, uint64_t collective_calls, uint64_t collective_us) {
  audit::FileSummary f;
  f.role = "rank";
  f.rank = rank;
  f.world_size = 2;
  f.final_counts = true;
  f.collectives["work"] = {{"calls", collective_calls}, {"us", collective_us}};
  return f;
}

const format::JsonValue& stage_straggler(const audit::RankView& v) {
  const format::JsonValue* stages = v.json.find("stages");
  REQUIRE(stages);
  REQUIRE(stages->items().size() == 1);
  const format::JsonValue* s = stages->items()[0].find("straggler");
  REQUIRE(s);
  return *s;
}
}  // namespace

TEST_CASE("the waits of a balanced job on loaded cores name no straggler", "[audit][rank_view]") {
  // The CI run's figures: longest wait 24.9 ms, rank 1's 18.5 ms, 6 all_reduces (failed before the noise floor).
  CHECK_FALSE(audit::waits_name_a_straggler(0.0185, 0.0249, 6, 0.05));
  const auto a = rank_file(0, 6, 24900), b = rank_file(1, 6, 18500);
  const auto v = audit::rank_view(2, {&a, &b}, {});
  CHECK(stage_straggler(v).is_null());
  CHECK(v.markdown.find("Straggler") == std::string::npos);
}

TEST_CASE("a rank that makes the others wait is named", "[audit][rank_view]") {
  // The straggler test's job: 80 ms before each of 6 all_reduces on rank 1.
  CHECK(audit::waits_name_a_straggler(0.01, 0.49, 6, 0.6));
  const auto a = rank_file(0, 6, 490000), b = rank_file(1, 6, 10000);
  const auto v = audit::rank_view(2, {&a, &b}, {});
  const format::JsonValue& s = stage_straggler(v);
  REQUIRE_FALSE(s.is_null());
  CHECK(s.find("rank")->as_int() == 1);
  CHECK(v.markdown.find("rank 1 waits least in collectives") != std::string::npos);
}

TEST_CASE("the straggler's thresholds", "[audit][rank_view]") {
  // Under the noise floor, however lopsided.
  CHECK_FALSE(audit::waits_name_a_straggler(0.0, 0.09, 1, 0));
  CHECK(audit::waits_name_a_straggler(0.0, 0.2, 1, 0));
  // The jitter allowance grows with the square root of the collectives: 8,000 of them need ~2 s of gap.
  CHECK_FALSE(audit::waits_name_a_straggler(1.0, 2.9, 8000, 20));
  CHECK(audit::waits_name_a_straggler(1.0, 3.1, 8000, 20));
  // A fifth of the longest wait, and 5% of the stage's span.
  CHECK_FALSE(audit::waits_name_a_straggler(5.0, 6.0, 6, 10));
  CHECK_FALSE(audit::waits_name_a_straggler(0.0, 1.0, 6, 40));
  CHECK(audit::waits_name_a_straggler(0.0, 1.0, 6, 10));
}

TEST_CASE("no verdict while a rank of the stage has not finished", "[audit][rank_view]") {
  auto a = rank_file(0, 6, 490000), b = rank_file(1, 6, 10000);
  b.final_counts = false;
  const auto v = audit::rank_view(2, {&a, &b}, {});
  CHECK(stage_straggler(v).is_null());
  CHECK(v.markdown.find("not judged: rank(s) 1 did not finish") != std::string::npos);
}

TEST_CASE("one rank: each stage in the JSON, no per-stage line comparing ranks in the Markdown", "[audit][rank_view]") {
  // A notebook's one-process run read "stage `x`: ranks 0; 0 signature(s) whose calls differ between its ranks" for
  // every stage.
  audit::FileSummary f = rank_file(0, 0, 0);
  f.role = "single";
  f.world_size = 1;
  f.collectives.clear();
  const auto view = audit::rank_view(
      1, {&f},
      {{"a", "backbone", "aten.conv2d.default", "", {{0, 3}}}, {"b", "post", "aten.add.Tensor", "", {{0, 1}}}});
  CHECK(view.json.find("stages")->items().size() == 2);
  CHECK(view.markdown.find("- stage `") == std::string::npos);
  CHECK(view.markdown.find("Expected 1 rank(s)") != std::string::npos);
}
