// The per-thread call-record ring: capacity, full, the half-full signal the
// recorder uses to wake the writer, wrap-around, and one producer racing one
// consumer.
#include <catch2/catch.hpp>

#include <thread>
#include <vector>

#include "runtime/record_buffer.h"

using lingprobe::format::CallRecord;
using lingprobe::runtime::RecordBuffer;
using Push = RecordBuffer::Push;

namespace {
CallRecord rec(uint64_t seq) { return CallRecord{seq, 0, 0, 0, 0, 0}; }
}  // namespace

TEST_CASE("record buffer: capacity is the next power of two, at least 16") {
  CHECK(RecordBuffer(1).capacity() == 16);
  CHECK(RecordBuffer(16).capacity() == 16);
  CHECK(RecordBuffer(17).capacity() == 32);
  CHECK(RecordBuffer(65536).capacity() == 65536);
}

TEST_CASE("record buffer: half-full is signalled once per crossing, full refuses") {
  RecordBuffer b(16);
  std::vector<Push> got;
  for (uint64_t i = 0; i < 17; ++i) got.push_back(b.push(rec(i)));
  for (int i = 0; i < 16; ++i) CHECK(got[i] == (i == 7 ? Push::kReachedHalf : Push::kPushed));
  CHECK(got[16] == Push::kFull);
  std::vector<uint64_t> seqs;
  CHECK(b.drain([&](const CallRecord& r) { seqs.push_back(r.seq); }) == 16);
  for (uint64_t i = 0; i < 16; ++i) CHECK(seqs[i] == i);
  CHECK(b.empty());
  // Filling again (wrapped indices) signals again.
  int halves = 0;
  for (uint64_t i = 0; i < 16; ++i) halves += b.push(rec(i)) == Push::kReachedHalf;
  CHECK(halves == 1);
}

TEST_CASE("record buffer: a consumer draining while a producer pushes loses and reorders nothing") {
  RecordBuffer b(64);
  constexpr uint64_t kN = 200000;
  std::atomic<bool> done{false};
  std::vector<uint64_t> seen;
  seen.reserve(kN);
  std::thread consumer([&] {
    while (!done.load() || !b.empty()) b.drain([&](const CallRecord& r) { seen.push_back(r.seq); });
  });
  for (uint64_t i = 0; i < kN; ++i)
    while (b.push(rec(i)) == Push::kFull) std::this_thread::yield();
  done = true;
  consumer.join();
  REQUIRE(seen.size() == kN);
  bool ordered = true;
  for (uint64_t i = 0; i < kN; ++i) ordered = ordered && seen[i] == i;
  CHECK(ordered);
}
