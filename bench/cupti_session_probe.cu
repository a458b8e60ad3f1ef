// What a timed call's session start costs the op's thread, step by step (issue 26's fidelity gate).
//
//   nvcc -O2 -std=c++17 bench/cupti_session_probe.cu -lcuda -lcupti -o /tmp/probe && /tmp/probe
//   (bench/cupti_session_probe.sh runs it alone and inside a torch process)
//
// lingprobe's timed-call session (lib/gpu/cupti_timing.cpp) subscribes CUPTI's callback, enables the launch
// callbacks, registers Activity's buffers and enables CONCURRENT_KERNEL. In the gate's program the op that starts
// a session spends ~430 us more in its own launch than in the unprofiled trace (bench/timed_call_split.py). This
// probe times one kernel launch (host time of cudaLaunchKernel) right after each step alone, after both, and with
// each left on (the steady state), each on an idle GPU, 20 times, and prints the medians. Then two questions about
// the writer's side of a timed call (Cupti::flush_records_of polls cuptiActivityFlushAll(0) every 200 us until the
// call's records arrive): does an unforced flush hand over a finished kernel's record while a later kernel still
// runs, and does that polling slow another thread's launches during a session?
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
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
std::atomic<int> g_kernel_records{0};  // CONCURRENT_KERNEL records handed over so far
void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  while (valid && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS)
    if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) g_kernel_records.fetch_add(1);
  free(buffer);
}

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

// A 10 us kernel, then a 20 ms one, Activity on: once the first has ended, cuptiActivityFlushAll(0) every 200 us
// (as the writer polls) until a record arrives. Does it arrive while the second kernel still runs?
void unforced_flush_while_a_later_kernel_runs() {
  std::printf(
      "\n| unforced flushes, a finished kernel then a running one | first record after, us | flushes | the "
      "later kernel still running then |\n|---|---|---|---|\n");
  cudaEvent_t first_done, second_done;
  cudaEventCreateWithFlags(&first_done, cudaEventDisableTiming);
  cudaEventCreateWithFlags(&second_done, cudaEventDisableTiming);
  for (int i = 0; i < 5; ++i) {
    Probe::activity_on();
    spin<<<1, 32>>>(20000);
    cudaEventRecord(first_done);
    spin<<<1, 32>>>(40000000);
    cudaEventRecord(second_done);
    cudaEventSynchronize(first_done);
    g_kernel_records = 0;
    const auto t = std::chrono::steady_clock::now();
    int flushes = 0;
    while (g_kernel_records.load() == 0 && us_since(t) < 100000) {
      cuptiActivityFlushAll(0);
      ++flushes;
      if (g_kernel_records.load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    const bool running = cudaEventQuery(second_done) == cudaErrorNotReady;
    std::printf("| run %d | %.1f | %d | %s |\n", i + 1, us_since(t), flushes, running ? "yes" : "no");
    cudaDeviceSynchronize();
    Probe::activity_off();
  }
}

// An open session's steady state (subscribed, launch callbacks and Activity on): 400 launches of a ~20 us kernel
// back to back, each launch's host time, without and with another thread calling cuptiActivityFlushAll(0) every
// 200 us meanwhile (the flushes' own time beside).
void launches_beside_flush_polling(Probe& p) {
  std::printf(
      "\n| 400 launches back to back, session open | launch us median | p90 | max | sum, ms | the poller's "
      "flush us, median / max (count) |\n|---|---|---|---|---|---|\n");
  p.subscribe();
  Probe::activity_on();
  for (int polling = 0; polling < 2; ++polling)
    for (int round = 0; round < 2; ++round) {
      std::atomic<bool> stop{false};
      std::vector<double> flushes;
      std::thread poller([&] {
        while (polling && !stop.load()) {
          const auto t = std::chrono::steady_clock::now();
          cuptiActivityFlushAll(0);
          flushes.push_back(us_since(t));
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
      });
      std::vector<double> launches;
      for (int i = 0; i < 400; ++i) {
        const auto t = std::chrono::steady_clock::now();
        spin<<<1, 32>>>(40000);
        launches.push_back(us_since(t));
      }
      cudaDeviceSynchronize();
      stop = true;
      poller.join();
      std::vector<double> sorted = launches;
      std::sort(sorted.begin(), sorted.end());
      double sum = 0;
      for (double us : launches) sum += us;
      char flush[64] = "-";
      if (!flushes.empty())
        std::snprintf(flush, sizeof flush, "%.1f / %.1f (%zu)", median(flushes),
                      *std::max_element(flushes.begin(), flushes.end()), flushes.size());
      std::printf("| %s, round %d | %.1f | %.1f | %.1f | %.2f | %s |\n", polling ? "polled every 200 us" : "no poller",
                  round + 1, sorted[sorted.size() / 2], sorted[sorted.size() * 9 / 10], sorted.back(), sum / 1e3,
                  flush);
    }
  Probe::activity_off();
  p.unsubscribe();
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
  unforced_flush_while_a_later_kernel_runs();
  launches_beside_flush_polling(p);
  return 0;
}

#ifndef PROBE_LIBRARY
int main() { return run_probe(); }
#endif
