// What a timed call's session start costs the op's thread, step by step (issue 26's fidelity gate).
//
//   nvcc -O2 -std=c++17 bench/cupti_session_probe.cu -lcuda -lcupti -o /tmp/probe && /tmp/probe
//   (bench/cupti_session_probe.sh runs it alone and inside a torch process)
//
// lingprobe's timed-call session (lib/gpu/cupti_timing.cpp) subscribes CUPTI's callback, enables the launch
// callbacks, registers Activity's buffers and enables CONCURRENT_KERNEL. In the gate's program the op that starts
// a session spends ~430 us more in its own launch than in the unprofiled trace (bench/timed_call_split.py). This
// probe times one kernel launch (host time of cudaLaunchKernel) right after each step alone, after both, and with
// each left on (the steady state), each on an idle GPU, 20 times, and prints the medians.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void spin(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

namespace {

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}
void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 1 << 20;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}
void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t) { free(buffer); }

const CUpti_CallbackId kLaunches[] = {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
                                      CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
                                      CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch};

double us_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t).count();
}

struct Probe {
  CUpti_SubscriberHandle sub = nullptr;
  double subscribe() {
    const auto t = std::chrono::steady_clock::now();
    cuptiSubscribe(&sub, on_callback, nullptr);
    for (CUpti_CallbackId id : kLaunches) cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, id);
    return us_since(t);
  }
  void unsubscribe() {
    cuptiUnsubscribe(sub);
    sub = nullptr;
  }
  static double activity_on() {
    const auto t = std::chrono::steady_clock::now();
    cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    return us_since(t);
  }
  static void activity_off() {
    cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
};

double launch_us() {
  const auto t = std::chrono::steady_clock::now();
  spin<<<1, 32>>>(100000);
  const double us = us_since(t);
  cudaDeviceSynchronize();
  return us;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void row(const char* what, const std::vector<double>& step, const std::vector<double>& launch) {
  char own[32] = "-";
  if (!step.empty()) std::snprintf(own, sizeof own, "%.1f", median(step));
  std::printf("| %s | %s | %.1f |\n", what, own, median(launch));
}

}  // namespace

// Also built as a library (-shared -Xcompiler -fPIC) and called through ctypes after torch ran its kernels, so that
// CUPTI's steps meet a process with torch's modules loaded.
extern "C" int run_probe() {
  cudaFree(nullptr);
  for (int i = 0; i < 5; ++i) launch_us();  // the module loaded, the launch path warm
  constexpr int kRepeats = 20;
  Probe p;
  std::vector<double> step, launch, step2;
  std::printf(
      "| before the launch | the step's own us (median) | the launch's host us (median of %d) |\n|---|---|---|\n",
      kRepeats);
  for (int i = 0; i < kRepeats; ++i) launch.push_back(launch_us());
  row("nothing", {}, launch);
  launch.clear();
  for (int i = 0; i < kRepeats; ++i) {
    step.push_back(p.subscribe());
    launch.push_back(launch_us());
    p.unsubscribe();
  }
  row("subscribed, launch callbacks enabled (then unsubscribed)", step, launch);
  step.clear(), launch.clear();
  for (int i = 0; i < kRepeats; ++i) {
    step.push_back(Probe::activity_on());
    launch.push_back(launch_us());
    Probe::activity_off();
  }
  row("Activity CONCURRENT_KERNEL enabled (then disabled)", step, launch);
  step.clear(), launch.clear();
  for (int i = 0; i < kRepeats; ++i) {
    step.push_back(p.subscribe() + Probe::activity_on());
    launch.push_back(launch_us());
    Probe::activity_off();
    p.unsubscribe();
  }
  row("both: a timed call's session start", step, launch);
  step.clear(), launch.clear();
  p.subscribe();
  for (int i = 0; i < kRepeats; ++i) {
    const auto t = std::chrono::steady_clock::now();
    for (CUpti_CallbackId id : kLaunches) cuptiEnableCallback(1, p.sub, CUPTI_CB_DOMAIN_DRIVER_API, id);
    step.push_back(us_since(t));
    launch.push_back(launch_us());
    for (CUpti_CallbackId id : kLaunches) cuptiEnableCallback(0, p.sub, CUPTI_CB_DOMAIN_DRIVER_API, id);
  }
  row("subscriber kept, launch callbacks enabled (then disabled)", step, launch);
  step.clear(), launch.clear();
  for (int i = 0; i < kRepeats; ++i) {
    step.push_back(Probe::activity_on());
    launch.push_back(launch_us());
    Probe::activity_off();
  }
  row("subscriber kept (callbacks off), Activity enabled (then disabled)", step, launch);
  step.clear(), launch.clear();
  for (CUpti_CallbackId id : kLaunches) cuptiEnableCallback(1, p.sub, CUPTI_CB_DOMAIN_DRIVER_API, id);
  Probe::activity_on();
  for (int i = 0; i < kRepeats; ++i) launch.push_back(launch_us());
  row("both left on (the steady state of an open session)", {}, launch);
  Probe::activity_off();
  p.unsubscribe();
  launch.clear();
  for (int i = 0; i < kRepeats; ++i) launch.push_back(launch_us());
  row("nothing, after", {}, launch);
  return 0;
}

#ifndef PROBE_LIBRARY
int main() { return run_probe(); }
#endif
