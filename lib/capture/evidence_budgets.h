// The budgets that bound a process's evidence (docs/SNAPSHOTS.md, COUNTERS.md):
// snapshot bytes (per process, and launch-wide through RunBudget), device
// memory held by copies in flight, and counter-window stall seconds; set-up
// calls (construction, loading) may use 1/kSetupShareDivisor of the bytes and
// of the seconds. Lock-free: any calling thread reserves, the writer thread
// gives back. No torch.
#pragma once

#include <atomic>
#include <cstdint>

namespace lingprobe::capture {

// The launch-wide byte budget (through the claims directory).
class RunBudget {
 public:
  virtual ~RunBudget() = default;
  virtual bool reserve(uint64_t bytes) = 0;
  virtual void give_back(uint64_t bytes) = 0;
};

// The share of each budget set-up calls may use (1/kSetupShareDivisor).
constexpr uint64_t kSetupShareDivisor = 8;

class EvidenceBudgets {
 public:
  EvidenceBudgets(uint64_t process_bytes, uint64_t device_bytes, double window_seconds, RunBudget* run)
      : process_limit_(process_bytes),
        device_limit_(device_bytes),
        window_limit_us_(static_cast<uint64_t>(window_seconds * 1e6)),
        run_(run) {}

  // Takes a snapshot's bytes (and, for CUDA tensors, its device bytes are
  // checked against the copies in flight). Returns nullptr, or the refusal
  // reason with nothing taken: setup_share, budget_process, budget_device,
  // budget_run.
  const char* reserve(uint64_t bytes, uint64_t device_bytes, bool setup);
  // Returns what reserve() took (a snapshot not kept).
  void give_back(uint64_t bytes, bool setup);
  // Device bytes of copies waiting for the writer: added by the copies, taken
  // off as the writer drains them.
  std::atomic<uint64_t>& device_in_flight() { return device_bytes_; }

  // Adds a counter window's (or a refused window's) wall seconds.
  void charge_window(double seconds, bool setup);
  // nullptr, or why no window may open now: budget_profile, setup_share.
  const char* window_refusal(bool setup) const;

 private:
  const uint64_t process_limit_, device_limit_, window_limit_us_;
  RunBudget* run_;
  std::atomic<uint64_t> process_bytes_{0}, device_bytes_{0}, setup_bytes_{0};
  std::atomic<uint64_t> window_us_{0}, setup_window_us_{0};
};

}  // namespace lingprobe::capture
