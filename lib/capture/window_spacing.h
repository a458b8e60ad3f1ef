// Which calls are never timed: a thread's next call after a counter window.
// The window's end leaves the GPU idle, its clocks and L2 in the state the
// window's replay passes left (cache lines written back, the next kernel
// alone on the device), a state the unprofiled run never has at that call:
// a weight cast timed there ran 7-12% faster than in torch.profiler's trace
// of the same call in every gate run (docs/COUNTERS.md). Such a call leaves
// its key's timing to a later call. No torch here.
#pragma once

#include <cstdint>

namespace lingprobe::capture {

// Per thread: the calls_seen count (SampledCall::thread_call) of the thread's
// last counter-window call. A count of 0 is unknown and matches nothing.
// Thread-safe (each thread sees its own).
class WindowSpacing {
 public:
  // The calling thread's call `thread_call` opened a counter window.
  void counter_window_opened(uint64_t thread_call);
  // Is `thread_call` the calling thread's next call after its last counter window?
  bool follows_counter_window(uint64_t thread_call) const;
};

}  // namespace lingprobe::capture
