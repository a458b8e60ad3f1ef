// A per-thread, single-producer single-consumer ring of fixed-size call
// records: the calling thread pushes (no locks, no allocation), the writer
// thread drains. Capacity is fixed at creation (a power of two). A push that
// fills the ring to half says so, once per crossing, so that the producer can
// wake the writer long before the ring is full (the writer otherwise drains
// only every flush interval).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "format/records.h"

namespace lingprobe::runtime {

using format::CallRecord;

class RecordBuffer {
 public:
  explicit RecordBuffer(size_t min_capacity);

  enum class Push { kFull, kPushed, kReachedHalf };

  // Producer side. kFull: nothing written. kReachedHalf: written, and this
  // record made the ring exactly half full (wake the consumer).
  Push push(const CallRecord& r) {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    const uint64_t used = head - tail_.load(std::memory_order_acquire);
    if (used >= capacity_) return Push::kFull;
    slots_[head & mask_] = r;
    head_.store(head + 1, std::memory_order_release);
    return used + 1 == capacity_ / 2 ? Push::kReachedHalf : Push::kPushed;
  }

  // Consumer side: calls fn(record) for every record available now.
  template <typename Fn>
  size_t drain(Fn&& fn) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint64_t head = head_.load(std::memory_order_acquire);
    for (uint64_t i = tail; i < head; ++i) fn(slots_[i & mask_]);
    tail_.store(head, std::memory_order_release);
    return static_cast<size_t>(head - tail);
  }

  size_t capacity() const { return capacity_; }
  bool empty() const { return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire); }

  // Set by the producer thread when it exits; the writer frees the buffer
  // once it is closed and drained.
  void close() { closed_.store(true, std::memory_order_release); }
  bool closed() const { return closed_.load(std::memory_order_acquire); }

 private:
  size_t capacity_;
  size_t mask_;
  std::unique_ptr<CallRecord[]> slots_;
  alignas(64) std::atomic<uint64_t> head_{0};
  alignas(64) std::atomic<uint64_t> tail_{0};
  std::atomic<bool> closed_{false};
};

}  // namespace lingprobe::runtime
