#include "gpu/cupti_window.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <unordered_set>

namespace lingprobe::gpu {

Window& window() {
  static Window* w = new Window;  // used from CUPTI's threads: never destroyed
  return *w;
}

Cupti::Api* g_api = nullptr;

namespace {

constexpr size_t kActivityBuffer = 4u << 20;

// The activity buffers this library handed to CUPTI. The callbacks are
// process-global: a buffer another tool (Kineto) requested before our
// registration may complete here; it is not ours to read or free.
std::mutex g_buffers_mu;
std::unordered_set<uint8_t*>& our_buffers() {
  static auto* b = new std::unordered_set<uint8_t*>;  // used from CUPTI's threads: never destroyed
  return *b;
}

KernelLaunch launch_of(const CUpti_ActivityKernel10& k) {
  KernelLaunch l;
  l.mangled = k.name ? k.name : "";
  l.correlation = k.correlationId;
  l.stream = k.streamId;
  l.device = k.deviceId;
  l.context = k.contextId;
  l.graph = k.graphId;
  l.grid[0] = k.gridX, l.grid[1] = k.gridY, l.grid[2] = k.gridZ;
  l.block[0] = k.blockX, l.block[1] = k.blockY, l.block[2] = k.blockZ;
  l.registers = k.registersPerThread;
  l.static_shared = k.staticSharedMemory;
  l.dynamic_shared = k.dynamicSharedMemory;
  l.device_launched = k.isDeviceLaunched != 0;
  l.start_ns = k.start;
  l.end_ns = k.end;
  return l;
}

}  // namespace

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kActivityBuffer));
  *size = *buffer ? kActivityBuffer : 0;
  *max_records = 0;
  if (*buffer) {
    std::lock_guard<std::mutex> lock(g_buffers_mu);
    our_buffers().insert(*buffer);
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(g_buffers_mu);
    if (!our_buffers().erase(buffer)) return;  // another tool's: leaked rather than freed twice
  }
  Window& w = window();
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(w.mu);
  while (valid && g_api && g_api->ActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (!w.collecting) continue;
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto& kernel = *reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    if (w.timing.load()) {  // timed calls: only the pending calls' kernels (the session sees every launch)
      std::lock_guard<std::mutex> noted(w.correlations_mu);
      if (!w.noted.count(kernel.correlationId)) continue;
    }
    w.records.push_back(launch_of(kernel));
  }
  std::free(buffer);
}

// Launches while a counter window is open. A graph launch on the window's own
// thread ends the window here, at its entry (auto range + kernel replay would
// run only the graph's first node; Start and Stop stay on one thread, between
// launches). Another thread's kernel or graph launch waits at its entry until
// the window has closed: under kernel replay it would be replayed inside the
// window (and a RangeStop from that thread, tried first, crashed the process
// on the H200). After kHoldSeconds it proceeds and the window is abandoned.
// While timed calls are pending, the open call's thread's launches (graphs
// too) are noted by correlation id and nothing is held.

void release_held_launches(Window& w) {
  {
    std::lock_guard<std::mutex> lock(w.closed_mu);
    if (!w.closed) ++w.generation;
    w.closed = true;
  }
  w.closed_cv.notify_all();
}

// The driver launches the guard watches (runtime launches reach them too); the graph launches first.
const CUpti_CallbackId kLaunchCallbacks[8] = {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
                                              CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
                                              CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
                                              CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
                                              CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
                                              CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
                                              CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
                                              CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz};

namespace {

constexpr size_t kGraphLaunchCallbacks = 2;

bool is_launch(CUpti_CallbackId cbid, bool& graph) {
  const auto* end = std::end(kLaunchCallbacks);
  const auto* it = std::find(std::begin(kLaunchCallbacks), end, cbid);
  graph = it - std::begin(kLaunchCallbacks) < static_cast<std::ptrdiff_t>(kGraphLaunchCallbacks);
  return it != end;
}

}  // namespace

void CUPTIAPI on_driver_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  bool graph = false;
  if (domain != CUPTI_CB_DOMAIN_DRIVER_API || !is_launch(cbid, graph)) return;
  const auto* cb = static_cast<const CUpti_CallbackData*>(data);
  if (cb->callbackSite != CUPTI_API_ENTER) return;
  Window& w = window();
  const bool own_thread = std::this_thread::get_id() == w.owner.load();
  if (w.timing.load()) {
    if (!own_thread) return;
    std::lock_guard<std::mutex> lock(w.correlations_mu);  // not mu: a buffer being read must not hold the launch
    w.own_correlations.push_back(cb->correlationId);
    w.noted.insert(cb->correlationId);
    if (graph) w.noted_graphs.insert(cb->correlationId);  // many kernel records under one id
    return;
  }
  if (!own_thread) {
    std::unique_lock<std::mutex> lock(w.closed_mu);
    if (w.closed) return;
    const uint64_t generation = w.generation;
    w.launches_held.fetch_add(1);
    if (!w.closed_cv.wait_for(lock, std::chrono::seconds(kHoldSeconds), [&] { return w.generation != generation; }))
      w.hold_timeouts.fetch_add(1);
    return;
  }
  if (!graph) return;  // the window's own kernels
  std::lock_guard<std::mutex> lock(w.stop_mu);
  if (!w.object || w.stopped.exchange(true)) return;
  w.graph_launched.store(true);
  CUpti_RangeProfiler_Stop_Params stop{};
  stop.structSize = CUpti_RangeProfiler_Stop_Params_STRUCT_SIZE;
  stop.pRangeProfilerObject = w.object;
  g_api->RangeStop(&stop);
}

}  // namespace lingprobe::gpu
