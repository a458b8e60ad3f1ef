#include "api/sampling.h"
#include "api/log.h"
#include "api/sample_plan_source.h"
#include "api/stage_gpu_time.h"

#include "capture/torch_guard.h"

#include <mutex>

#include "capture/sampler.h"
#include "format/canonical_json.h"
#include "capture/snapshot_capture.h"
#include "gpu/cuda_driver.h"
#ifdef LINGPROBE_HAVE_CUPTI
#include "gpu/cupti_profiler.h"
#include "gpu/nvml_guard.h"
#endif

#include <cxxabi.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <atomic>
#include <condition_variable>
#include "sink/claims.h"
#include "sink/run_directory.h"
#include "sink/snapshot_writer.h"
#include "runtime/snapshot_job.h"

namespace lingprobe::api {
namespace {

// hold_counters' state: the holds, and whether a window is opening or open.
std::mutex g_hold_mu;
std::condition_variable g_hold_cv;
int g_holds = 0;
bool g_window_busy = false;

// Marks a window opening (refused while held); clears the mark unless kept by a Window.
class WindowSlot {
 public:
  // "" or why not: profiler_active (held), window_busy (another window of this process is open).
  std::string acquire() {
    std::lock_guard<std::mutex> lock(g_hold_mu);
    if (g_holds > 0) return "profiler_active";
    if (g_window_busy) return "window_busy";
    g_window_busy = owned_ = true;
    return "";
  }
  void keep() { owned_ = false; }
  static void release() {
    {
      std::lock_guard<std::mutex> lock(g_hold_mu);
      g_window_busy = false;
    }
    g_hold_cv.notify_all();
  }
  ~WindowSlot() {
    if (owned_) release();
  }

 private:
  bool owned_ = false;
};

std::string demangle(const std::string& mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : mangled;
  std::free(d);
  return out;
}

// The physical GPU index behind a CUDA ordinal (CUDA_VISIBLE_DEVICES), as text.
std::string physical_index(int ordinal) {
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

// capture's GPU needs, over the CUDA driver and CUPTI (loaded on first use).
class CudaAccess : public capture::DeviceAccess {
 public:
  // `on_probe` gets the counters probe's result once, as a metadata record line.
  // `lock_dir`: where the per-GPU lock that serialises the launch's counter
  // windows lives (the ranks of one launch share one GPU on small machines,
  // and the counter hardware serves one profiling session at a time).
  // `unguarded`: windows even while another tool holds CUPTI's subscriber (PROFILE_UNGUARDED).
  CudaAccess(std::vector<std::string> metrics, std::function<void(std::string)> on_probe, std::string lock_dir,
             bool unguarded)
      : metrics_(std::move(metrics)), on_probe_(std::move(on_probe)), lock_dir_(std::move(lock_dir)),
        unguarded_(unguarded) {
    for (auto& fd : epoch_fds_) fd.store(-1);
  }
  Capture stream_capture(void* stream) override {
    gpu::CudaDriver* d = gpu::CudaDriver::get();
    if (!d) return Capture::Unknown;
    switch (d->stream_capture(stream)) {
      case gpu::CudaDriver::Capture::None: return Capture::None;
      case gpu::CudaDriver::Capture::Active: return Capture::Active;
      default: return Capture::Unknown;
    }
  }
  std::shared_ptr<void> relax_capture_mode() override {
    gpu::CudaDriver* d = gpu::CudaDriver::get();
    if (!d) return nullptr;
    const int previous = d->relax_capture_mode();
    return std::shared_ptr<void>(nullptr, [d, previous](void*) { d->restore_capture_mode(previous); });
  }
  std::unique_ptr<capture::DeviceTransfer> transfer(int device, void* stream, const void* ptr, size_t n,
                                                    std::string& error) override {
    gpu::CudaDriver* d = gpu::CudaDriver::get(&error);
    if (!d) return nullptr;
    void* ev = d->record_event(device, stream, error);
    if (!ev) return nullptr;
    return std::make_unique<Transfer>(d, device, ev, ptr, n);
  }

  std::unique_ptr<capture::CounterWindow> open_counters(int device, void* stream, std::string& reason) override {
#ifdef LINGPROBE_HAVE_CUPTI
    std::lock_guard<std::mutex> lock(mu_);
    if (!unavailable_.empty()) {
      reason = "counters_unavailable";
      return nullptr;
    }
    WindowSlot slot;
    if (std::string why = slot.acquire(); !why.empty()) {  // torch.profiler starting or running, or a window open
      reason = why;
      return nullptr;
    }
    // Kineto keeps CUPTI's subscriber once it has run: refused before the GPU lock and the NVML thread.
    if (set_ready_ && !unguarded_ && cupti_->subscriber_held_elsewhere()) {
      reason = "subscriber_held";
      return nullptr;
    }
    gpu::CudaDriver* d = gpu::CudaDriver::get(&reason);
    if (!d) return nullptr;
    void* ctx = d->primary_context(device);
    const auto t0 = std::chrono::steady_clock::now();
    // Waits (bounded) while another process of the launch profiles this GPU.
    // Bounded: that process's window may be waiting on this rank (its
    // context synchronisation covers NCCL streams whose peers are here), so an
    // unbounded wait could deadlock the job; a refused window is retried at a
    // later call of the key (hardware_busy is transient).
    const int lock_fd = lock_gpu(d, device);
    const auto t_locked = std::chrono::steady_clock::now();
    if (lock_fd == kLockTimedOut) {
      add_stall(t_locked - t0);
      reason = "hardware_busy";
      log_ += "window not opened: the GPU's counter lock stayed held for " + std::to_string(kLockWaitSeconds) + " s\n";
      return nullptr;
    }
    // The probe too runs under the lock: while another process profiles, the
    // counter hardware answers HARDWARE_BUSY (seen on the H200 with 4 ranks).
    if (!set_ready_ && !prepare(d, device, ctx)) {
      unlock_gpu(lock_fd);
      add_stall(std::chrono::steady_clock::now() - t0);
      reason = unavailable_.empty() ? "hardware_busy" : "counters_unavailable";
      return nullptr;
    }
    // Who else computes on the GPU before, during and after the window (NVML, its own thread).
    std::unique_ptr<gpu::NvmlGuard> guard;
    try {
      guard = std::make_unique<gpu::NvmlGuard>(d->device_uuid(device));
    } catch (...) {  // no thread for it (EAGAIN): the window goes on without the guard, the lock still released
    }
    gpu::Cupti::Refusal refusal;
    std::string why = cupti_->begin_window(ctx, stream, set_, unguarded_, refusal);
    if (!why.empty()) {
      unlock_gpu(lock_fd);
      add_stall(std::chrono::steady_clock::now() - t0);
      using R = gpu::Cupti::Refusal;
      if (refusal == R::Unavailable) unavailable_ = why;  // for the process; a held subscriber or busy hardware is not
      reason = refusal == R::Unavailable      ? "counters_unavailable"
               : refusal == R::HardwareBusy   ? "hardware_busy"
               : refusal == R::SubscriberHeld ? "subscriber_held"
                                              : "window_not_opened";
      log_ += "window not opened: " + why + "\n";
      return nullptr;
    }
    slot.keep();  // the Window releases it
    local_epoch_.fetch_add(1);  // odd while the window is open (the Window bumps it back)
    return std::make_unique<Window>(this, d, device, ctx, t0, t_locked, lock_fd, std::move(guard));
#else
    (void)device;
    (void)stream;
    reason = "not_built_with_cupti";
    return nullptr;
#endif
  }

  // The window epoch of `device`'s GPU for the stage clock: the lock file's counter (every process of the GPU's
  // windows, see bump_epoch) in the high half, this process's own windows in the low half (those too when the
  // lock file could not be used); odd halves while a window is open (gpu::StageClock::kWindowOpenBits).
  uint64_t window_epoch(int device) {
#ifndef LINGPROBE_HAVE_CUPTI
    (void)device;
    return 0;  // no windows without CUPTI
#else
    const uint64_t own = local_epoch_.load() & 0xffffffffu;
    gpu::CudaDriver* d = gpu::CudaDriver::loaded();
    if (!d || device < 0 || device >= 64) return own;
    int fd = epoch_fds_[device].load();
    if (fd < 0) {  // opened once per device (created as the lock is: the first window may come later)
      std::lock_guard<std::mutex> lock(epoch_mu_);
      fd = epoch_fds_[device].load();
      if (fd < 0) {
        fd = open_lock_file(d, device);
        if (fd >= 0) epoch_fds_[device].store(fd);
      }
      if (fd < 0) return own;
    }
    uint64_t n = 0;
    if (::pread(fd, &n, sizeof n, 0) != static_cast<ssize_t>(sizeof n)) n = 0;
    return (n & 0xffffffffu) << 32 | own;
#endif
  }

  // Windows closed and the wall time the calling threads spent on them (lock waits included).
  uint64_t windows() const { return windows_.load(); }
  uint64_t stall_us() const { return stall_us_.load(); }

  // Why counters cannot be read here ("" while they can); the probe's result.
  std::string unavailable() {
    std::lock_guard<std::mutex> lock(mu_);
    return unavailable_;
  }

 private:
#ifdef LINGPROBE_HAVE_CUPTI
  // Once per process: CUPTI, the chip, the counter availability, the config image.
  bool prepare(gpu::CudaDriver* d, int device, void* ctx) {
    std::string err;
    cupti_ = gpu::Cupti::get(&err);
    std::string chip;
    std::vector<uint8_t> availability;
    if (cupti_ && err.empty()) err = cupti_->device_chip(device, chip);
    if (cupti_ && err.empty()) err = cupti_->counter_availability(ctx, availability);
    if (cupti_ && err.empty()) err = cupti_->build_metric_set(chip, metrics_, availability, set_);
    if (const char* inj = std::getenv("CUDA_INJECTION64_PATH"); err.empty() && inj && *inj)
      err = std::string("held by another tool (CUDA_INJECTION64_PATH=") + inj + ")";
    if (err.find("HARDWARE_BUSY") != std::string::npos) return false;  // transient: probed again at the next window
    format::JsonValue probe = format::JsonValue::object();
    probe.set("kind", format::JsonValue::string("counters_probe"));
    probe.set("device", format::JsonValue::integer(device));
    probe.set("available", format::JsonValue::boolean(err.empty()));
    probe.set("chip", format::JsonValue::string(chip));
    probe.set("passes", format::JsonValue::integer(static_cast<int64_t>(set_.passes)));
    probe.set("reason", format::JsonValue::string(err));
    if (on_probe_) on_probe_(format::canonical_json(probe) + "\n");
    if (!err.empty()) {
      unavailable_ = err;
      return false;
    }
    identity_ = format::JsonValue::object();
    identity_.set("gpu_name", format::JsonValue::string(d->device_name(device)));
    identity_.set("gpu_uuid", format::JsonValue::string(d->device_uuid(device)));
    identity_.set("chip", format::JsonValue::string(chip));
    identity_.set("compute_capability", format::JsonValue::string(d->compute_capability(device)));
    identity_.set("driver_version", format::JsonValue::integer(d->driver_version()));
    identity_.set("driver", format::JsonValue::string(gpu::NvmlGuard::driver_version()));
    identity_.set("cuda_runtime_version", format::JsonValue::integer(gpu::CudaDriver::runtime_version()));
    identity_.set("cupti_version", format::JsonValue::integer(cupti_->version()));
    identity_.set("sm_clock_khz", format::JsonValue::integer(d->clock_rate_khz(device)));
    format::JsonValue m = format::JsonValue::array();
    for (const auto& x : set_.metrics) m.push_back(format::JsonValue::string(x));
    identity_.set("metrics", std::move(m));
    set_ready_ = true;
    return true;
  }

  class Window : public capture::CounterWindow {
   public:
    Window(CudaAccess* owner, gpu::CudaDriver* d, int device, void* ctx, std::chrono::steady_clock::time_point t0,
           std::chrono::steady_clock::time_point t_locked, int lock_fd, std::unique_ptr<gpu::NvmlGuard> guard)
        : owner_(owner), d_(d), device_(device), ctx_(ctx), t0_(t0), t_locked_(t_locked), lock_fd_(lock_fd),
          guard_(std::move(guard)) {}
    // A window that was never closed (its op threw past the capture) still
    // releases the GPU's lock, so the other ranks are not blocked by it.
    ~Window() override {
      if (!closed_) try {
          owner_->cupti_->end_window([this] { return d_->synchronize(ctx_); });
        } catch (...) {  // nothing escapes into the op's unwinding
        }
      owner_->unlock_gpu(lock_fd_);
      if (!closed_) {
        owner_->local_epoch_.fetch_add(1);
        owner_->add_stall(std::chrono::steady_clock::now() - t0_, true);
        WindowSlot::release();
      }
    }
    format::ProfileData close() override {
      gpu::WindowResult w = owner_->cupti_->end_window([this] { return d_->synchronize(ctx_); });
      closed_ = true;
      owner_->unlock_gpu(lock_fd_);
      owner_->local_epoch_.fetch_add(1);
      lock_fd_ = -1;
      WindowSlot::release();
      format::JsonValue guard = guard_ ? guard_->finish() : format::JsonValue::null();
      format::ProfileData p;
      p.status = gpu::status_name(w.status);
      p.reason = w.reason;
      p.metrics = owner_->set_.metrics;
      p.passes = owner_->set_.passes;
      p.compute_capability = d_->compute_capability(device_);
      p.foreign_kernels = w.foreign;
      for (size_t i = 0; i < w.kernels.size(); ++i) {
        const gpu::KernelLaunch& k = w.kernels[i];
        format::ProfiledKernel pk;
        pk.mangled_name = k.mangled;
        pk.name = demangle(k.mangled);
        pk.device = device_;
        for (int j = 0; j < 3; ++j) pk.grid[j] = k.grid[j], pk.block[j] = k.block[j];
        pk.registers_per_thread = k.registers;
        pk.shared_bytes_per_block = static_cast<int64_t>(k.static_shared) + k.dynamic_shared + 1024;
        if (i < w.values.size()) pk.values = w.values[i];
        p.kernels.push_back(std::move(pk));
      }
      const auto t1 = std::chrono::steady_clock::now();
      p.window_seconds = std::chrono::duration<double>(t1 - t0_).count();
      p.lock_wait_seconds = std::chrono::duration<double>(t_locked_ - t0_).count();
      owner_->add_stall(t1 - t0_, true);
      p.identity = owner_->identity_;
      if (const format::JsonValue* c = guard.find("clocks_mhz_before")) p.identity.set("clocks_mhz", *c);
      if (const format::JsonValue* v = guard.find("verdict")) p.identity.set("gpu_shared", *v);
      p.guard = std::move(guard);
      p.identity.set("cuda_device", format::JsonValue::string(std::to_string(device_)));
      p.identity.set("allocated", format::JsonValue::string(physical_index(device_)));
      p.identity.set("launch_guard", format::JsonValue::boolean(w.launch_guard));
      p.identity.set("ranges", format::JsonValue::integer(static_cast<int64_t>(w.ranges)));
      p.identity.set("launches_held", format::JsonValue::integer(w.launches_held));
      p.log = "ranges " + std::to_string(w.ranges) + ", kernels " + std::to_string(w.kernels.size()) + ", passes " +
              std::to_string(p.passes) + ", launch guard " + (w.launch_guard ? "armed" : "not armed (subscriber held, PROFILE_UNGUARDED)") +
              ", other threads' launches held until the window closed " + std::to_string(w.launches_held) + "\n";
      return p;
    }

   private:
    CudaAccess* owner_;
    gpu::CudaDriver* d_;
    int device_;
    void* ctx_;
    std::chrono::steady_clock::time_point t0_, t_locked_;
    int lock_fd_;
    std::unique_ptr<gpu::NvmlGuard> guard_;
    bool closed_ = false;
  };

  // `window`: a window that opened (else a refused attempt's wait).
  void add_stall(std::chrono::steady_clock::duration d, bool window = false) {
    if (window) windows_.fetch_add(1);
    stall_us_.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count()));
  }

  static constexpr int kLockTimedOut = -2;
  static constexpr int kLockWaitSeconds = 30;
  // The lock's fd; -1 without a shared directory (windows of different
  // processes are then not serialised); kLockTimedOut after kLockWaitSeconds.
  // RUN_DIR/claims/counters-{uuid}.lock, opened (created) without following a symlink below RUN_DIR.
  int open_lock_file(gpu::CudaDriver* d, int device) {
    std::string uuid = d->device_uuid(device);
    if (uuid.empty()) uuid = "device" + std::to_string(device);
    const size_t cut = lock_dir_.rfind('/');
    const std::string root = cut == std::string::npos ? "." : lock_dir_.substr(0, cut);
    if (!sink::make_directories(root).empty()) return -1;
    const int dir = sink::open_directory_beneath(root, lock_dir_.substr(cut + 1), true);
    if (dir < 0) return -1;
    const int fd = ::openat(dir, ("counters-" + uuid + ".lock").c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    ::close(dir);
    return fd;
  }
  // The GPU's window epoch: the lock file's first 8 bytes, bumped by the lock's holder when it takes and
  // when it gives back the lock (odd while a window is open), read by every process's stage clock.
  static void bump_epoch(int fd) {
    uint64_t n = 0;
    if (::pread(fd, &n, sizeof n, 0) != static_cast<ssize_t>(sizeof n)) n = 0;
    ++n;
    (void)!::pwrite(fd, &n, sizeof n, 0);
  }
  int lock_gpu(gpu::CudaDriver* d, int device) {
    const int fd = open_lock_file(d, device);
    if (fd < 0) return -1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kLockWaitSeconds);
    while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      if ((errno != EWOULDBLOCK && errno != EINTR) || std::chrono::steady_clock::now() >= deadline) {
        const bool timed_out = errno == EWOULDBLOCK || errno == EINTR;
        ::close(fd);
        return timed_out ? kLockTimedOut : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    bump_epoch(fd);
    return fd;
  }
  void unlock_gpu(int fd) {
    if (fd < 0) return;
    bump_epoch(fd);
    ::flock(fd, LOCK_UN);
    ::close(fd);
  }

  gpu::Cupti* cupti_ = nullptr;
  gpu::MetricSet set_;
  bool set_ready_ = false;
  format::JsonValue identity_;
#endif
  std::vector<std::string> metrics_;
  std::function<void(std::string)> on_probe_;
  std::string lock_dir_;
  bool unguarded_;
  std::mutex mu_;
  std::string unavailable_;
  std::string log_;
  std::atomic<uint64_t> windows_{0}, stall_us_{0};
  std::atomic<uint64_t> local_epoch_{0};  // this process's windows (see window_epoch)
  std::mutex epoch_mu_;
  std::atomic<int> epoch_fds_[64];        // the lock files, kept open for the epoch reads; -1 until opened

  class Transfer : public capture::DeviceTransfer {
   public:
    Transfer(gpu::CudaDriver* d, int device, void* ev, const void* ptr, size_t n)
        : d_(d), device_(device), ev_(ev), ptr_(ptr), n_(n) {}
    ~Transfer() override { d_->destroy_event(device_, ev_); }
    std::string stream(const std::function<bool(const void*, size_t)>& out) override {
      return d_->copy_to_host(device_, ev_, ptr_, n_, out);
    }

   private:
    gpu::CudaDriver* d_;
    int device_;
    void* ev_;
    const void* ptr_;
    size_t n_;
  };
};

class Broker : public capture::ClaimBroker, public capture::RunBudget {
 public:
  Broker(sink::Claims* claims, uint64_t run_limit) : claims_(claims), run_limit_(run_limit) {}
  Outcome claim_key(const std::string& sha) override {
    switch (claims_->claim_key(sha)) {
      case sink::Claims::Outcome::Owned: return Outcome::Owned;
      case sink::Claims::Outcome::Held: return Outcome::HeldElsewhere;
      default: return Outcome::Unavailable;
    }
  }
  void release_key(const std::string& sha, bool failed, uint64_t bytes) override { claims_->release_key(sha, failed, bytes); }
  KeyProgress key_progress(const std::string& sha) override {
    switch (claims_->key_state(sha)) {
      case sink::Claims::KeyState::Done: return KeyProgress::Done;
      case sink::Claims::KeyState::InProgress: return KeyProgress::InProgress;
      default: return KeyProgress::Free;
    }
  }
  bool signature_sampled(const std::string& sha) override { return claims_->signature_claimed(sha); }
  bool reserve(uint64_t bytes) override { return claims_->reserve_bytes(bytes, run_limit_); }
  void give_back(uint64_t bytes) override { claims_->give_back_bytes(bytes); }

 private:
  sink::Claims* claims_;
  uint64_t run_limit_;
};

class WriterSink : public capture::SnapshotSink {
 public:
  explicit WriterSink(sink::SnapshotWriter* w) : w_(w) {}
  void submit(runtime::SnapshotJob job) override { w_->submit(std::move(job)); }

 private:
  sink::SnapshotWriter* w_;
};

std::vector<std::string> metrics_of(const Config& c) {
#ifdef LINGPROBE_HAVE_CUPTI
  if (c.profile_metrics.empty()) return gpu::seed_metrics();
#endif
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= c.profile_metrics.size()) {
    size_t end = c.profile_metrics.find(',', pos);
    if (end == std::string::npos) end = c.profile_metrics.size();
    if (end > pos) out.push_back(c.profile_metrics.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

capture::Coordination coordination_of(SampleCoordination c) {
  switch (c) {
    case SampleCoordination::Hash: return capture::Coordination::Hash;
    case SampleCoordination::None: return capture::Coordination::None;
    case SampleCoordination::Claims: break;
  }
  return capture::Coordination::Claims;
}

// Whether the machine shows this process an NVIDIA GPU, without
// initialising CUDA (lazy CUDA: nothing here may start it).
bool gpu_on_machine() {
  if (::access("/dev/nvidiactl", F_OK) != 0) return false;
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return !v || (*v && std::string(v) != "-1");
}

capture::SnapshotOptions snapshot_options(const Config& c, int64_t rank, const std::string& run_id, bool gpu) {
  capture::SnapshotOptions o;
  o.snapshots = c.snapshots;
  o.profile = c.profile;
  o.budget_process = static_cast<uint64_t>(c.sample_budget_process);
  o.budget_device = static_cast<uint64_t>(c.sample_budget_device);
  o.rank = rank;
  o.run_id = run_id;
  o.gpu_on_machine = gpu;
  o.gpu_calls_only = c.sample_devices == SampleDevices::Gpu || (c.sample_devices == SampleDevices::Auto && o.gpu_on_machine);
  o.profile_budget_s = c.profile_budget_s;
  return o;
}

// One refusal record (once per key, evidence and reason): where each key's evidence went.
std::string refusal_record(const capture::SampleKey& k, const char* evidence, const std::string& reason, uint64_t call) {
  format::JsonValue r = format::JsonValue::object();
  r.set("kind", format::JsonValue::string("refusal"));
  r.set("input_sha256", format::JsonValue::string(k.input_sha));
  r.set("op", format::JsonValue::string(k.op));
  r.set("stage", format::JsonValue::string(k.stage));
  r.set("evidence", format::JsonValue::string(evidence));
  r.set("reason", format::JsonValue::string(reason));
  r.set("call", format::JsonValue::integer(static_cast<int64_t>(call)));
  return format::canonical_json(r) + "\n";
}

}  // namespace

struct SamplingSession::Parts {
  sink::Claims claims;
  Broker broker;
  sink::SnapshotWriter writer;
  WriterSink writer_sink;
  CudaAccess cuda;
  capture::Sampler sampler;
  capture::SnapshotCapture snapshots;
  std::unique_ptr<StageGpuTime> stage_time;  // PROFILE with STAGE_GPU_TIME
  std::unique_ptr<LoadedPlan> plan;          // SAMPLE_PLAN
  sink::MetadataWriter* metadata;
  SampleDevices sample_devices;

  Parts(const Config& c, int64_t rank, const std::string& who, const std::string& run_dir, const std::string& run_id,
        sink::MetadataWriter* metadata, bool gpu)
      : claims(run_dir, rank),
        broker(&claims, static_cast<uint64_t>(c.sample_budget_run)),
        writer(run_dir, who, metadata, c.sample_coordination == SampleCoordination::Claims ? &claims : nullptr),
        writer_sink(&writer),
        cuda(metrics_of(c), [metadata](std::string line) { metadata->add_record(std::move(line)); },
             run_dir + "/claims", c.profile_unguarded),
        snapshots(&sampler, &writer_sink, &broker, &cuda, snapshot_options(c, rank, run_id, gpu)),
        plan(load_sample_plan(c, gpu)),
        metadata(metadata),
        sample_devices(c.sample_devices) {
    if (c.profile && c.stage_gpu_time)
      stage_time = std::make_unique<StageGpuTime>([this](int device) { return cuda.window_epoch(device); });
  }
};

SamplingSession::SamplingSession(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}
SamplingSession::~SamplingSession() { finalize(); }

std::unique_ptr<SamplingSession> SamplingSession::create(const Config& c, int64_t rank, int64_t world_size,
                                                         const std::string& who, const std::string& run_dir,
                                                         const std::string& run_id, sink::MetadataWriter* metadata) {
  if (!c.snapshots && !c.profile) return nullptr;
  const bool gpu = gpu_on_machine();
  auto parts = std::make_unique<Parts>(c, rank, who, run_dir, run_id, metadata, gpu);
  capture::SamplingOptions so;
  so.enabled = true;
  so.first = static_cast<uint64_t>(c.sample_first);
  so.skip = static_cast<uint64_t>(c.sample_skip);
  so.every = static_cast<uint64_t>(c.sample_every);
  so.probability = c.sample_probability;
  so.seed = static_cast<uint64_t>(c.sample_seed);
  (void)so.selection.parse(c.sample_ops, "");  // validated with the configuration
  so.coordination = coordination_of(c.sample_coordination);
  so.evidence = static_cast<uint8_t>((c.snapshots ? capture::kSnapshot : 0) | (c.profile ? capture::kCounters : 0));
  if (parts->plan) so.plan = parts->plan->keys;
  parts->sampler.configure(so, &parts->broker, rank, world_size);
  parts->sampler.set_refusal_sink([metadata](const capture::SampleKey& k, const char* evidence, const std::string& reason,
                                             uint64_t call) { metadata->add_record(refusal_record(k, evidence, reason, call)); });
  if (c.profile && !gpu)
    log_warn("LINGPROBE_PROFILE=1, but this machine shows the process no NVIDIA GPU (no /dev/nvidiactl, or "
             "CUDA_VISIBLE_DEVICES hides them): no counters will be taken" +
             std::string(c.snapshots ? "; snapshots go on" : ""));
  return std::unique_ptr<SamplingSession>(new SamplingSession(std::move(parts)));
}

capture::Sampler* SamplingSession::sampler() { return &parts_->sampler; }
capture::SampledCallHooks* SamplingSession::hooks() { return &parts_->snapshots; }
capture::StageTiming* SamplingSession::stage_timing() { return parts_->stage_time.get(); }

void SamplingSession::on_new_signature(uint32_t id, const std::string& sha, const std::string& text) {
  parts_->writer.add_signature(id, sha, text);
}

void SamplingSession::poll() {
  parts_->sampler.poll();
  if (parts_->stage_time) parts_->stage_time->poll();
}

void SamplingSession::add_counts(format::CountsSnapshot& counts) {
  for (const auto& [what, reasons] : parts_->snapshots.drops())
    for (const auto& [reason, n] : reasons) counts.dropped[what][reason] += n;
  const capture::SamplingStats s = parts_->sampler.stats();
  counts.sampling["keys"] = s.keys;
  counts.sampling["keys_sampled"] = s.sampled;
  counts.sampling["samples"] = s.samples;
  counts.sampling["snapshots_written"] = parts_->writer.written();
  counts.sampling["profiles_written"] = parts_->writer.profiles_written();
  counts.sampling["snapshot_bytes"] = parts_->writer.bytes_written();
  if (parts_->cuda.windows() || parts_->cuda.stall_us()) {
    counts.sampling["profile_windows"] = parts_->cuda.windows();
    counts.sampling["profile_stall_us"] = parts_->cuda.stall_us();
  }
  counts.unsampled = parts_->sampler.unsampled_reasons();
  if (parts_->stage_time) parts_->stage_time->add_counts(counts);
}

void SamplingSession::set_identity(int64_t rank, int64_t world_size, const std::string& who) {
  parts_->sampler.set_rank(rank, world_size);
  parts_->snapshots.set_rank(rank);
  parts_->writer.set_who(who);
  parts_->claims.set_rank(rank);
}

bool hold_counters(bool hold, int wait_seconds) {
  std::unique_lock<std::mutex> lock(g_hold_mu);
  if (!hold) {
    if (g_holds > 0) --g_holds;
    return true;
  }
  ++g_holds;
  return g_hold_cv.wait_for(lock, std::chrono::seconds(wait_seconds), [] { return !g_window_busy; });
}

void SamplingSession::finalize() {
  if (gpu::CudaDriver* d = gpu::CudaDriver::loaded()) d->set_finishing();  // no exit hangs behind a stuck stream
  if (parts_->stage_time) parts_->stage_time->finalize();  // before the final counts record
  if (parts_->plan && !plan_written_.exchange(true))
    parts_->metadata->add_record(plan_record(*parts_->plan, parts_->sampler.plan_unmet()));
  parts_->writer.finalize();
  if (!exit_said_.exchange(true)) say_if_nothing_ran_on_the_gpu();  // after the drain: the samples' verdicts are in
}
// A program whose due keys all ran off the GPU while only GPU calls are sampled (a CPU job on a GPU machine) ends
// with no evidence: said once, at exit, with the option that samples its calls. Not when any key was sampled, here
// or by another process, or stays unsampled for another reason.
void SamplingSession::say_if_nothing_ran_on_the_gpu() {
  uint64_t off_gpu = 0, other = 0;
  const std::string suffix = ":not_on_gpu";
  for (const auto& [reason, keys] : parts_->sampler.unsampled_reasons())
    (reason.size() > suffix.size() && reason.compare(reason.size() - suffix.size(), suffix.size(), suffix) == 0
         ? off_gpu
         : other) += keys;
  if (off_gpu == 0 || other > 0 || parts_->sampler.stats().sampled > 0) return;
  log_warn(std::to_string(off_gpu) + " input key(s) were not sampled: their calls ran on the CPU or the meta device, "
           "and only GPU calls are sampled (LINGPROBE_SAMPLE_DEVICES=" +
           std::string(parts_->sample_devices == SampleDevices::Gpu ? "gpu" : "auto, on a machine with an NVIDIA GPU") +
           "); set LINGPROBE_SAMPLE_DEVICES=any to sample them");
}

void SamplingSession::after_fork() {
  if (parts_->stage_time) parts_->stage_time->after_fork();
}
uint64_t SamplingSession::snapshots_written() const { return parts_->writer.written(); }
uint64_t SamplingSession::snapshot_bytes() const { return parts_->writer.bytes_written(); }

}  // namespace lingprobe::api
