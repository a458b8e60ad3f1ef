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
  double callbacks(uint32_t on) {
    const auto t = std::chrono::steady_clock::now();
    for (CUpti_CallbackId id : kLaunches) cuptiEnableCallback(on, sub, CUPTI_CB_DOMAIN_DRIVER_API, id);
    return us_since(t);
  }
  double subscribe() {
    const auto t = std::chrono::steady_clock::now();
    cuptiSubscribe(&sub, on_callback, nullptr);
    callbacks(1);
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
  std::printf("| before the launch | the step's own us (median) | the launch's host us (median of %d) |\n", kRepeats);
  std::printf("|---|---|---|\n");
  // kRepeats times: `step` (its own time, or a negative number for none), a launch timed, then `after`.
  auto measure = [&](const char* what, auto step, auto after) {
    std::vector<double> steps, launches;
    for (int i = 0; i < kRepeats; ++i) {
      if (const double us = step(); us >= 0) steps.push_back(us);
      launches.push_back(launch_us());
      after();
    }
    row(what, steps, launches);
  };
  auto none = [] { return -1.0; };
  auto nothing = [] {};
  measure("nothing", none, nothing);
  measure(
      "subscribed, launch callbacks enabled (then unsubscribed)", [&] { return p.subscribe(); },
      [&] { p.unsubscribe(); });
  measure("Activity CONCURRENT_KERNEL enabled (then disabled)", Probe::activity_on, Probe::activity_off);
  measure(
      "both: a timed call's session start", [&] { return p.subscribe() + Probe::activity_on(); },
      [&] { Probe::activity_off(), p.unsubscribe(); });
  p.subscribe();
  p.callbacks(0);
  measure(
      "subscriber kept, launch callbacks enabled (then disabled)", [&] { return p.callbacks(1); },
      [&] { p.callbacks(0); });
  measure("subscriber kept (callbacks off), Activity enabled (then disabled)", Probe::activity_on, Probe::activity_off);
  p.callbacks(1);
  Probe::activity_on();
  measure("both left on (the steady state of an open session)", none, nothing);
  Probe::activity_off();
  p.unsubscribe();
  measure("nothing, after", none, nothing);
  return 0;
}

#ifndef PROBE_LIBRARY
int main() { return run_probe(); }
#endif
