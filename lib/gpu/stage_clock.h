// GPU time per stage, measured with CUDA timing events: a thread's stage run
// begins with an event recorded on the stream of its first op with a CUDA
// tensor and ends with one recorded on that stream when the thread's stage
// changes (or the thread exits); the milliseconds between them are the
// stage's. An interval is `clean` when no counter window opened or closed on
// its GPU while it ran (the window epoch did not move and was not open at
// the start), so a run's profiling cost can be told from its work. Events
// are resolved on the writer thread (an event query, never a wait); finalize
// closes what is open and waits a bounded time. Streams being captured get
// no event (the interval is lost and counted). Torch-free: the caller passes
// the stream; the events come through StageEvents (the CUDA driver, or a
// fake in tests).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace lingprobe::gpu {

class CudaDriver;

struct StageTime {
  double gpu_us = 0;        // all intervals of the stage
  double clean_gpu_us = 0;  // intervals with no counter window on their GPU
  uint64_t intervals = 0, clean_intervals = 0;
};

// What the clock needs of a GPU. Every call may come from any thread.
class StageEvents {
 public:
  virtual ~StageEvents() = default;
  enum class State { Done, Pending, Failed };
  virtual bool capturing(void* stream) = 0;            // being captured, or unknown
  virtual void* record(int device, void* stream) = 0;  // a timing event recorded now; nullptr on failure
  virtual State state(int device, void* event) = 0;
  virtual bool elapsed_ms(int device, void* start, void* end, float& ms) = 0;
  virtual void destroy(int device, void* event) = 0;
};
// The CUDA driver's events (relaxed capture mode around each call).
std::unique_ptr<StageEvents> driver_stage_events(CudaDriver* driver);

class StageClock {
 public:
  // `window_epoch(device)`: moves whenever a counter window opens or closes
  // on that GPU; an epoch with a bit of kWindowOpenBits set means one is open.
  static constexpr uint64_t kWindowOpenBits = 1u | (uint64_t{1} << 32);
  StageClock(std::unique_ptr<StageEvents> events, std::function<uint64_t(int)> window_epoch);
  ~StageClock();

  // The calling thread's stage `stage` begins with an op queued on `stream` of `device`.
  void begin(uint32_t stage, int device, void* stream);
  // The calling thread's stage changed: its open interval (if any) ends now.
  void end();
  // Resolves the intervals whose events completed (the writer thread, every cycle).
  void poll();
  // Ends every thread's open interval and resolves all, waiting at most `wait_ms`;
  // afterwards the clock does nothing.
  void finalize(int wait_ms);
  // In a forked child: the clock stops without a GPU call (the parent's events are not the child's).
  void abandon_after_fork();

  std::map<uint32_t, StageTime> totals();
  std::map<std::string, uint64_t> lost();  // intervals not measured, by reason

  struct Open;  // a thread's open interval

 private:
  struct Closed {
    uint32_t stage;
    int device;
    void* start;
    void* end;
    bool clean;
  };
  Open* open_slot();
  void close(Open& o);
  void poll_locked();
  friend struct SlotOwner;

  std::unique_ptr<StageEvents> ev_;
  std::function<uint64_t(int)> epoch_;
  std::mutex poll_mu_;  // one poll at a time (the writer's and finalize's), held through it
  std::mutex mu_;       // everything below; taken at stage changes, never per op
  std::vector<std::unique_ptr<Open>> slots_;
  std::vector<Closed> pending_;
  std::map<uint32_t, StageTime> totals_;
  std::map<std::string, uint64_t> lost_;
  std::atomic<bool> finalized_{false};
  const uint64_t id_;  // unique per clock: a thread's slot is this clock's only if the ids match
};

}  // namespace lingprobe::gpu
