#include "capture/evidence_budgets.h"

#include <algorithm>

namespace lingprobe::capture {

const char* EvidenceBudgets::reserve(uint64_t bytes, uint64_t device_bytes, bool setup) {
  if (setup && setup_bytes_.fetch_add(bytes) + bytes > process_limit_ / kSetupShareDivisor) {
    setup_bytes_.fetch_sub(bytes);
    return "setup_share";
  }
  auto undo = [&](const char* why) {
    process_bytes_.fetch_sub(bytes);
    if (setup) setup_bytes_.fetch_sub(bytes);
    return why;
  };
  if (process_bytes_.fetch_add(bytes) + bytes > process_limit_) return undo("budget_process");
  if (device_bytes && device_bytes_.load() + device_bytes > device_limit_) return undo("budget_device");
  if (run_ && !run_->reserve(bytes)) return undo("budget_run");
  return nullptr;
}

void EvidenceBudgets::give_back(uint64_t bytes, bool setup) {
  process_bytes_.fetch_sub(bytes);
  if (setup) setup_bytes_.fetch_sub(bytes);
  if (run_ && bytes) run_->give_back(bytes);
}

void EvidenceBudgets::charge_window(double seconds, bool setup) {
  const auto us = static_cast<uint64_t>(std::max(0.0, seconds) * 1e6);
  window_us_.fetch_add(us);
  if (setup) setup_window_us_.fetch_add(us);
}

const char* EvidenceBudgets::window_refusal(bool setup) const {
  if (window_us_.load() >= window_limit_us_) return "budget_profile";
  if (setup && setup_window_us_.load() >= window_limit_us_ / kSetupShareDivisor) return "setup_share";
  return nullptr;
}

}  // namespace lingprobe::capture
