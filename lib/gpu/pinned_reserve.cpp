#include "gpu/pinned_reserve.h"

#include <algorithm>
#include <utility>

namespace lingprobe::gpu {

struct ReserveCore {
  struct Buffer {
    int device;
    void* base;
    size_t size;
  };
  PinnedReserve::Memory* memory;
  PinnedReserve::RunOnWriter run;
  std::atomic<Buffer*> ready{nullptr};  // the buffer while no call holds it: take's one exchange
  std::atomic<size_t> wanted{0};
  std::atomic<int> wanted_device{0};
  std::atomic<bool> scheduled{false};  // an allocation chore is queued
  std::atomic<uint64_t> pinned{0};     // the one buffer's size, ready or held by a call; 0: none
  std::atomic<bool> closed{false};     // the reserve is gone: a buffer that comes back is freed
  size_t grow_to = 0;                  // the writer's: a larger size asked for while a call held the buffer

  // On the writer's thread: the largest size asked for since the last chore, unless the buffer holds it (ready,
  // or back once its call is done). A smaller ready buffer is replaced; a held one is replaced when it comes back.
  void allocate() {
    scheduled.store(false);
    const size_t n = wanted.exchange(0);
    if (!n || closed.load() || pinned.load() >= n) return;
    Buffer* b = ready.exchange(nullptr);
    if (!b && pinned.load()) {
      grow_to = std::max(grow_to, n);
      return;
    }
    if (b) release(*b);
    delete b;
    make(n);
  }
  void make(size_t n) {
    const int device = wanted_device.load();
    void* base = memory->allocate(device, n);
    if (!base) return;
    pinned.store(n);
    try {
      ready.store(new Buffer{device, base, n});
    } catch (...) {
      release(Buffer{device, base, n});
    }
  }
  void release(const Buffer& b) {
    memory->release(b.device, b.base);
    pinned.store(0);
  }
  // Whether every copy into the buffer is known to have completed.
  bool wait(const std::vector<std::pair<int, void*>>& events) {
    bool all = true;
    for (const auto& [device, event] : events) all = memory->wait_and_destroy(device, event) && all;
    return all;
  }
  // On the writer's thread: a buffer a call let go, once the copies into it have completed: kept for the next call
  // too large for the device budget (allocating is what stalls), or replaced by the larger one asked for meanwhile.
  // One with a copy not known to have completed (an event that failed or was never recorded) is not used again.
  void come_back(const Buffer& b, const std::vector<std::pair<int, void*>>& events, bool untracked) {
    const bool settled = wait(events) && !untracked;
    if (closed.load() || !settled || grow_to > b.size) {
      release(b);
      if (!closed.load() && grow_to) make(std::exchange(grow_to, 0));
      return;
    }
    try {
      ready.store(new Buffer(b));
    } catch (...) {
      release(b);
    }
  }
};

PinnedReserve::PinnedReserve(Memory* memory, RunOnWriter run) : core_(std::make_shared<ReserveCore>()) {
  core_->memory = memory;
  core_->run = std::move(run);
}

PinnedReserve::~PinnedReserve() {
  core_->closed.store(true);
  if (ReserveCore::Buffer* b = core_->ready.exchange(nullptr)) {
    core_->release(*b);
    delete b;
  }
}

void PinnedReserve::want(int device, size_t nbytes) {
  size_t w = core_->wanted.load();
  while (nbytes > w && !core_->wanted.compare_exchange_weak(w, nbytes)) {
  }
  if (nbytes > w) core_->wanted_device.store(device);  // the device of the largest ask
  if (core_->scheduled.exchange(true)) return;
  std::shared_ptr<ReserveCore> core = core_;
  bool queued = false;
  try {
    queued = core->run([core] { core->allocate(); });
  } catch (...) {
  }
  if (!queued) core->scheduled.store(false);  // finishing (nothing more is taken), or no room for the chore
}

// The buffer is taken out before it is looked at: the writer's allocate() may replace (and delete) a ready one at
// any time, never one a call holds. A buffer too small goes back; nothing else can have filled the slot meanwhile.
std::shared_ptr<PinnedReserve::Lease> PinnedReserve::take(size_t nbytes) {
  ReserveCore::Buffer* b = core_->ready.exchange(nullptr);
  if (!b) return nullptr;
  if (b->size < nbytes) {
    core_->ready.store(b);
    return nullptr;
  }
  std::shared_ptr<Lease> lease;
  try {
    lease = std::make_shared<Lease>(core_, b->device, b->base, b->size);
  } catch (...) {
    core_->release(*b);
  }
  delete b;
  return lease;
}

uint64_t PinnedReserve::pinned_bytes() const { return core_->pinned.load(); }

PinnedReserve::Lease::Lease(std::shared_ptr<ReserveCore> core, int device, void* base, size_t size)
    : core_(std::move(core)), device_(device), base_(base), size_(size) {}

PinnedReserve::Lease::~Lease() {
  std::shared_ptr<ReserveCore> core = core_;
  const ReserveCore::Buffer buffer{device_, base_, size_};
  std::vector<std::pair<int, void*>> events = std::move(events_);
  const bool untracked = untracked_;
  try {
    if (core->run([core, buffer, events, untracked] { core->come_back(buffer, events, untracked); })) return;
  } catch (...) {
  }
  core->wait(events);  // the writer runs no more chores: the process is finishing, and this thread may wait
  core->release(buffer);
}

void* PinnedReserve::Lease::slice(size_t nbytes) {
  if (nbytes > room()) return nullptr;
  void* p = static_cast<char*>(base_) + used_;
  used_ += nbytes;
  return p;
}

}  // namespace lingprobe::gpu
