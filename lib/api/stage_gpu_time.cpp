#include "api/stage_gpu_time.h"

#include <cmath>

#include "capture/stages.h"
#include "gpu/cuda_driver.h"
#include "gpu/stage_clock.h"

namespace lingprobe::api {
namespace {

std::atomic<gpu::StageClock*> g_clock{nullptr};  // the listener's target

void on_stage_change() {
  if (gpu::StageClock* c = g_clock.load(std::memory_order_acquire)) c->end();
}

}  // namespace

StageGpuTime::StageGpuTime(std::function<uint64_t(int)> window_epoch) : epoch_(std::move(window_epoch)) {}

StageGpuTime::~StageGpuTime() {
  if (g_clock.load() == clock_.load()) {
    capture::set_stage_listener(nullptr);
    g_clock.store(nullptr);
  }
}

void StageGpuTime::begin(uint16_t stage, int device, void* stream) {
  std::call_once(created_, [this] {
    gpu::CudaDriver* d = gpu::CudaDriver::get();
    if (!d) return;  // no driver: no GPU time (the op has a CUDA tensor, so this does not happen in practice)
    owned_ = std::make_unique<gpu::StageClock>(gpu::driver_stage_events(d), epoch_);
    clock_.store(owned_.get(), std::memory_order_release);
    g_clock.store(owned_.get(), std::memory_order_release);
    capture::set_stage_listener(&on_stage_change);
  });
  if (gpu::StageClock* c = clock_.load(std::memory_order_acquire)) c->begin(stage, device, stream);
}

void StageGpuTime::after_fork() {
  capture::set_stage_listener(nullptr);  // no GPU call, no lock: the child's stage changes reach nothing
  if (gpu::StageClock* c = clock_.load(std::memory_order_acquire)) c->abandon_after_fork();
}

void StageGpuTime::poll() {
  if (gpu::StageClock* c = clock_.load(std::memory_order_acquire)) c->poll();
}

void StageGpuTime::finalize() {
  if (gpu::StageClock* c = clock_.load(std::memory_order_acquire)) c->finalize(5000);
}

void StageGpuTime::add_counts(format::CountsSnapshot& counts) {
  gpu::StageClock* c = clock_.load(std::memory_order_acquire);
  if (!c) return;
  for (const auto& [id, t] : c->totals()) {
    auto& fields = counts.stage_gpu[capture::stage_name(static_cast<capture::StageId>(id))];
    fields["gpu_us"] = static_cast<uint64_t>(std::llround(t.gpu_us));
    fields["intervals"] = t.intervals;
    fields["clean_gpu_us"] = static_cast<uint64_t>(std::llround(t.clean_gpu_us));
    fields["clean_intervals"] = t.clean_intervals;
  }
  counts.stage_gpu_lost = c->lost();
}

}  // namespace lingprobe::api
