// The per-thread stage stack: the change counter and the listener the stage
// clock ends its intervals through.
#include <catch2/catch.hpp>

#include <thread>

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
