#include "gpu/counter_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <thread>

namespace lingprobe::gpu {

CounterLock::CounterLock(OpenDirectory open_directory, int wait_seconds)
    : open_directory_(std::move(open_directory)), wait_seconds_(wait_seconds) {
  for (auto& fd : epoch_fds_) fd.store(-1);
}

CounterLock::~CounterLock() {
  for (auto& fd : epoch_fds_)
    if (const int f = fd.exchange(-1); f >= 0) ::close(f);
}

int CounterLock::open_file(const std::string& uuid) {
  const int dir = open_directory_ ? open_directory_() : -1;
  if (dir < 0) return -1;
  const int fd = ::openat(dir, ("counters-" + uuid + ".lock").c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  ::close(dir);
  return fd;
}

void CounterLock::bump_epoch(int fd) {
  uint64_t n = 0;
  if (::pread(fd, &n, sizeof n, 0) != static_cast<ssize_t>(sizeof n)) n = 0;
  ++n;
  (void)!::pwrite(fd, &n, sizeof n, 0);
}

int CounterLock::lock(const std::string& uuid) {
  const int fd = open_file(uuid);
  if (fd < 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_seconds_);
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if ((errno != EWOULDBLOCK && errno != EINTR) || std::chrono::steady_clock::now() >= deadline) {
      const bool timed_out = errno == EWOULDBLOCK || errno == EINTR;
      ::close(fd);
      return timed_out ? kTimedOut : -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  bump_epoch(fd);
  return fd;
}

void CounterLock::unlock(int fd) {
  if (fd < 0) return;
  bump_epoch(fd);
  ::flock(fd, LOCK_UN);
  ::close(fd);
}

uint64_t CounterLock::shared_epoch(int device, const std::string& uuid) {
  if (device < 0 || device >= 64) return 0;
  int fd = epoch_fds_[device].load();
  if (fd < 0) {  // opened once per device (created as the lock is: the first window may come later)
    std::lock_guard<std::mutex> lock(epoch_mu_);
    fd = epoch_fds_[device].load();
    if (fd < 0) {
      fd = open_file(uuid);
      if (fd >= 0) epoch_fds_[device].store(fd);
    }
    if (fd < 0) return 0;
  }
  uint64_t n = 0;
  if (::pread(fd, &n, sizeof n, 0) != static_cast<ssize_t>(sizeof n)) n = 0;
  return n;
}

}  // namespace lingprobe::gpu
