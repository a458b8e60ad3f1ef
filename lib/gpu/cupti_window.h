// Internal to gpu's CUPTI window files (cupti_profiler.cpp: counters;
// cupti_timing.cpp: kernel durations): the process's one window, the
// Activity buffers CUPTI fills during it, and the driver callback that
// watches launches while it is open. No torch.
#pragma once

#include "gpu/cupti_api.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

namespace lingprobe::gpu {

// The one window of the process (kernel replay serialises the device
// anyway): a counter window (cupti_profiler.cpp) or a session of timed calls
// (cupti_timing.cpp), never both at once.
struct Window {
  std::mutex mu;  // records, open
  bool open = false;
  bool collecting = false;
  CUcontext ctx = nullptr;
  uint32_t context_id = 0, stream_id = 0;
  CUpti_RangeProfiler_Object* object = nullptr;
  std::vector<uint8_t> counter_data;
  const MetricSet* set = nullptr;
  CUpti_SubscriberHandle subscriber = nullptr;
  std::mutex stop_mu;  // one RangeStop: the window's end or a graph launch's entry on the window's thread
  std::atomic<bool> stopped{false}, graph_launched{false};
  std::atomic<std::thread::id> owner;  // the thread that opened the window (Start and Stop belong to it)
  // Other threads' launches wait at their entry until the window has closed.
  // The generation counts closes: a waiter woken late, after the next window
  // opened, still sees that its window closed.
  std::mutex closed_mu;
  std::condition_variable closed_cv;
  bool closed = true;
  uint64_t generation = 0;
  std::atomic<uint32_t> launches_held{0}, hold_timeouts{0};
  std::vector<KernelLaunch> records;
  // Timed calls: Activity alone (no range profiler, no launch guard). The
  // session (the kind enabled, the callback subscribed) lasts while any
  // timed call is pending: begun, and not yet ended on the writer's thread.
  // One call at a time is open (its thread is `owner`); the correlation ids
  // of the owner's launches name its kernels, and only the pending calls'
  // records are kept.
  std::atomic<bool> timing{false};
  std::mutex session_mu;           // the session's start and end, and the count below
  uint32_t timing_pending = 0;     // under session_mu
  bool timing_taken_over = false;  // under session_mu: a call had launches and no records (another client's buffers)
  // Between sessions the kernel kind stays enabled, its records unread ("armed", under session_mu): enabling it makes
  // the process's next launch take ~200 us (bench/cupti_session_probe.cu), which the op of a call starting a session
  // paid before its own kernels. Cupti::disarm_timing_activity disables it.
  bool activity_armed = false;
  std::chrono::steady_clock::time_point armed_since;
  std::mutex correlations_mu;                 // not mu: a buffer being read must not hold a launch
  std::vector<uint32_t> own_correlations;     // under correlations_mu: the open call's launches
  std::unordered_set<uint32_t> noted;         // under correlations_mu: every pending call's launches
  std::unordered_set<uint32_t> noted_graphs;  // under correlations_mu: those of them that launched a graph
  size_t dropped_records = 0;
};

Window& window();

// The process's CUPTI functions, set once Cupti::get loaded them.
extern Cupti::Api* g_api;

// Activity buffer callbacks (process-global: registered again at each window).
void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records);
void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid);

// The driver launches the callback watches (runtime launches reach them too).
extern const CUpti_CallbackId kLaunchCallbacks[8];
// While a window is open: a counter window's launch guard (see
// cupti_profiler.h), or a timing window's record of its own launches.
void CUPTIAPI on_driver_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data);
// Other threads' launches held by a counter window go on.
void release_held_launches(Window& w);

}  // namespace lingprobe::gpu
