#include "api/exit_signals.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <memory>
#include <mutex>
#include <thread>

#include "api/log.h"

namespace lingprobe::api {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGHUP, SIGINT};
constexpr int kCount = sizeof kSignals / sizeof kSignals[0];

struct State {
  int pipe_read = -1, pipe_write = -1;
  bool installed[kCount] = {};
  struct sigaction previous[kCount];
  std::atomic<int> pending{0};
  void (*finalize)(const char* signal_name) = nullptr;
};
State g;  // read by the handler: plain data, set before the handlers go in

void restore_dispositions() {
  for (int i = 0; i < kCount; ++i)
    if (g.installed[i]) ::sigaction(kSignals[i], &g.previous[i], nullptr);
}

void on_signal(int sig) {
  const int saved = errno;
  int none = 0;
  if (g.pending.compare_exchange_strong(none, sig)) {
    const unsigned char byte = static_cast<unsigned char>(sig);
    if (::write(g.pipe_write, &byte, 1) != 1) {  // cannot hand over: end as if we were not here
      restore_dispositions();
      ::raise(sig);
    }
  } else {  // a second signal while finalizing: end now
    restore_dispositions();
    ::raise(sig);
  }
  errno = saved;
}

void finalize_then_raise() {
  unsigned char byte = 0;
  while (::read(g.pipe_read, &byte, 1) < 0 && errno == EINTR) {
  }
  const int sig = byte;
  // The finalize path runs on its own thread so that a hang cannot keep the process alive past the bound.
  auto done = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
  auto finished = std::make_shared<bool>(false);
  std::thread([done, finished, sig] {
    g.finalize(signal_name(sig).c_str());
    std::lock_guard<std::mutex> lock(done->first);
    *finished = true;
    done->second.notify_all();
  }).detach();
  {
    std::unique_lock<std::mutex> lock(done->first);
    if (!done->second.wait_for(lock, std::chrono::seconds(kFinalizeSeconds), [&] { return *finished; }))
      log_error("finalize did not end within " + std::to_string(kFinalizeSeconds) + " s of signal " +
                std::to_string(sig) + "; the process ends without it");
  }
  restore_dispositions();
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);  // the default action: the process ends, killed by `sig`
}

}  // namespace

void install_exit_signal_flush(void (*finalize)(const char* signal_name)) {
  static std::once_flag once;
  std::call_once(once, [finalize] {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    g.pipe_read = fds[0];
    g.pipe_write = fds[1];
    g.finalize = finalize;
    // The reader blocks the signals: they are handled on the program's threads, never on it.
    sigset_t block, before;
    sigemptyset(&block);
    for (int s : kSignals) sigaddset(&block, s);
    pthread_sigmask(SIG_BLOCK, &block, &before);
    try {
      std::thread(finalize_then_raise).detach();
    } catch (...) {
      pthread_sigmask(SIG_SETMASK, &before, nullptr);
      return;  // no thread: no handlers (the signals keep their defaults)
    }
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    for (int i = 0; i < kCount; ++i) {
      struct sigaction now;
      if (::sigaction(kSignals[i], nullptr, &now) != 0 || now.sa_handler != SIG_DFL) continue;
      struct sigaction ours {};
      ours.sa_handler = on_signal;
      sigemptyset(&ours.sa_mask);
      ours.sa_flags = SA_RESTART;
      g.previous[i] = now;
      g.installed[i] = ::sigaction(kSignals[i], &ours, nullptr) == 0;
    }
  });
}

void exit_signals_after_fork() { restore_dispositions(); }

std::string signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    case SIGABRT: return "SIGABRT";
    case SIGALRM: return "SIGALRM";
  }
  return "SIG" + std::to_string(sig);
}

}  // namespace lingprobe::api
