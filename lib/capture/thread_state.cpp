#include "capture/thread_state.h"

#include <sys/syscall.h>
#include <unistd.h>

namespace lingprobe::capture {
namespace {

thread_local ThreadRegistry* t_registry = nullptr;
thread_local ThreadState** t_cache = nullptr;  // the caller's pointer to this thread's state

}  // namespace

uint32_t ThreadState::add_entry(uint64_t hash, const uint64_t* key, size_t words,
                                std::shared_ptr<const format::JsonValue> arguments, SampleKey* sample) {
  const auto entry = static_cast<uint32_t>(entries.size());
  InputEntry& e = entries.emplace_back();
  e.arguments = std::move(arguments);
  e.sample = sample;
  e.key_offset = inputs.insert(hash, key, words, entry);
  e.key_words = static_cast<uint32_t>(words);
  return entry;
}

SignatureCounts::~SignatureCounts() {
  for (auto& chunk : chunks_) delete[] chunk.load(std::memory_order_relaxed);
}

Counter* SignatureCounts::allocate(size_t chunk) {
  auto* c = new Counter[kCountsChunk];
  for (size_t i = 0; i < kCountsChunk; ++i) c[i].store(0, std::memory_order_relaxed);
  chunks_[chunk].store(c, std::memory_order_release);
  return c;
}

void SignatureCounts::add_to(std::vector<uint64_t>& totals) const {
  const size_t n = totals.size();
  for (size_t chunk = 0; chunk * kCountsChunk < n; ++chunk)
    if (const Counter* c = chunks_[chunk].load(std::memory_order_acquire))
      for (size_t id = chunk * kCountsChunk; id < n && id < (chunk + 1) * kCountsChunk; ++id)
        totals[id] += c[id % kCountsChunk].load(std::memory_order_relaxed);
}

void SideTotals::add(const ThreadState& ts) {
  calls_seen += ts.calls_seen.load(std::memory_order_relaxed);
  nested_seen += ts.nested_seen.load(std::memory_order_relaxed);
  nested_suppressed += ts.nested_suppressed.load(std::memory_order_relaxed);
  for (int k = 0; k < kCompileTracingKinds; ++k) traced[k] += ts.traced[k].load(std::memory_order_relaxed);
  if (const CollectiveTimes* c = ts.collectives.load(std::memory_order_acquire))
    for (size_t stage = 0; stage < kMaxStages; ++stage)
      if (const uint64_t n = c->calls[stage].load(std::memory_order_relaxed)) {
        auto& [calls, ns] = collectives[static_cast<StageId>(stage)];
        calls += n;
        ns += c->ns[stage].load(std::memory_order_relaxed);
      }
}

// Retires the thread's state at its exit: its counts into the registry's, its buffer closed.
struct ThreadStateOwner {
  ~ThreadStateOwner() {
    if (!t_cache || !*t_cache) return;
    ThreadState* ts = *t_cache;
    if (ts->buffer) ts->buffer->close();
    t_registry->retire(ts);
    *t_cache = nullptr;
    delete ts;
  }
};
thread_local ThreadStateOwner t_owner;

ThreadState* ThreadRegistry::add_this_thread(ThreadState** cache) {
  auto* ts = new ThreadState;
  ts->tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  ts->stages = this_thread_stage_stack();
  (void)&t_owner;  // instantiate the owner so the state is retired at thread exit
  {
    std::lock_guard<std::mutex> lock(mu_);
    threads_.push_back(ts);
  }
  t_registry = this;
  t_cache = cache;
  *cache = ts;
  return ts;
}

void ThreadRegistry::retire(ThreadState* ts) {
  std::lock_guard<std::mutex> lock(mu_);
  retired_.add(*ts);
  const uint32_t n = signatures_.load(std::memory_order_acquire);
  if (retired_counts_.size() < n) retired_counts_.resize(n, 0);
  ts->counts.add_to(retired_counts_);
  for (auto it = threads_.begin(); it != threads_.end(); ++it)
    if (*it == ts) {
      threads_.erase(it);
      break;
    }
}

std::vector<uint64_t> ThreadRegistry::signature_totals() {
  std::vector<uint64_t> totals(signatures_.load(std::memory_order_acquire), 0);
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t id = 0; id < totals.size() && id < retired_counts_.size(); ++id) totals[id] = retired_counts_[id];
  for (const ThreadState* ts : threads_) ts->counts.add_to(totals);
  return totals;
}

SideTotals ThreadRegistry::side_totals() {
  std::lock_guard<std::mutex> lock(mu_);
  SideTotals t = retired_;
  for (const ThreadState* ts : threads_) t.add(*ts);
  return t;
}

void time_collective(ThreadState& ts, const OpInfo& op, int64_t now) {
  if (ts.collective_t0) {
    bump(ts.collectives.load(std::memory_order_relaxed)->ns[ts.collective_stage],
         static_cast<uint64_t>(now - ts.collective_t0));
    ts.collective_t0 = 0;
  }
  if (!op.collective) return;
  CollectiveTimes* c = ts.collectives.load(std::memory_order_relaxed);
  if (!c) ts.collectives.store(c = new CollectiveTimes, std::memory_order_release);
  ts.collective_stage = top_stage(*ts.stages);
  if (op.collective == 1) bump(c->calls[ts.collective_stage]);
  ts.collective_t0 = now;
}

}  // namespace lingprobe::capture
