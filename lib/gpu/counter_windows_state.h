// Internal to gpu's window files (counter_windows.cpp: the counter windows
// and the probe; timed_calls.cpp: the timed calls): the state they share,
// the process's window slot, and the conversions both use. No torch.
#pragma once

#include "gpu/counter_windows.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "format/status.h"
#include "gpu/cuda_driver.h"
#include "gpu/window_settle.h"
#ifdef LINGPROBE_HAVE_CUPTI
#include "gpu/cupti_profiler.h"
#endif

namespace lingprobe::gpu {

// Marks a window opening (refused while held: hold_counters); clears the
// mark unless kept by the window that opened, which releases it.
class WindowSlot {
 public:
  // None, or ProfilerActive (held), WindowBusy (another window of this process is open).
  WindowRefusal acquire();
  void keep() { owned_ = false; }
  static void release();
  static bool held();  // a hold is waiting for the windows to end (hold_counters)
  ~WindowSlot();

 private:
  bool owned_ = false;
};

struct CounterWindows::State {
  explicit State(Options o) : options(std::move(o)), lock(options.open_lock_directory) {}
  Options options;
  CounterLock lock;
  std::mutex mu;  // one open() at a time; the probe's state
  std::string unavailable;
  std::atomic<uint64_t> windows{0}, stall_us{0};
  std::atomic<uint64_t> local_epoch{0};  // this process's windows (see window_epoch)
  WindowSettle settle;                   // when each GPU's last counter window ended
#ifdef LINGPROBE_HAVE_CUPTI
  Cupti* cupti = nullptr;
  MetricSet set;
  bool set_ready = false;
  format::JsonValue identity;
  bool prepare(CudaDriver* d, int device, void* ctx);
  // What claim_gpu took for a window about to begin.
  struct Claimed {
    CudaDriver* d = nullptr;
    void* ctx = nullptr;
    std::chrono::steady_clock::time_point t0, t_locked;
    int lock_fd = -1;
  };
  bool claim_gpu(int device, WindowSlot& slot, Claimed& c, WindowRefusal& refusal, std::string& detail);
  // A window whose begin failed: the GPU's lock given back, the wait charged, the refusal and its detail set.
  void begin_failed(const Claimed& c, const format::Status& began, WindowRefusal& refusal, std::string& detail);
  // A timed call joining the pending ones (under mu and pending_mu); refused while torch.profiler starts.
  std::unique_ptr<OpenCounterWindow> join_timing(int device, void* stream, WindowRefusal& refusal, std::string& detail);
#endif
  // Timed calls stopped at their op's end and not yet completed (by the
  // writer's thread): a counter window about to open completes them first,
  // on its own thread (it waits for the device anyway), rather than be
  // refused. The timed calls begun and not completed share the window slot
  // and the GPU's lock, taken by the first and given back by the last.
  struct PendingTiming {
    virtual void claim_locked() = 0;    // under pending_mu: this completion is under way, off the list
    virtual void finish_claimed() = 0;  // without pending_mu: waits for the device, reads the records

   protected:
    ~PendingTiming() = default;
  };
  std::mutex pending_mu;
  std::condition_variable pending_cv;           // a completion finished
  std::vector<PendingTiming*> pending_timings;  // under pending_mu: stopped, not yet claimed by a completion
  uint32_t timing_calls = 0;                    // under pending_mu: begun, not completed
  uint32_t completing = 0;                      // under pending_mu: completions under way
  int timing_device = -1, timing_lock_fd = -1;  // under pending_mu: while timing_calls > 0
  bool read_now = false;  // under pending_mu: a timed call on another device was refused; until timing_calls is 0
  // Every stopped timed call completed, by this thread or the one already at it (bounded: 10 s).
  void complete_pending_timings() {
    std::unique_lock<std::mutex> lock(pending_mu);
    while (!pending_timings.empty()) {
      PendingTiming* t = pending_timings.back();
      t->claim_locked();  // its other completer (the writer's close, its destructor) now waits for this one
      lock.unlock();
      t->finish_claimed();
      lock.lock();
    }
    pending_cv.wait_for(lock, std::chrono::seconds(10), [&] { return completing == 0; });
  }
  // `window`: a window that opened (else a refused attempt's wait).
  void add_stall(std::chrono::steady_clock::duration d, bool window = false) {
    if (window) windows.fetch_add(1);
    stall_us.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count()));
  }
};

#ifdef LINGPROBE_HAVE_CUPTI
// A launch's attributes as the profile files hold them (no values yet).
format::ProfiledKernel profiled_kernel(const KernelLaunch& k, int device);
// Why a window did not begin, from CUPTI's status.
WindowRefusal refusal_of(const format::Status& s);
#endif

}  // namespace lingprobe::gpu
