// The process's counter windows over CUPTI (gpu/cupti_profiler), torch-free:
// the probe of the counters (once per process, its metadata record), the GPU
// identity every profile carries, the launch's per-GPU lock (counter_lock),
// the NVML guard around each window, the process-wide hold (a profiler
// starting), and the stall accounting. Without CUPTI at build time every
// window is refused (NotBuilt). Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "format/profile_files.h"
#include "gpu/counter_lock.h"

namespace lingprobe::gpu {

// Why a window did not open: the code callers switch on (api names them in its records).
enum class WindowRefusal {
  None,
  NoDriver,        // the CUDA driver cannot be loaded (the detail says why)
  ProfilerActive,  // held: a profiler is starting or running (hold_counters)
  WindowBusy,      // another window of this process is open
  SubscriberHeld,  // another tool holds CUPTI's subscriber
  HardwareBusy,    // the counter hardware or the launch's GPU lock is busy now: a later call may get one
  Unavailable,     // counters cannot be read in this process (the probe's reason)
  NotOpened,       // CUPTI refused for another reason (the detail, in the run log)
  NotBuilt,        // lingprobe was built without CUPTI's headers
};

// An open window: close() after the op (the profile), or destroy it unclosed when the op threw.
class OpenCounterWindow {
 public:
  virtual ~OpenCounterWindow() = default;
  // At the op's end, on its thread, before close(): a timing window stops
  // naming launches and nothing waits; close() may then run on another
  // thread. A counter window does all in close(), on the op's thread.
  virtual void stop() {}
  virtual format::ProfileData close() = 0;
};

class CounterWindows {
 public:
  struct Options {
    std::vector<std::string> metrics;                // the counters asked for
    std::function<void(std::string)> on_probe;       // the probe's result once, as a metadata record line
    CounterLock::OpenDirectory open_lock_directory;  // where the launch's per-GPU locks live
    bool unguarded = false;                          // windows even while another tool holds CUPTI's subscriber
  };
  explicit CounterWindows(Options options);
  ~CounterWindows();

  // A window on `device`'s primary context for the op's kernels on `stream`
  // (a CUstream), or nullptr with the refusal and its detail.
  std::unique_ptr<OpenCounterWindow> open(int device, void* stream, WindowRefusal& refusal, std::string& detail);
  // A timed call on `device`'s primary context: the kernels the calling
  // thread launches until stop(), by CUPTI Activity alone, so they run as
  // without lingprobe (no replay, no launch held, no wait at the op's end).
  // close(), on any thread, waits for `stream` (the op's CUstream) to pass the
  // op's end without a context synchronisation (capture-safe). Timed calls may
  // be pending several at once; the same refusals as a counter window
  // otherwise. Its profile has the one metric gpu__time_duration.sum.
  std::unique_ptr<OpenCounterWindow> open_timing(int device, void* stream, WindowRefusal& refusal, std::string& detail);
  // The window epoch of `device`'s GPU for the stage clock: the lock file's
  // counter (every process's windows on the GPU) in the high half, this
  // process's own windows in the low half; odd halves while a window is open.
  uint64_t window_epoch(int device);
  // A counter window's call on `device` has ended, lingprobe's own work at its end included (capture's end hook:
  // the window's close alone comes before evaluating its metrics and building the call's job, which outlasted the
  // 2 ms on an H100: docs/COUNTERS.md, "The settle rule").
  void counter_call_ended(int device);
  // Has a counter window's call on `device` ended within the last 2 ms (window_settle.h)? A timed call waits for a
  // later call of its key then. Lock-free, any thread.
  bool settling_after_window(int device) const;
  // The writer's poll: Activity's kernel kind, left armed by the last session of timed calls, disabled once no
  // session has been open for a second (cupti_profiler.h: disarm_timing_activity); also at destruction.
  void poll();
  uint64_t windows() const;   // windows closed (counters and timing)
  uint64_t stall_us() const;  // the calling threads' time in windows and refused attempts' waits

  struct State;

 private:
  std::unique_ptr<State> s_;
};

// Process-wide, with or without a CounterWindows: while held (another CUPTI
// client such as torch.profiler is starting or running) no window opens
// (ProfilerActive). `hold` waits up to `wait_seconds` for a window already
// open on another thread to close; false if it stayed open. Release with
// hold = false (holds nest).
bool hold_counters(bool hold, int wait_seconds);

}  // namespace lingprobe::gpu
