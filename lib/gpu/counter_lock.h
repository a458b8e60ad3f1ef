// The launch's per-GPU counter lock: the processes of one launch that share a
// GPU open their counter windows one at a time (the counter hardware serves
// one profiling session), through flock on RUN_DIR/claims/counters-{uuid}.lock.
// The same file's first 8 bytes are the GPU's window epoch, bumped by the
// lock's holder when it takes and gives back the lock (odd while a window is
// open) and read by every process's stage clock. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace lingprobe::gpu {

class CounterLock {
 public:
  // `open_directory`: a new fd of the lock files' directory (created if
  // needed, without following a symlink: the run directory's rule, which is
  // api's), or -1 when there is none (windows of different processes are
  // then not serialised).
  using OpenDirectory = std::function<int()>;
  static constexpr int kTimedOut = -2;
  static constexpr int kWaitSeconds = 30;

  // `wait_seconds`: how long lock() waits for another process's window.
  explicit CounterLock(OpenDirectory open_directory, int wait_seconds = kWaitSeconds);
  ~CounterLock();
  CounterLock(const CounterLock&) = delete;
  CounterLock& operator=(const CounterLock&) = delete;

  // Takes the lock of the GPU `uuid` (waiting up to kWaitSeconds): its fd, -1
  // without a lock file, kTimedOut when another process kept it.
  int lock(const std::string& uuid);
  // Gives it back (fd from lock; -1 and kTimedOut are ignored).
  void unlock(int fd);
  // The epoch file's counter of CUDA device `device` (GPU `uuid`), 0 when it cannot be read.
  uint64_t shared_epoch(int device, const std::string& uuid);

 private:
  int open_file(const std::string& uuid);
  static void bump_epoch(int fd);
  OpenDirectory open_directory_;
  int wait_seconds_;
  std::mutex epoch_mu_;
  std::atomic<int> epoch_fds_[64];  // kept open for the epoch reads; -1 until opened
};

}  // namespace lingprobe::gpu
