#include "gpu/window_settle.h"

#include <algorithm>

namespace lingprobe::gpu {
namespace {

int64_t ns_of(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

void WindowSettle::counter_call_ended(int device, std::chrono::steady_clock::time_point at) {
  if (device >= 0 && device < kDevices) closed_ns_[device].store(ns_of(at), std::memory_order_relaxed);
}

int64_t WindowSettle::since_ns(int device, std::chrono::steady_clock::time_point now) const {
  if (device < 0 || device >= kDevices) return -1;
  const int64_t ended = closed_ns_[device].load(std::memory_order_relaxed);
  if (ended == 0) return -1;
  return std::max<int64_t>(0, ns_of(now) - ended);  // stamped after `now` was read: just now
}

bool WindowSettle::settling(int device, std::chrono::steady_clock::time_point now) const {
  const int64_t since = since_ns(device, now);
  return since >= 0 && since < std::chrono::duration_cast<std::chrono::nanoseconds>(kSettle).count();
}

}  // namespace lingprobe::gpu
