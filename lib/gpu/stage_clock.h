// GPU time per stage, measured with CUDA timing events: a thread's stage run
// begins with an event recorded on the stream of its first op with a CUDA
// tensor and ends with one recorded on that stream when the thread's stage
// changes; the milliseconds between them are the stage's. An interval is
// `clean` when no counter window opened or closed on its GPU while it ran
// (the window epoch, shared by the processes of the GPU, did not move), so a
// run's profiling cost can be told from its work. Events are resolved on the
// writer thread (cuEventQuery, never a wait); finalize closes what is open
// and waits a bounded time. Streams being captured get no event (the
// interval is lost and counted). Torch-free: the caller passes the stream.
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

class StageClock {
 public:
  // `window_epoch(device)`: a counter that moves whenever a counter window
  // opens or closes on that GPU (odd while one is open).
  StageClock(CudaDriver* driver, std::function<uint64_t(int)> window_epoch);
  ~StageClock();

  // The calling thread's stage `stage` begins with an op queued on `stream` of `device`.
  void begin(uint32_t stage, int device, void* stream);
  // The calling thread's stage changed: its open interval (if any) ends now.
  void end();
  // Resolves the intervals whose events completed (the writer thread, every cycle).
  void poll();
  // Ends every thread's open interval and resolves all, waiting at most `wait_ms`.
  void finalize(int wait_ms);

  std::map<uint32_t, StageTime> totals();
  std::map<std::string, uint64_t> lost();  // intervals not measured, by reason

 private:
  struct Open;
  struct Closed {
    uint32_t stage;
    int device;
    void* start;
    void* end;
    bool clean;
  };
  Open* open_slot();
  void close(Open& o, bool check_capture);
  void count_lost(const std::string& why);

  CudaDriver* d_;
  std::function<uint64_t(int)> epoch_;
  std::mutex mu_;  // everything below; taken at stage changes, never per op
  std::vector<std::unique_ptr<Open>> slots_;
  std::vector<Closed> pending_;
  std::map<uint32_t, StageTime> totals_;
  std::map<std::string, uint64_t> lost_;
  std::atomic<bool> finalized_{false};
};

}  // namespace lingprobe::gpu
