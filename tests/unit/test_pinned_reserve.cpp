// The pinned memory of the host route (gpu/pinned_reserve): asked for by a
// calling thread, allocated on the writer's thread, taken without waiting by
// a later call, and freed on the writer's thread only after the copies into
// it have completed; at exit, where the writer runs no more chores, freed by
// whoever lets it go. Over a fake of the driver and of the writer's queue.
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gpu/pinned_reserve.h"

using lingprobe::gpu::PinnedReserve;

namespace {

struct FakeMemory : PinnedReserve::Memory {
  std::map<void*, size_t> live;
  std::vector<std::string> log;  // "alloc N", "wait E", "free N" in order
  bool fail = false;
  void* allocate(int device, size_t n) override {
    log.push_back("alloc " + std::to_string(n) + " on " + std::to_string(device));
    if (fail) return nullptr;
    void* p = ::operator new(n);
    live[p] = n;
    return p;
  }
  void release(int, void* p) override {
    log.push_back("free " + std::to_string(live.at(p)));
    live.erase(p);
    ::operator delete(p);
  }
  std::set<void*> failing;  // events whose wait fails (a sticky CUDA error, the deadline at exit)
  bool wait_and_destroy(int, void* event) override {
    log.push_back("wait " + std::to_string(reinterpret_cast<uintptr_t>(event)));
    return !failing.count(event);
  }
};

// The writer's chores, run when the test says; `open`: false once the writer is finishing.
struct FakeWriter {
  std::vector<std::function<void()>> chores;
  bool open = true;
  ~FakeWriter() { run_all(); }  // as the real writer drains its chores: what a lease gave back is freed
  PinnedReserve::RunOnWriter runner() {
    return [this](std::function<void()> c) {
      if (!open) return false;
      chores.push_back(std::move(c));
      return true;
    };
  }
  void run_all() {
    auto now = std::move(chores);
    chores.clear();
    for (auto& c : now) c();
  }
};

// A buffer of `n` asked for, allocated on the (fake) writer's thread and taken.
std::shared_ptr<PinnedReserve::Lease> allocated(PinnedReserve& reserve, FakeWriter& writer, size_t n) {
  reserve.want(0, n);
  writer.run_all();
  return reserve.take(n);
}

}  // namespace

TEST_CASE("pinned reserve: asked for, allocated on the writer's thread, taken once without waiting", "[gpu]") {
  FakeMemory memory;
  FakeWriter writer;
  PinnedReserve reserve(&memory, writer.runner());
  CHECK(reserve.take(1) == nullptr);  // none asked for
  reserve.want(2, 100);
  reserve.want(2, 300);  // a larger ask before the chore ran: one chore, the larger size
  CHECK(writer.chores.size() == 1);
  CHECK(memory.log.empty());  // nothing allocated on the asking thread
  CHECK(reserve.take(1) == nullptr);
  writer.run_all();
  CHECK(memory.log == std::vector<std::string>{"alloc 300 on 2"});
  CHECK(reserve.pinned_bytes() == 300);
  CHECK(reserve.take(301) == nullptr);  // too small for this call: it stays ready
  auto lease = reserve.take(250);
  REQUIRE(lease);
  CHECK(reserve.take(1) == nullptr);  // one buffer, one call
  CHECK(lease->room() == 300);
  CHECK(lease->slice(200) != nullptr);
  CHECK(lease->slice(101) == nullptr);
  CHECK(lease->room() == 100);
}

TEST_CASE("pinned reserve: a let-go buffer comes back after its copies' events, kept for the next call", "[gpu]") {
  FakeMemory memory;
  FakeWriter writer;
  PinnedReserve reserve(&memory, writer.runner());
  auto lease = allocated(reserve, writer, 64);
  REQUIRE(lease);
  lease->add_event(0, reinterpret_cast<void*>(7));
  lease->add_event(0, reinterpret_cast<void*>(8));
  reserve.want(0, 32);  // another key asks while the buffer is held: it will do, nothing is allocated
  lease.reset();        // on the calling thread (a refused snapshot): nothing waits here
  CHECK(memory.log.size() == 1);
  CHECK(reserve.take(32) == nullptr);  // not before its copies are known to be done
  writer.run_all();
  CHECK(memory.log == std::vector<std::string>{"alloc 64 on 0", "wait 7", "wait 8"});
  CHECK(reserve.pinned_bytes() == 64);
  auto again = reserve.take(32);  // the same memory, no allocation: that is what stalls the program
  REQUIRE(again);
  CHECK(again->room() == 64);
}

TEST_CASE("pinned reserve: a larger ask replaces the buffer, at once if ready, else when it comes back", "[gpu]") {
  FakeMemory memory;
  FakeWriter writer;
  PinnedReserve reserve(&memory, writer.runner());
  reserve.want(0, 10);
  writer.run_all();
  reserve.want(0, 5);  // the ready one holds it: nothing new
  writer.run_all();
  reserve.want(0, 20);
  writer.run_all();
  CHECK(memory.log == std::vector<std::string>{"alloc 10 on 0", "free 10", "alloc 20 on 0"});
  auto lease = reserve.take(20);
  reserve.want(1, 40);
  writer.run_all();  // held by a call: not replaced under it, and no second buffer
  CHECK(memory.log.size() == 3);
  CHECK(reserve.pinned_bytes() == 20);
  lease.reset();
  writer.run_all();
  CHECK(memory.log ==
        std::vector<std::string>{"alloc 10 on 0", "free 10", "alloc 20 on 0", "free 20", "alloc 40 on 1"});
  REQUIRE(reserve.take(40));  // let go at once: kept
  writer.run_all();
  memory.fail = true;
  reserve.want(0, 80);
  writer.run_all();
  CHECK(reserve.take(80) == nullptr);
  CHECK(reserve.pinned_bytes() == 0);
  memory.fail = false;
  reserve.want(0, 80);  // the next refused call asks again
  writer.run_all();
  CHECK(reserve.take(80) != nullptr);
}

TEST_CASE("pinned reserve: a buffer that comes back after the reserve went, or at exit, is freed", "[gpu]") {
  FakeMemory memory;
  FakeWriter writer;
  auto reserve = std::make_unique<PinnedReserve>(&memory, writer.runner());
  auto lease = allocated(*reserve, writer, 8);
  reserve.reset();  // the session goes first: the held buffer stays with its call
  CHECK(memory.live.size() == 1);
  lease.reset();
  writer.run_all();
  CHECK(memory.live.empty());
  reserve = std::make_unique<PinnedReserve>(&memory, writer.runner());
  lease = allocated(*reserve, writer, 16);
  writer.open = false;  // the writer runs no more chores: whoever lets go waits and frees
  lease->add_event(0, reinterpret_cast<void*>(3));
  lease.reset();
  CHECK(memory.live.empty());
  CHECK(memory.log.back() == "free 16");
  CHECK(memory.log[memory.log.size() - 2] == "wait 3");
  CHECK(writer.chores.empty());
  reserve->want(0, 4);  // nothing can allocate now: nothing is asked of the driver
  CHECK(reserve->take(4) == nullptr);
  CHECK(memory.log.back() == "free 16");
}

TEST_CASE("pinned reserve: a buffer with a copy not known to be done is freed, never used again", "[gpu]") {
  FakeMemory memory;
  FakeWriter writer;
  PinnedReserve reserve(&memory, writer.runner());
  for (const bool untracked : {false, true}) {
    auto lease = allocated(reserve, writer, 64);
    REQUIRE(lease);
    if (untracked) {
      lease->untracked_copy();  // queued, and its event could not be recorded
    } else {
      lease->add_event(0, reinterpret_cast<void*>(5));
      memory.failing.insert(reinterpret_cast<void*>(5));
    }
    lease.reset();
    writer.run_all();
    CHECK(memory.log.back() == "free 64");
    CHECK(reserve.pinned_bytes() == 0);
    CHECK(reserve.take(1) == nullptr);
  }
}

TEST_CASE("pinned reserve: a chore that runs after the reserve went allocates nothing", "[gpu]") {
  FakeMemory memory;
  FakeWriter writer;
  auto reserve = std::make_unique<PinnedReserve>(&memory, writer.runner());
  reserve->want(0, 64);
  reserve.reset();
  writer.run_all();
  CHECK(memory.log.empty());
}
