// Inline hardware counters of one operator call's kernels (SPEC section 5):
// CUPTI's range profiler with auto range and kernel replay on the op's
// context, started just before the op and stopped just after it on the
// calling thread; each kernel is one range, replayed once per pass. Launch
// attributes (mangled name, grid, block, registers, shared memory) come from
// the Activity API (CONCURRENT_KERNEL records), enabled only inside the
// window. While the window is open, a driver callback (CUPTI's one
// subscriber, taken for the window only) watches launches: a graph launch on
// the window's thread ends the window at its entry (auto range + kernel
// replay would run only the graph's first node); another thread's kernel or
// graph launch waits there until the window has closed, so it neither runs
// under kernel replay nor pollutes the window. The subscriber is released at
// the window's end, so torch.profiler can take it.
//
// libcupti is loaded at run time (the process's copy, usually torch's), so
// liblingprobe.so has no link-time CUDA dependency. The host side (config
// image, passes) needs no GPU: it runs in CI. No torch.
#pragma once

#include "format/status.h"
#include "gpu/window_verdict.h"
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace lingprobe::gpu {

// What to measure on which chip: the config image, built once.
struct MetricSet {
  std::string chip;
  std::vector<std::string> metrics;
  std::vector<uint8_t> config_image;
  size_t passes = 0;
};

// The eight counter metrics of ../shared/seeds/capability_report.seed.json.
const std::vector<std::string>& seed_metrics();

class Cupti {
 public:
  // The process's CUPTI, loaded on first call; nullptr (and `error`) when it cannot be.
  static Cupti* get(std::string* error = nullptr);

  // Host side (no device needed): the config image and pass count of
  // `metrics` on `chip` ("GH100"); `availability` may be empty.
  // Each step's Status: kBusy while another session holds the counter
  // hardware (HARDWARE_BUSY: try again later), kUnsupported when counters can
  // never be read here (privileges, an unsupported device), else kFailed.
  format::Status build_metric_set(const std::string& chip, const std::vector<std::string>& metrics,
                                  const std::vector<uint8_t>& availability, MetricSet& out);
  // Target side: the chip of CUDA device `device`, and its counter
  // availability image on context `ctx` (before any window).
  format::Status device_chip(int device, std::string& chip);
  format::Status counter_availability(void* ctx, std::vector<uint8_t>& image);

  // Opens a window on `ctx` (the op's device's primary context) before the
  // op; kernels on `stream` (a CUstream) are the op's. "" or why no window
  // opened (then end_window must not be called). One window at a time per
  // process. While it is open, CUPTI's callback subscriber holds other
  // threads' kernel and graph launches at their entry until it closes; when
  // another tool holds the subscriber the window is refused (kHeld) unless
  // `unguarded`. Otherwise kBusy, kUnsupported or kFailed, as above.
  format::Status begin_window(void* ctx, void* stream, const MetricSet& set, bool unguarded);
  // Closes it after the op: stops, decodes, evaluates every range, collects
  // the launches. `synchronize` makes the context idle first (the caller's
  // CUDA driver call, e.g. cuCtxSynchronize).
  WindowResult end_window(const std::function<bool()>& synchronize);
  // A timed call on the calling thread (Activity alone: no range profiler,
  // nothing replayed, no other thread's launch held): the durations of the
  // kernels this thread launches (graphs included) until stop_timing, as
  // torch.profiler's trace times them. Several calls may be pending (stopped,
  // their records not yet read) and share one session; one is open at a
  // time, on one context, and none while a counter window is open (kFailed).
  // kHeld when another tool holds CUPTI's subscriber (the callback names the
  // thread's launches).
  format::Status begin_timing(void* ctx);
  // At the op's end, on its thread: no later launch of it is named. Returns
  // the call's launches (correlation ids) for end_timing. Nothing waits: its
  // kernels may still run.
  std::vector<uint32_t> stop_timing();
  // Then, on any thread (the writer's): `ended` (waits until the op's
  // kernels ran: the caller polls an event on its stream), then the records
  // of the launches `own`. The last pending call ends the session (the
  // callback unsubscribed, the kind left armed: disarm_timing_activity).
  TimingResult end_timing(const std::vector<uint32_t>& own, const std::function<bool()>& ended);
  // Between sessions the kernel kind stays enabled ("armed", cupti_window.h); this disables it and hands CUPTI's
  // buffers back (their records unread) when no session is open and it has been armed at least `idle_for`. Called
  // with no wait before a counter window, at a profiler's hold (before another client registers its buffers) and at
  // the windows' end; after a second without one from the writer's poll. Nothing when CUPTI was never loaded. Any
  // thread.
  static void disarm_timing_activity(std::chrono::steady_clock::duration idle_for = {});
  // Whether a torch.profiler-like tool holds CUPTI's subscriber right now.
  bool subscriber_held_elsewhere();

  // CUPTI's API version (cuptiGetVersion: 130000-style or 21 etc.), -1 if unknown.
  int version();

  std::string describe(int result) const;
  struct Api;
  // Tests: a Cupti over `api` (fakes of CUPTI's functions; no library
  // loaded), through which the window's buffer callbacks read too, until the
  // next with_api. Never freed.
  static Cupti* with_api(Api* api);

 private:
  Cupti() = default;
  bool load(std::string& error);
  void evaluate_ranges(const std::vector<uint8_t>& counter_data, const std::vector<std::string>& metrics,
                       WindowResult& res);
  format::Status start_timing_session(void* ctx);  // cupti_timing.cpp, under the window's session_mu
  void end_timing_session();
  void flush_records_of(const std::unordered_set<uint32_t>& wanted, TimingResult& res);
  Api* api_ = nullptr;
  std::mutex host_mu_;
  void* host_object_ = nullptr;  // kept for evaluation; rebuilt when the metric set changes
  std::string host_chip_;
  std::vector<std::string> host_metrics_;
};

}  // namespace lingprobe::gpu
