#include "gpu/pinned_reserve.h"

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
  std::atomic<Buffer*> ready{nullptr};
  std::atomic<size_t> wanted{0};
  std::atomic<int> wanted_device{0};
  std::atomic<bool> scheduled{false};  // an allocation chore is queued
  std::atomic<uint64_t> pinned{0};

  // On the writer's thread: the largest buffer asked for since the last chore, unless the ready one holds it.
  void allocate() {
    scheduled.store(false);
    const size_t n = wanted.exchange(0);
    if (!n) return;
    Buffer* b = ready.load();
    if (b && b->size >= n) return;
    if ((b = ready.exchange(nullptr))) free(*b, {});
    delete b;
    const int device = wanted_device.load();
    if (void* base = memory->allocate(device, n)) {
      pinned.fetch_add(n);
      ready.store(new Buffer{device, base, n});
    }
  }
  void free(const Buffer& b, const std::vector<std::pair<int, void*>>& events) {
    for (const auto& [device, event] : events) memory->wait_and_destroy(device, event);
    memory->release(b.device, b.base);
    pinned.fetch_sub(b.size);
  }
};

PinnedReserve::PinnedReserve(Memory* memory, RunOnWriter run) : core_(std::make_shared<ReserveCore>()) {
  core_->memory = memory;
  core_->run = std::move(run);
}

PinnedReserve::~PinnedReserve() {
  if (ReserveCore::Buffer* b = core_->ready.exchange(nullptr)) {
    core_->free(*b, {});
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
    core_->free(*b, {});
  }
  delete b;
  return lease;
}

uint64_t PinnedReserve::pinned_bytes() const { return core_->pinned.load(); }

PinnedReserve::Lease::Lease(std::shared_ptr<ReserveCore> core, int device, void* base, size_t size)
    : core_(std::move(core)), device_(device), base_(base), size_(size) {}

PinnedReserve::Lease::~Lease() {
  std::shared_ptr<ReserveCore> core = core_;
  auto free = [core, buffer = ReserveCore::Buffer{device_, base_, size_}, events = std::move(events_)] {
    core->free(buffer, events);
  };
  try {
    if (core->run(free)) return;
  } catch (...) {
  }
  free();  // the writer runs no more chores: the process is finishing, and this thread may wait
}

void* PinnedReserve::Lease::slice(size_t nbytes) {
  if (nbytes > room()) return nullptr;
  void* p = static_cast<char*>(base_) + used_;
  used_ += nbytes;
  return p;
}

}  // namespace lingprobe::gpu
