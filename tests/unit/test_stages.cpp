// The per-thread stage stack: the change counter and the listener the stage
// clock ends its intervals through.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <thread>

#include "capture/nvtx_stages.h"
#include "capture/stages.h"

using namespace lingprobe::capture;

namespace {
thread_local int t_heard = 0;
void heard() { ++t_heard; }
}  // namespace

TEST_CASE("stage changes are counted and heard on the changing thread", "[stages]") {
  std::thread([] {
    StageStack* s = this_thread_stage_stack();
    set_stage_listener(&heard);
    const StageId dit = intern_stage("dit");
    REQUIRE(push_stage(dit));
    CHECK(s->changes == 1);
    CHECK(top_stage(*s) == dit);
    REQUIRE(pop_stage());
    CHECK(s->changes == 2);
    CHECK(t_heard == 2);
    CHECK_FALSE(pop_stage());  // empty: no change, nothing heard
    CHECK(s->changes == 2);
    for (size_t i = 0; i < kMaxStageDepth; ++i) REQUIRE(push_stage(dit));
    CHECK_FALSE(push_stage(dit));  // past the depth: ignored, not a change
    CHECK(s->changes == 2 + kMaxStageDepth);
    CHECK(pop_stage());  // pops the ignored push silently
    CHECK(s->changes == 2 + kMaxStageDepth);
    set_stage_listener(nullptr);
    CHECK(pop_stage());
    CHECK(t_heard == static_cast<int>(2 + kMaxStageDepth));  // the listener is gone
    CHECK(s->changes == 3 + kMaxStageDepth);
  }).join();
}

TEST_CASE("the stages pushed are known, on any thread; a name only interned is not", "[stages]") {
  using namespace lingprobe::capture;
  const StageId pushed = intern_stage("pushed-on-another-thread");
  intern_stage("interned-only");  // an NVTX map's rule names its stage before any range begins
  std::thread([&] {
    REQUIRE(push_stage(pushed));
    REQUIRE(pop_stage());
  }).join();
  const auto begun = stages_pushed();
  CHECK(std::find(begun.begin(), begun.end(), "pushed-on-another-thread") != begun.end());
  CHECK(std::find(begun.begin(), begun.end(), "interned-only") == begun.end());
  CHECK(std::find(begun.begin(), begun.end(), "unstaged") == begun.end());
}

TEST_CASE("NVTX maps: patterns std::regex mishandles are refused, long names matched safely", "[stages]") {
  // fuzz/fuzz_parsers: a back-reference of 19 digits overflowed libstdc++'s regex compiler (UBSan).
  CHECK(lingprobe::capture::set_nvtx_map("dit=^(dit|t)\\3333333333333333333").find("more than 4 digits") !=
        std::string::npos);
  CHECK(lingprobe::capture::set_nvtx_map("dit=a{99999}").find("more than 4 digits") != std::string::npos);
  CHECK(lingprobe::capture::set_nvtx_map("dit=a{1,123456}").find("more than 4 digits") != std::string::npos);
  CHECK(lingprobe::capture::set_nvtx_map("t=f@f{55555555555555555555").find("more than 4 digits") != std::string::npos);
  CHECK(lingprobe::capture::set_nvtx_map("t=2^([]x){1}c{66666666666666666666}").find("more than 4 digits") !=
        std::string::npos);  // "[]" is an empty class in ECMAScript: what follows it is not inside a class
  CHECK(lingprobe::capture::set_nvtx_map("dit=" + std::string(600, 'a')).find("longer than 512") != std::string::npos);
  REQUIRE(
      lingprobe::capture::set_nvtx_map("dit=^layer_12345$;vae=a{2,3}b").empty());  // digits outside braces are literals
  // Nested repetition: exponential backtracking in libstdc++ (fuzz/fuzz_parsers timed out on 'vae_****').
  for (const char* bad : {"dit=vae_**", "dit=(a+)*", "dit=(a|b)+c", "dit=((a)*)+", "dit=x{2}{3}", "dit=(a*){2}"})
    CHECK(lingprobe::capture::set_nvtx_map(bad).find("repeats a repetition") != std::string::npos);
  for (const char* good : {"dit=^(dit|transformer)", "dit=a*?b", "dit=[*+?]+x", "dit=\\(a\\)*", "dit=a+b*c?",
                           "dit=(ab)*", "dit=^block_[0-9]{1,3}$"})
    CHECK(lingprobe::capture::set_nvtx_map(good).empty());
  REQUIRE(lingprobe::capture::set_nvtx_map("dit=a*c").empty());
  const std::string long_name(200000, 'a');  // recursion per character: only the first 512 bytes are matched
  lingprobe::capture::nvtx_range_push(long_name.c_str());
  lingprobe::capture::nvtx_range_pop();
  REQUIRE(lingprobe::capture::set_nvtx_map("").empty());
}

TEST_CASE("NVTX maps: a push takes the map set since the thread's last push", "[stages]") {
  // A push takes no lock: it compares the map's generation with the one it copied, and copies a new map once.
  std::thread([] {
    StageStack* s = this_thread_stage_stack();
    REQUIRE(set_nvtx_map("dit=^block").empty());
    nvtx_range_push("block_3");
    CHECK(top_stage(*s) == intern_stage("dit"));
    nvtx_range_pop();
    REQUIRE(set_nvtx_map("vae=^block").empty());
    nvtx_range_push("block_3");  // the same name, cached under the old map: the new map's stage
    CHECK(top_stage(*s) == intern_stage("vae"));
    nvtx_range_pop();
    REQUIRE(set_nvtx_map("").empty());
    nvtx_range_push("block_3");
    CHECK(top_stage(*s) == kUnstaged);
    nvtx_range_pop();
  }).join();
}
