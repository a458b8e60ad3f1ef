#include "gpu/stage_clock.h"

#include <chrono>
#include <thread>

#include "gpu/cuda_driver.h"

namespace lingprobe::gpu {

struct StageClock::Open {
  bool active = false;  // all fields under the clock's mu_
  uint32_t stage = 0;
  int device = -1;
  void* stream = nullptr;
  void* start = nullptr;
  uint64_t epoch = 0;
};

namespace {

constexpr size_t kMaxPending = 4096;  // intervals waiting for their GPU; past it they are lost (counted)
std::atomic<uint64_t> g_next_id{1};
std::atomic<uint64_t> g_live{0};  // the live clock's id (a later clock may reuse a freed one's address)

class DriverEvents : public StageEvents {
 public:
  explicit DriverEvents(CudaDriver* d) : d_(d) {}
  bool capturing(void* stream) override { return d_->stream_capture(stream) != CudaDriver::Capture::None; }
  void* record(int device, void* stream) override {
    Relaxed relaxed(d_);  // legal while another thread captures in global mode
    std::string error;
    return d_->record_event(device, stream, error, true);
  }
  State state(int device, void* event) override {
    Relaxed relaxed(d_);
    switch (d_->query_event(device, event)) {
      case CudaDriver::EventState::Done: return State::Done;
      case CudaDriver::EventState::Pending: return State::Pending;
      default: return State::Failed;
    }
  }
  bool elapsed_ms(int device, void* start, void* end, float& ms) override {
    return d_->elapsed_ms(device, start, end, ms);
  }
  void destroy(int device, void* event) override { d_->destroy_event(device, event); }

 private:
  struct Relaxed {
    explicit Relaxed(CudaDriver* d) : d_(d), previous_(d->relax_capture_mode()) {}
    ~Relaxed() { d_->restore_capture_mode(previous_); }
    CudaDriver* d_;
    int previous_;
  };
  CudaDriver* d_;
};

}  // namespace

std::unique_ptr<StageEvents> driver_stage_events(CudaDriver* driver) { return std::make_unique<DriverEvents>(driver); }

// The calling thread's slot: its interval is closed, and the slot freed, when the thread exits.
struct SlotOwner {
  StageClock* clock = nullptr;
  uint64_t id = 0;
  StageClock::Open* slot = nullptr;
  ~SlotOwner() {
    if (!clock || g_live.load() != id || clock->finalized_.load()) return;
    clock->close(*slot);
    std::lock_guard<std::mutex> lock(clock->mu_);
    for (auto it = clock->slots_.begin(); it != clock->slots_.end(); ++it)
      if (it->get() == slot) {
        clock->slots_.erase(it);
        break;
      }
  }
};
namespace {
thread_local SlotOwner t_slot;
}  // namespace

StageClock::StageClock(std::unique_ptr<StageEvents> events, std::function<uint64_t(int)> window_epoch)
    : ev_(std::move(events)), epoch_(std::move(window_epoch)), id_(g_next_id.fetch_add(1)) {
  g_live.store(id_);
}

StageClock::~StageClock() {
  uint64_t self = id_;
  g_live.compare_exchange_strong(self, 0);
  if (finalized_.load() && pending_.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (const Closed& c : pending_) ev_->destroy(c.device, c.start), ev_->destroy(c.device, c.end);
  for (const auto& o : slots_)
    if (o->active) ev_->destroy(o->device, o->start);
}

StageClock::Open* StageClock::open_slot() {
  if (t_slot.clock == this && t_slot.id == id_) return t_slot.slot;
  std::lock_guard<std::mutex> lock(mu_);
  slots_.push_back(std::make_unique<Open>());
  t_slot.clock = this;
  t_slot.id = id_;
  t_slot.slot = slots_.back().get();
  return t_slot.slot;
}

void StageClock::begin(uint32_t stage, int device, void* stream) {
  if (finalized_.load(std::memory_order_relaxed)) return;
  Open* o = open_slot();
  close(*o);  // a stage change this clock did not hear of (end() normally came first)
  if (ev_->capturing(stream)) {
    std::lock_guard<std::mutex> lock(mu_);
    ++lost_["stream_capturing"];
    return;
  }
  const uint64_t epoch = epoch_ ? epoch_(device) : 0;
  void* ev = ev_->record(device, stream);
  std::lock_guard<std::mutex> lock(mu_);
  if (!ev) {
    ++lost_["event_failed"];
  } else if (finalized_.load()) {
    ev_->destroy(device, ev);
  } else {
    o->active = true;
    o->stage = stage, o->device = device, o->stream = stream, o->start = ev, o->epoch = epoch;
  }
}

void StageClock::end() {
  if (finalized_.load(std::memory_order_relaxed) || t_slot.clock != this || t_slot.id != id_) return;
  close(*t_slot.slot);
}

void StageClock::close(Open& o) {
  Open was;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!o.active) return;
    was = o;
    o.active = false;
  }
  void* ev = nullptr;
  const char* error = nullptr;
  if (ev_->capturing(was.stream))
    error = "stream_capturing";
  else if (!(ev = ev_->record(was.device, was.stream)))
    error = "event_failed";
  const uint64_t epoch = epoch_ ? epoch_(was.device) : 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (error || pending_.size() >= kMaxPending) {
    ++lost_[error ? error : "too_many_pending"];
    ev_->destroy(was.device, was.start);
    if (ev) ev_->destroy(was.device, ev);
    return;
  }
  pending_.push_back({was.stage, was.device, was.start, ev, epoch == was.epoch && (epoch & kWindowOpenBits) == 0});
}

void StageClock::poll() {
  if (finalized_.load(std::memory_order_relaxed)) return;  // finalize resolves the rest itself
  std::lock_guard<std::mutex> polling(poll_mu_);
  poll_locked();
}

void StageClock::poll_locked() {
  std::vector<Closed> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    work.swap(pending_);
  }
  if (work.empty()) return;
  std::vector<Closed> waiting;
  std::map<uint32_t, StageTime> add;
  uint64_t failed = 0;
  for (const Closed& c : work) {
    const StageEvents::State s = ev_->state(c.device, c.end);
    if (s == StageEvents::State::Pending) {
      waiting.push_back(c);
      continue;
    }
    float ms = 0;
    if (s == StageEvents::State::Done && ev_->elapsed_ms(c.device, c.start, c.end, ms)) {
      StageTime& t = add[c.stage];
      t.gpu_us += 1000.0 * ms;
      ++t.intervals;
      if (c.clean) t.clean_gpu_us += 1000.0 * ms, ++t.clean_intervals;
    } else {
      ++failed;
    }
    ev_->destroy(c.device, c.start);
    ev_->destroy(c.device, c.end);
  }
  std::lock_guard<std::mutex> lock(mu_);
  pending_.insert(pending_.begin(), waiting.begin(), waiting.end());
  for (const auto& [stage, t] : add) {
    StageTime& to = totals_[stage];
    to.gpu_us += t.gpu_us, to.clean_gpu_us += t.clean_gpu_us;
    to.intervals += t.intervals, to.clean_intervals += t.clean_intervals;
  }
  if (failed) lost_["event_failed"] += failed;
}

void StageClock::finalize(int wait_ms) {
  if (finalized_.exchange(true)) return;
  std::vector<Open*> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& o : slots_) open.push_back(o.get());
  }
  for (Open* o : open) close(*o);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    {
      std::lock_guard<std::mutex> polling(poll_mu_);  // no writer's poll holds intervals out of pending_ now
      poll_locked();
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.empty()) return;
      if (std::chrono::steady_clock::now() >= deadline) {
        lost_["unfinished_at_exit"] += pending_.size();
        for (const Closed& c : pending_) ev_->destroy(c.device, c.start), ev_->destroy(c.device, c.end);
        pending_.clear();
        return;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void StageClock::abandon_after_fork() { finalized_.store(true); }

std::map<uint32_t, StageTime> StageClock::totals() {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

std::map<std::string, uint64_t> StageClock::lost() {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

}  // namespace lingprobe::gpu
