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
    if (!n || pinned.load() >= n) return;
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
    if (void* base = memory->allocate(device, n)) {
      pinned.store(n);
      ready.store(new Buffer{device, base, n});
    }
  }
  void release(const Buffer& b) {
    memory->release(b.device, b.base);
    pinned.store(0);
  }
  void wait(const std::vector<std::pair<int, void*>>& events) {
    for (const auto& [device, event] : events) memory->wait_and_destroy(device, event);
  }
  // On the writer's thread: a buffer a call let go, once the copies into it have completed: kept for the next call
  // too large for the device budget (allocating is what stalls), or replaced by the larger one asked for meanwhile.
  void come_back(const Buffer& b, const std::vector<std::pair<int, void*>>& events) {
    wait(events);
    if (closed.load() || grow_to > b.size) {
      release(b);
      if (!closed.load()) make(std::exchange(grow_to, 0));
      return;
    }
    ready.store(new Buffer(b));
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
  core_->wanted_device.store(device);
  size_t w = core_->wanted.load();
  while (nbytes > w && !core_->wanted.compare_exchange_weak(w, nbytes)) {
  }
  if (core_->scheduled.exchange(true)) return;
  std::shared_ptr<ReserveCore> core = core_;
  if (!core->run([core] { core->allocate(); })) core->scheduled.store(false);  // finishing: nothing more is taken
}

std::shared_ptr<PinnedReserve::Lease> PinnedReserve::take(size_t nbytes) {
  ReserveCore::Buffer* b = core_->ready.load();
  if (!b || b->size < nbytes || !core_->ready.compare_exchange_strong(b, nullptr)) return nullptr;
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
  try {
    if (core->run([core, buffer, events] { core->come_back(buffer, events); })) return;
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
