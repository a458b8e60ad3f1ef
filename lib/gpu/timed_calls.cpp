// Timed calls (counter_windows.h: open_timing): a key's call timed by CUPTI
// Activity alone, completed on the writer's thread. The calls pending at
// once share the window slot and the GPU's lock (counter_windows_state.h).
#include "gpu/counter_windows.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gpu/counter_windows_state.h"

namespace lingprobe::gpu {

#ifdef LINGPROBE_HAVE_CUPTI
namespace {

// A timed call: the durations of the op's kernels by CUPTI Activity, as
// ProfileData with the one metric gpu__time_duration.sum (no passes). stop()
// ends it on the op's thread without waiting, so that the next op's kernels
// queue behind its own as they would without lingprobe (a kernel started on
// an idle GPU can run up to 8% longer: docs/COUNTERS.md), and records an
// event on the op's stream. It is completed once, by close() on the writer's
// thread or before a counter window opens, whichever claims it first (the
// other waits): the event polled in relaxed capture mode (no context
// synchronisation, which would invalidate another thread's graph capture),
// then its records. A kernel of the op on another stream that has not ended
// by then has no record yet: the call fails and the key is timed later.
// Meanwhile later timed calls begin and end as usual. Its seconds are the
// op's own inside it (open to stop): the stall it cost.
class TimingWindow : public OpenCounterWindow, CounterWindows::State::PendingTiming {
 public:
  TimingWindow(CounterWindows::State* owner, CudaDriver* d, int device, void* stream,
               std::chrono::steady_clock::time_point t0)
      : owner_(owner),
        d_(d),
        device_(device),
        stream_(stream),
        t0_(t0),
        since_counter_call_ns_(owner->settle.since_ns(device, t0)) {}
  // Made before CUPTI's begin (nothing to undo if it cannot be made), open once it began; joined: into a session
  // other pending calls had open (else this call started it).
  void began(bool joined) {
    state_ = State::Open;
    joined_ = joined;
    open_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  ~TimingWindow() override {
    try {
      complete();
    } catch (...) {  // nothing escapes into the op's unwinding
    }
    if (event_) d_->destroy_event(device_, event_);
  }
  void stop() override {
    std::lock_guard<std::mutex> lock(owner_->pending_mu);
    if (state_ != State::Open) return;
    stop_noting();
    owner_->pending_timings.push_back(this);
  }
  // On the writer's thread: a stopped call is read no sooner than kBatchedRead after its stop.
  format::ProfileData close() override {
    wait_for_the_batch();
    complete();
    return data_;
  }

 private:
  enum class State { Open, Stopped, Completing, Closed };
  // Reading a call's records flushes CUPTI's Activity buffers (Cupti::flush_records_of), and a flush holds the
  // launches of the op's thread meanwhile: read at once, call by call, each timed call took ~200 us more on the
  // host where the GPU kept up, and the GPU idled before its kernels (docs/COUNTERS.md). Read 10 ms after its stop,
  // one flush brings the records of every call stopped by then, and the later calls' reads need none.
  static constexpr std::chrono::milliseconds kBatchedRead{10};
  // Until then, unless another device's timed call was refused meanwhile (read_now: the session ends sooner).
  void wait_for_the_batch() {
    std::unique_lock<std::mutex> lock(owner_->pending_mu);
    owner_->pending_cv.wait_until(lock, stopped_at_ + kBatchedRead, [&] {
      return state_ != State::Stopped || owner_->read_now;  // claimed meanwhile (a counter window opening)
    });
  }
  void complete() {
    std::unique_lock<std::mutex> lock(owner_->pending_mu);
    if (state_ == State::Completing) owner_->pending_cv.wait(lock, [&] { return state_ == State::Closed; });
    if (state_ == State::Closed) return;
    claim_locked();
    lock.unlock();
    finish_claimed();
  }
  void claim_locked() override {
    if (state_ == State::Open) stop_noting();
    state_ = State::Completing;
    ++owner_->completing;
    auto& pending = owner_->pending_timings;
    const PendingTiming* me = this;
    pending.erase(std::remove(pending.begin(), pending.end(), me), pending.end());
  }
  void finish_claimed() override {
    TimingResult t;
    try {  // the device awaited without the lock: other timed calls go on meanwhile
      t = owner_->cupti->end_timing(own_, [this] { return event_ && d_->wait_event(device_, event_); });
    } catch (...) {
      t.reason = "internal error reading the records";
    }
    std::lock_guard<std::mutex> lock(owner_->pending_mu);
    if (--owner_->timing_calls == 0) {  // the last: the lock, the epoch and the slot given back
      owner_->read_now = false;
      owner_->lock.unlock(owner_->timing_lock_fd);
      owner_->timing_lock_fd = -1;
      owner_->local_epoch.fetch_add(1);
      WindowSlot::release();
    }
    data_ = profile_of(t);
    state_ = State::Closed;  // a completer waiting for it may destroy it once the lock is given back
    --owner_->completing;
    owner_->pending_cv.notify_all();
  }
  // Under pending_mu: the call's launches taken, its end marked on the op's stream, its stall charged.
  void stop_noting() {
    const auto stopping = std::chrono::steady_clock::now();
    own_ = owner_->cupti->stop_timing();
    std::string error;
    event_ = d_->record_event(device_, stream_, error);
    state_ = State::Stopped;
    const auto stopped = std::chrono::steady_clock::now();
    stopped_at_ = stopped;
    owner_->add_stall(stopped - t0_, true);
    seconds_ = std::chrono::duration<double>(stopped - t0_).count();
    stop_seconds_ = std::chrono::duration<double>(stopped - stopping).count();
  }
  format::ProfileData profile_of(const TimingResult& t) const {
    format::ProfileData p;
    p.status = t.passed ? "passed" : "failed";
    p.reason = t.reason;
    p.metrics = {"gpu__time_duration.sum"};
    p.compute_capability = d_->compute_capability(device_);
    for (const KernelLaunch& k : t.kernels) {
      p.kernels.push_back(profiled_kernel(k, device_));
      p.kernels.back().values = {static_cast<double>(k.end_ns - k.start_ns)};  // ns, the metric's base unit
      p.kernels.back().gpu_start_ns = k.start_ns;
      p.kernels.back().gpu_end_ns = k.end_ns;
    }
    p.window_seconds = seconds_;
    p.identity = owner_->identity;
    p.identity.set("cuda_device", format::JsonValue::string(std::to_string(device_)));
    p.identity.set("launches", format::JsonValue::integer(t.launches));
    // The op thread's seconds split, as the kernel_timing record names it: claiming the window and CUPTI's begin (a
    // session started or joined), and the end's launches taken and event recorded; the rest of window_seconds is
    // the op's own dispatch.
    p.identity.set("joined_session", format::JsonValue::boolean(joined_));
    p.identity.set("open_us", format::JsonValue::floating(open_seconds_ * 1e6));
    p.identity.set("stop_us", format::JsonValue::floating(stop_seconds_ * 1e6));
    // Host time from the last counter window's call end on this GPU to this call's start (window_settle), or null.
    p.identity.set("since_counter_call_us", since_counter_call_ns_ < 0
                                                ? format::JsonValue::null()
                                                : format::JsonValue::floating(since_counter_call_ns_ / 1e3));
    // The writer's side: waiting for the records after the end event (records_wait_us), in how many
    // cuptiActivityFlushAll calls, the last forced or not.
    p.identity.set("records_wait_us", format::JsonValue::floating(t.records_wait_seconds * 1e6));
    p.identity.set("flushes", format::JsonValue::integer(t.flushes));
    p.identity.set("forced_flush", format::JsonValue::boolean(t.forced_flush));
    return p;
  }
  CounterWindows::State* owner_;
  CudaDriver* d_;
  int device_;
  void* stream_;
  std::chrono::steady_clock::time_point t0_;
  std::chrono::steady_clock::time_point stopped_at_;  // set by stop_noting
  int64_t since_counter_call_ns_;                     // WindowSettle::since_ns at t0_
  std::vector<uint32_t> own_;                         // the call's launches, from stop_noting
  void* event_ = nullptr;                             // recorded on the op's stream at its end
  State state_ = State::Closed;                       // under owner_->pending_mu; Open once began()
  double seconds_ = 0;                                // open to stop: the stall charged
  double open_seconds_ = 0;                           // open to began
  double stop_seconds_ = 0;                           // stop_noting's own
  bool joined_ = false;
  format::ProfileData data_;
};

}  // namespace

std::unique_ptr<OpenCounterWindow> CounterWindows::State::join_timing(int device, void* stream, WindowRefusal& refusal,
                                                                      std::string& detail) {
  if (WindowSlot::held()) return refusal = WindowRefusal::ProfilerActive, nullptr;  // torch.profiler is starting
  if (device != timing_device) {
    detail = "timed calls on another device are pending";
    read_now = true;  // the writer reads the pending ones without waiting for the batch: the session ends sooner
    pending_cv.notify_all();
    return refusal = WindowRefusal::WindowBusy, nullptr;
  }
  CudaDriver* d = CudaDriver::get(&detail);
  if (!d) return refusal = WindowRefusal::NoDriver, nullptr;
  auto w = std::make_unique<TimingWindow>(this, d, device, stream, std::chrono::steady_clock::now());
  if (const format::Status began = cupti->begin_timing(d->primary_context(device)); !began.ok()) {
    detail = began.message();  // another call open: busy
    return refusal =
               began.code() == format::StatusCode::kHeld ? WindowRefusal::SubscriberHeld : WindowRefusal::WindowBusy,
           nullptr;
  }
  w->began(true);
  ++timing_calls;
  refusal = WindowRefusal::None;
  return w;
}

#endif

std::unique_ptr<OpenCounterWindow> CounterWindows::open_timing(int device, void* stream, WindowRefusal& refusal,
                                                               std::string& detail) {
#ifdef LINGPROBE_HAVE_CUPTI
  State& s = *s_;
  std::lock_guard<std::mutex> lock(s.mu);
  {  // timed calls pending: this one joins them (their slot and lock), on their device only
    std::lock_guard<std::mutex> pending(s.pending_mu);
    if (s.timing_calls > 0) return s.join_timing(device, stream, refusal, detail);
  }
  WindowSlot slot;
  State::Claimed c;
  if (!s.claim_gpu(device, slot, c, refusal, detail)) return nullptr;
  auto w = std::make_unique<TimingWindow>(&s, c.d, device, stream, c.t0);
  if (const format::Status began = s.cupti->begin_timing(c.ctx); !began.ok()) {
    s.begin_failed(c, began, refusal, detail);
    return nullptr;
  }
  slot.keep();
  s.local_epoch.fetch_add(1);  // odd while timed calls are pending (the last one bumps it back)
  std::lock_guard<std::mutex> pending(s.pending_mu);
  w->began(false);
  s.timing_calls = 1;
  s.timing_device = device;
  s.timing_lock_fd = c.lock_fd;
  refusal = WindowRefusal::None;
  return w;
#else
  (void)device;
  (void)stream;
  (void)detail;
  refusal = WindowRefusal::NotBuilt;
  return nullptr;
#endif
}

}  // namespace lingprobe::gpu
