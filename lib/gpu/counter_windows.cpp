#include "gpu/counter_windows.h"

#include "gpu/counter_windows_state.h"

#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>

#include "format/canonical_json.h"
#include "gpu/cuda_driver.h"
#ifdef LINGPROBE_HAVE_CUPTI
#include "gpu/cupti_profiler.h"
#include "gpu/nvml_guard.h"
#endif

namespace lingprobe::gpu {
namespace {

// hold_counters' state: the holds, and whether a window is opening or open.
std::mutex g_hold_mu;
std::condition_variable g_hold_cv;
int g_holds = 0;
bool g_window_busy = false;

}  // namespace

WindowRefusal WindowSlot::acquire() {
  std::lock_guard<std::mutex> lock(g_hold_mu);
  if (g_holds > 0) return WindowRefusal::ProfilerActive;
  if (g_window_busy) return WindowRefusal::WindowBusy;
  g_window_busy = owned_ = true;
  return WindowRefusal::None;
}

void WindowSlot::release() {
  {
    std::lock_guard<std::mutex> lock(g_hold_mu);
    g_window_busy = false;
  }
  g_hold_cv.notify_all();
}

bool WindowSlot::held() {
  std::lock_guard<std::mutex> lock(g_hold_mu);
  return g_holds > 0;
}

WindowSlot::~WindowSlot() {
  if (owned_) release();
}

namespace {

[[maybe_unused]] std::string demangle(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : mangled;
  std::free(d);
  return out;
}

// The physical GPU index behind a CUDA ordinal (CUDA_VISIBLE_DEVICES), as text.
[[maybe_unused]] std::string physical_index(int ordinal) {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!v || !*v) return std::to_string(ordinal);
  std::string list = v;
  size_t pos = 0;
  for (int i = 0; i <= ordinal; ++i) {
    const size_t end = list.find(',', pos);
    const std::string item = list.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    if (i == ordinal) return item;
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  return std::to_string(ordinal);
}

// The lock file's name part of CUDA device `device`.
[[maybe_unused]] std::string lock_name(CudaDriver* d, int device) {
  std::string uuid = d->device_uuid(device);
  return uuid.empty() ? "device" + std::to_string(device) : uuid;
}

}  // namespace

#ifdef LINGPROBE_HAVE_CUPTI
namespace {

format::JsonValue probe_record(int device, const format::Status& probe, const std::string& chip, size_t passes) {
  format::JsonValue r = format::JsonValue::object();
  r.set("kind", format::JsonValue::string("counters_probe"));
  r.set("device", format::JsonValue::integer(device));
  r.set("available", format::JsonValue::boolean(probe.ok()));
  r.set("chip", format::JsonValue::string(chip));
  r.set("passes", format::JsonValue::integer(static_cast<int64_t>(passes)));
  r.set("reason", format::JsonValue::string(probe.message()));
  return r;
}

}  // namespace

// Once per process: CUPTI, the chip, the counter availability, the config image. false while the counter hardware
// is busy (probed again at the next window) or when counters cannot be read here (`unavailable` says why).
bool CounterWindows::State::prepare(CudaDriver* d, int device, void* ctx) {
  std::string err;
  cupti = Cupti::get(&err);
  format::Status probe = cupti ? format::Status::Ok() : format::Status(format::StatusCode::kUnsupported, err);
  std::string chip;
  std::vector<uint8_t> availability;
  if (probe.ok()) probe = cupti->device_chip(device, chip);
  if (probe.ok()) probe = cupti->counter_availability(ctx, availability);
  if (probe.ok()) probe = cupti->build_metric_set(chip, options.metrics, availability, set);
  if (const char* inj = std::getenv("CUDA_INJECTION64_PATH"); probe.ok() && inj && *inj)
    probe = {format::StatusCode::kHeld, std::string("held by another tool (CUDA_INJECTION64_PATH=") + inj + ")"};
  if (probe.code() == format::StatusCode::kBusy) return false;  // transient: probed again at the next window
  if (options.on_probe) options.on_probe(format::canonical_json(probe_record(device, probe, chip, set.passes)) + "\n");
  if (!probe.ok()) {
    unavailable = probe.message();
    return false;
  }
  identity = format::JsonValue::object();
  identity.set("gpu_name", format::JsonValue::string(d->device_name(device)));
  identity.set("gpu_uuid", format::JsonValue::string(d->device_uuid(device)));
  identity.set("chip", format::JsonValue::string(chip));
  identity.set("compute_capability", format::JsonValue::string(d->compute_capability(device)));
  identity.set("driver_version", format::JsonValue::integer(d->driver_version()));
  identity.set("driver", format::JsonValue::string(NvmlGuard::driver_version()));
  identity.set("cuda_runtime_version", format::JsonValue::integer(CudaDriver::runtime_version()));
  identity.set("cupti_version", format::JsonValue::integer(cupti->version()));
  identity.set("sm_clock_khz", format::JsonValue::integer(d->clock_rate_khz(device)));
  format::JsonValue m = format::JsonValue::array();
  for (const auto& x : set.metrics) m.push_back(format::JsonValue::string(x));
  identity.set("metrics", std::move(m));
  set_ready = true;
  return true;
}

// A launch's attributes as the profile files hold them (no values yet).
format::ProfiledKernel profiled_kernel(const KernelLaunch& k, int device) {
  format::ProfiledKernel pk;
  pk.mangled_name = k.mangled;
  pk.name = demangle(k.mangled);
  pk.device = device;
  for (int j = 0; j < 3; ++j) pk.grid[j] = k.grid[j], pk.block[j] = k.block[j];
  pk.registers_per_thread = k.registers;
  pk.shared_bytes_per_block = static_cast<int64_t>(k.static_shared) + k.dynamic_shared + 1024;
  return pk;
}

WindowRefusal refusal_of(const format::Status& s) {
  switch (s.code()) {
    case format::StatusCode::kUnsupported: return WindowRefusal::Unavailable;
    case format::StatusCode::kBusy: return WindowRefusal::HardwareBusy;
    case format::StatusCode::kHeld: return WindowRefusal::SubscriberHeld;
    default: return WindowRefusal::NotOpened;
  }
}

namespace {

class Window : public OpenCounterWindow {
 public:
  Window(CounterWindows::State* owner, CudaDriver* d, int device, void* ctx, std::chrono::steady_clock::time_point t0,
         std::chrono::steady_clock::time_point t_locked, int lock_fd, std::unique_ptr<NvmlGuard> guard)
      : owner_(owner),
        d_(d),
        device_(device),
        ctx_(ctx),
        t0_(t0),
        t_locked_(t_locked),
        lock_fd_(lock_fd),
        guard_(std::move(guard)) {}
  // A window that was never closed (its op threw past the capture) still
  // releases the GPU's lock, so the other ranks are not blocked by it.
  ~Window() override {
    if (!closed_) try {
        owner_->cupti->end_window([this] { return d_->synchronize(ctx_); });
        owner_->settle.counter_call_ended(device_, std::chrono::steady_clock::now());
      } catch (...) {  // nothing escapes into the op's unwinding
      }
    owner_->lock.unlock(lock_fd_);
    if (!closed_) {
      owner_->local_epoch.fetch_add(1);
      owner_->add_stall(std::chrono::steady_clock::now() - t0_, true);
      WindowSlot::release();
    }
  }
  format::ProfileData close() override {
    WindowResult w = owner_->cupti->end_window([this] { return d_->synchronize(ctx_); });
    owner_->settle.counter_call_ended(device_, std::chrono::steady_clock::now());  // again at the call's end
    closed_ = true;
    owner_->lock.unlock(lock_fd_);
    owner_->local_epoch.fetch_add(1);
    lock_fd_ = -1;
    WindowSlot::release();
    format::JsonValue guard = guard_ ? guard_->finish() : format::JsonValue::null();
    format::ProfileData p = profile_of(w);
    const auto t1 = std::chrono::steady_clock::now();
    p.window_seconds = std::chrono::duration<double>(t1 - t0_).count();
    p.lock_wait_seconds = std::chrono::duration<double>(t_locked_ - t0_).count();
    owner_->add_stall(t1 - t0_, true);
    p.identity = owner_->identity;
    if (const format::JsonValue* c = guard.find("clocks_mhz_before")) p.identity.set("clocks_mhz", *c);
    if (const format::JsonValue* v = guard.find("verdict")) p.identity.set("gpu_shared", *v);
    p.guard = std::move(guard);
    p.identity.set("cuda_device", format::JsonValue::string(std::to_string(device_)));
    p.identity.set("allocated", format::JsonValue::string(physical_index(device_)));
    p.identity.set("launch_guard", format::JsonValue::boolean(w.launch_guard));
    p.identity.set("ranges", format::JsonValue::integer(static_cast<int64_t>(w.ranges)));
    p.identity.set("launches_held", format::JsonValue::integer(w.launches_held));
    p.log = "ranges " + std::to_string(w.ranges) + ", kernels " + std::to_string(w.kernels.size()) + ", passes " +
            std::to_string(p.passes) + ", launch guard " +
            (w.launch_guard ? "armed" : "not armed (subscriber held, PROFILE_UNGUARDED)") +
            ", other threads' launches held until the window closed " + std::to_string(w.launches_held) + "\n";
    return p;
  }

 private:
  // The window's kernels and their values, as the profile files hold them.
  format::ProfileData profile_of(const WindowResult& w) const {
    format::ProfileData p;
    p.status = status_name(w.status);
    p.reason = w.reason;
    p.metrics = owner_->set.metrics;
    p.passes = owner_->set.passes;
    p.compute_capability = d_->compute_capability(device_);
    p.foreign_kernels = w.foreign;
    for (size_t i = 0; i < w.kernels.size(); ++i) {
      p.kernels.push_back(profiled_kernel(w.kernels[i], device_));
      if (i < w.values.size()) p.kernels.back().values = w.values[i];
    }
    return p;
  }

  CounterWindows::State* owner_;
  CudaDriver* d_;
  int device_;
  void* ctx_;
  std::chrono::steady_clock::time_point t0_, t_locked_;
  int lock_fd_;
  std::unique_ptr<NvmlGuard> guard_;
  bool closed_ = false;
};

}  // namespace
#endif

CounterWindows::CounterWindows(Options options) : s_(std::make_unique<State>(std::move(options))) {}
CounterWindows::~CounterWindows() {
#ifdef LINGPROBE_HAVE_CUPTI
  Cupti::disarm_timing_activity();
#endif
}

void CounterWindows::poll() {
#ifdef LINGPROBE_HAVE_CUPTI
  constexpr auto kArmedIdle = std::chrono::seconds(1);  // a decode step or a forward apart: their sessions still join
  Cupti::disarm_timing_activity(kArmedIdle);
#endif
}

#ifdef LINGPROBE_HAVE_CUPTI
// The steps every window takes before it begins: no hold and no other window
// (the slot), CUPTI's subscriber free, the driver, the GPU's counter lock
// (bounded: another process of the launch may be profiling this GPU), and
// the probe under that lock. False with the refusal; the slot and the lock
// are released by the caller's failure path (the slot's destructor, unlock).
bool CounterWindows::State::claim_gpu(int device, WindowSlot& slot, Claimed& c, WindowRefusal& refusal,
                                      std::string& detail) {
  if (!unavailable.empty()) return refusal = WindowRefusal::Unavailable, false;
  // torch.profiler starting or running, or a window open
  if (refusal = slot.acquire(); refusal != WindowRefusal::None) return false;
  // Kineto keeps CUPTI's subscriber once it has run: refused before the GPU lock and the NVML thread.
  if (set_ready && !options.unguarded && cupti->subscriber_held_elsewhere())
    return refusal = WindowRefusal::SubscriberHeld, false;
  c.d = CudaDriver::get(&detail);
  if (!c.d) return refusal = WindowRefusal::NoDriver, false;
  c.ctx = c.d->primary_context(device);
  c.t0 = std::chrono::steady_clock::now();
  // Bounded: that process's window may be waiting on this rank (its context
  // synchronisation covers NCCL streams whose peers are here), so an unbounded
  // wait could deadlock the job; a refused window is retried at a later call
  // of the key (HardwareBusy is transient).
  c.lock_fd = lock.lock(lock_name(c.d, device));
  c.t_locked = std::chrono::steady_clock::now();
  if (c.lock_fd == CounterLock::kTimedOut) {
    add_stall(c.t_locked - c.t0);
    detail = "the GPU's counter lock stayed held for " + std::to_string(CounterLock::kWaitSeconds) + " s";
    return refusal = WindowRefusal::HardwareBusy, false;
  }
  // The probe too runs under the lock: while another process profiles, the
  // counter hardware answers HARDWARE_BUSY (seen on the H200 with 4 ranks).
  if (!set_ready && !prepare(c.d, device, c.ctx)) {
    lock.unlock(c.lock_fd);
    add_stall(std::chrono::steady_clock::now() - c.t0);
    return refusal = unavailable.empty() ? WindowRefusal::HardwareBusy : WindowRefusal::Unavailable, false;
  }
  return true;
}

void CounterWindows::State::begin_failed(const Claimed& c, const format::Status& began, WindowRefusal& refusal,
                                         std::string& detail) {
  lock.unlock(c.lock_fd);
  add_stall(std::chrono::steady_clock::now() - c.t0);
  refusal = refusal_of(began);
  detail = began.message();
}
#endif

std::unique_ptr<OpenCounterWindow> CounterWindows::open(int device, void* stream, WindowRefusal& refusal,
                                                        std::string& detail) {
#ifdef LINGPROBE_HAVE_CUPTI
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.complete_pending_timings();
  WindowSlot slot;
  State::Claimed c;
  if (!s.claim_gpu(device, slot, c, refusal, detail)) return nullptr;
  // Who else computes on the GPU before, during and after the window (NVML, its own thread).
  std::unique_ptr<NvmlGuard> guard;
  try {
    guard = std::make_unique<NvmlGuard>(c.d->device_uuid(device));
  } catch (...) {  // no thread for it (EAGAIN): the window goes on without the guard, the lock still released
  }
  if (const format::Status began = s.cupti->begin_window(c.ctx, stream, s.set, s.options.unguarded); !began.ok()) {
    s.begin_failed(c, began, refusal, detail);
    if (refusal == WindowRefusal::Unavailable) s.unavailable = began.message();  // for the process; held or busy is not
    return nullptr;
  }
  slot.keep();                 // the Window releases it
  s.local_epoch.fetch_add(1);  // odd while the window is open (the Window bumps it back)
  refusal = WindowRefusal::None;
  return std::make_unique<Window>(&s, c.d, device, c.ctx, c.t0, c.t_locked, c.lock_fd, std::move(guard));
#else
  (void)device;
  (void)stream;
  (void)detail;
  refusal = WindowRefusal::NotBuilt;
  return nullptr;
#endif
}

uint64_t CounterWindows::window_epoch(int device) {
#ifndef LINGPROBE_HAVE_CUPTI
  (void)device;
  return 0;  // no windows without CUPTI
#else
  const uint64_t own = s_->local_epoch.load() & 0xffffffffu;
  CudaDriver* d = CudaDriver::loaded();
  if (!d || device < 0 || device >= 64) return own;
  return (s_->lock.shared_epoch(device, lock_name(d, device)) & 0xffffffffu) << 32 | own;
#endif
}

uint64_t CounterWindows::windows() const { return s_->windows.load(); }
uint64_t CounterWindows::stall_us() const { return s_->stall_us.load(); }

void CounterWindows::counter_call_ended(int device) {
  s_->settle.counter_call_ended(device, std::chrono::steady_clock::now());
}

bool CounterWindows::settling_after_window(int device) const {
  return s_->settle.settling(device, std::chrono::steady_clock::now());
}

bool hold_counters(bool hold, int wait_seconds) {
  std::unique_lock<std::mutex> lock(g_hold_mu);
  if (!hold) {
    if (g_holds > 0) --g_holds;
    return true;
  }
  ++g_holds;
  const bool free = g_hold_cv.wait_for(lock, std::chrono::seconds(wait_seconds), [] { return !g_window_busy; });
#ifdef LINGPROBE_HAVE_CUPTI
  if (free) {  // the other client registers its own buffers next: the kind timed calls left armed is disabled first
    lock.unlock();
    Cupti::disarm_timing_activity();
  }
#endif
  return free;
}

}  // namespace lingprobe::gpu
