// GPU time per stage for the capability report's denominator: the recorder's
// StageTiming (first CUDA op after a thread's stage change) and the stages'
// listener (the change itself) joined to lib/gpu's StageClock, created on the
// first op with a CUDA tensor (no CUDA work before the job does some). Its
// figures go into every counts record: "stage_gpu" by stage name and
// "stage_gpu_lost" by reason. One per process (the stage listener is global).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "capture/device_access.h"
#include "format/records.h"

namespace lingprobe::gpu {
class StageClock;
}

namespace lingprobe::api {

class StageGpuTime : public capture::StageTiming {
 public:
  // `window_epoch(device)`: moves whenever a counter window opens or closes on that GPU.
  explicit StageGpuTime(std::function<uint64_t(int)> window_epoch);
  ~StageGpuTime() override;

  void begin(uint16_t stage, int device, void* stream) override;  // the op's thread
  void poll();                                                    // the writer thread
  void finalize();                                                // ends open intervals, waits at most 5 s
  void after_fork();                                              // in a forked child: stops, touching no GPU
  void add_counts(format::CountsSnapshot& counts);

 private:
  std::function<uint64_t(int)> epoch_;
  std::once_flag created_;
  std::atomic<gpu::StageClock*> clock_{nullptr};
  std::unique_ptr<gpu::StageClock> owned_;
};

}  // namespace lingprobe::api
