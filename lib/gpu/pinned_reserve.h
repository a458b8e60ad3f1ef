// Pinned host memory for a sampled call whose device copies could never fit
// the device budget (LINGPROBE_SAMPLE_BUDGET_DEVICE; docs/SNAPSHOTS.md, "Large
// tensors"): its copies go straight to the host on the op's stream instead of
// being held on the device. Allocating and freeing pinned memory takes long
// and holds the driver's lock meanwhile: the program's own CUDA calls on every
// thread wait for it (an unsampled linear on an H100 took 114 and 89 ms
// instead of 0.7 while 256 MB buffers came and went). So no calling thread
// does it, and it is done as seldom as it can be: the process has one buffer,
// allocated on the evidence writer's thread when a refused call asks for it
// (want), taken by a later call without waiting (take), and kept when that
// call lets it go, once the copies into it have completed, for the next such
// call; it is replaced only by a larger one asked for, and freed when the
// reserve goes. A taken buffer is a Lease: each copy takes the next slice of
// it, and the event recorded after the copy is kept with it. No CUDA here:
// the memory comes through Memory (the driver, a fake in tests).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace lingprobe::gpu {

struct ReserveCore;  // shared by the reserve and its leases (a lease may outlive the reserve)

class PinnedReserve {
 public:
  struct Memory {
    virtual ~Memory() = default;
    virtual void* allocate(int device, size_t nbytes) = 0;  // nullptr on failure; in `device`'s context
    virtual void release(int device, void* host) = 0;
    // Waits for an event recorded after a copy into the memory and destroys it; false if the wait failed.
    virtual bool wait_and_destroy(int device, void* event) = 0;
  };
  // Runs a chore on the evidence writer's thread; false when it runs no more (the process is finishing): the
  // caller then does it itself.
  using RunOnWriter = std::function<bool(std::function<void()>)>;

  // A taken buffer, used by one sampled call on its thread; its slices live as long as any holder of it does.
  class Lease {
   public:
    Lease(std::shared_ptr<ReserveCore> core, int device, void* base, size_t size);
    ~Lease();  // hands the buffer back through the writer's thread, which waits for the copies' events first
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    size_t size() const { return size_; }
    size_t room() const { return size_ - used_; }
    // The next `nbytes` of the buffer, or nullptr when they do not fit.
    void* slice(size_t nbytes);
    // The event recorded after a copy into a slice (waited for before the memory is used again or freed).
    void add_event(int device, void* event) { events_.emplace_back(device, event); }
    // A copy into a slice whose completion no event will tell: the buffer is not used again.
    void untracked_copy() { untracked_ = true; }

   private:
    std::shared_ptr<ReserveCore> core_;
    int device_;  // whose context allocated it
    void* base_;
    size_t size_, used_ = 0;
    bool untracked_ = false;
    std::vector<std::pair<int, void*>> events_;
  };

  PinnedReserve(Memory* memory, RunOnWriter run);
  ~PinnedReserve();  // the ready buffer is freed, a held one when it comes back

  // Asks for a buffer of at least `nbytes`, for copies from `device`; any thread, never waits (the allocation is
  // the writer's chore).
  void want(int device, size_t nbytes);
  // The ready buffer if it holds `nbytes`, else nullptr; any thread, lock-free.
  std::shared_ptr<Lease> take(size_t nbytes);
  // The buffer's size, ready or held by a call (0: none).
  uint64_t pinned_bytes() const;

 private:
  std::shared_ptr<ReserveCore> core_;
};

}  // namespace lingprobe::gpu
