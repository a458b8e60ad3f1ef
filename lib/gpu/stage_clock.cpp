#include "gpu/stage_clock.h"

#include <chrono>
#include <thread>

#include "gpu/cuda_driver.h"

namespace lingprobe::gpu {

struct StageClock::Open {
  bool active = false;
  uint32_t stage = 0;
  int device = -1;
  void* stream = nullptr;
  void* start = nullptr;
  uint64_t epoch = 0;
};

namespace {
constexpr size_t kMaxPending = 4096;  // intervals waiting for their GPU; past it they are lost (counted)
thread_local StageClock* t_clock = nullptr;
thread_local void* t_slot = nullptr;

// Relaxed stream-capture mode around lingprobe's own calls, so they stay legal
// while another thread captures in global mode.
struct RelaxedCapture {
  explicit RelaxedCapture(CudaDriver* d) : d_(d), previous_(d->relax_capture_mode()) {}
  ~RelaxedCapture() { d_->restore_capture_mode(previous_); }
  CudaDriver* d_;
  int previous_;
};
}  // namespace

StageClock::StageClock(CudaDriver* driver, std::function<uint64_t(int)> window_epoch)
    : d_(driver), epoch_(std::move(window_epoch)) {}

StageClock::~StageClock() {
  std::lock_guard<std::mutex> lock(mu_);
  for (const Closed& c : pending_) d_->destroy_event(c.device, c.start), d_->destroy_event(c.device, c.end);
  for (const auto& o : slots_)
    if (o->active) d_->destroy_event(o->device, o->start);
}

StageClock::Open* StageClock::open_slot() {
  if (t_clock == this) return static_cast<Open*>(t_slot);
  std::lock_guard<std::mutex> lock(mu_);
  slots_.push_back(std::make_unique<Open>());
  t_clock = this;
  t_slot = slots_.back().get();
  return slots_.back().get();
}

void StageClock::count_lost(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  ++lost_[why];
}

void StageClock::begin(uint32_t stage, int device, void* stream) {
  if (finalized_.load(std::memory_order_relaxed)) return;
  Open* o = open_slot();
  if (o->active) close(*o, true);  // a stage change this clock did not see (cannot happen through end())
  RelaxedCapture relaxed(d_);
  if (d_->stream_capture(stream) != CudaDriver::Capture::None) {
    count_lost("stream_capturing");
    return;
  }
  const uint64_t epoch = epoch_ ? epoch_(device) : 0;
  std::string error;
  void* ev = d_->record_event(device, stream, error, true);
  if (!ev) {
    count_lost("event_failed");
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (finalized_.load()) {
    d_->destroy_event(device, ev);
    return;
  }
  *o = Open{true, stage, device, stream, ev, epoch};
}

void StageClock::end() {
  if (t_clock != this) return;
  Open* o = static_cast<Open*>(t_slot);
  if (o->active) close(*o, true);
}

void StageClock::close(Open& o, bool check_capture) {
  Open was;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!o.active) return;
    was = o;
    o.active = false;
  }
  RelaxedCapture relaxed(d_);
  void* ev = nullptr;
  std::string error;
  if (check_capture && d_->stream_capture(was.stream) != CudaDriver::Capture::None) {
    error = "stream_capturing";
  } else if (!(ev = d_->record_event(was.device, was.stream, error, true))) {
    error = "event_failed";
  }
  const uint64_t epoch = epoch_ ? epoch_(was.device) : 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (!error.empty() || pending_.size() >= kMaxPending) {
    ++lost_[error.empty() ? "too_many_pending" : error];
    d_->destroy_event(was.device, was.start);
    if (ev) d_->destroy_event(was.device, ev);
    return;
  }
  // Clean: the epoch did not move and no window was open at the start (odd).
  pending_.push_back({was.stage, was.device, was.start, ev, epoch == was.epoch && (epoch & 1) == 0});
}

void StageClock::poll() {
  std::vector<Closed> work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    work.swap(pending_);
  }
  if (work.empty()) return;
  RelaxedCapture relaxed(d_);
  std::vector<Closed> waiting;
  std::map<uint32_t, StageTime> add;
  std::map<std::string, uint64_t> lost;
  for (const Closed& c : work) {
    const CudaDriver::EventState s = d_->query_event(c.device, c.end);
    if (s == CudaDriver::EventState::Pending) {
      waiting.push_back(c);
      continue;
    }
    float ms = 0;
    if (s == CudaDriver::EventState::Done && d_->elapsed_ms(c.device, c.start, c.end, ms)) {
      StageTime& t = add[c.stage];
      t.gpu_us += 1000.0 * ms;
      ++t.intervals;
      if (c.clean) t.clean_gpu_us += 1000.0 * ms, ++t.clean_intervals;
    } else {
      ++lost["event_failed"];
    }
    d_->destroy_event(c.device, c.start);
    d_->destroy_event(c.device, c.end);
  }
  std::lock_guard<std::mutex> lock(mu_);
  pending_.insert(pending_.begin(), waiting.begin(), waiting.end());
  for (const auto& [stage, t] : add) {
    StageTime& to = totals_[stage];
    to.gpu_us += t.gpu_us, to.clean_gpu_us += t.clean_gpu_us;
    to.intervals += t.intervals, to.clean_intervals += t.clean_intervals;
  }
  for (const auto& [why, n] : lost) lost_[why] += n;
}

void StageClock::finalize(int wait_ms) {
  std::vector<Open*> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finalized_.exchange(true)) return;
    for (const auto& o : slots_) open.push_back(o.get());
  }
  for (Open* o : open) close(*o, false);  // another thread's stream: no capture at exit
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  for (;;) {
    poll();
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pending_.empty()) return;
      if (std::chrono::steady_clock::now() >= deadline) {
        lost_["unfinished_at_exit"] += pending_.size();
        for (const Closed& c : pending_) d_->destroy_event(c.device, c.start), d_->destroy_event(c.device, c.end);
        pending_.clear();
        return;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::map<uint32_t, StageTime> StageClock::totals() {
  std::lock_guard<std::mutex> lock(mu_);
  return totals_;
}

std::map<std::string, uint64_t> StageClock::lost() {
  std::lock_guard<std::mutex> lock(mu_);
  return lost_;
}

}  // namespace lingprobe::gpu
