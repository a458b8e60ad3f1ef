// lingprobe's calls into torch that take torch's RecordFunction callback
// mutex (add/removeCallback, getStepCallbacks, and enableRecordFunction,
// whose thread-local rebuild copies the global callbacks under it) pass
// through this gate. pthread_atfork's prepare step closes it and waits until
// no lingprobe thread is inside, so a fork never leaves that mutex held by a
// thread the child does not have (the child's first op would wait on it
// forever); it then brings the forking thread's own copy of the callbacks up
// to date, so that the child's first op finds it current. Other callers of those torch functions (torch.profiler on
// another thread) are not lingprobe's to gate: forking then is unsafe without it too.
#pragma once

#include <atomic>

namespace lingprobe::capture {

class ForkGate {
 public:
  // Around one call into torch's callback machinery. Lock-free; waits only
  // while a fork is being prepared.
  static void enter();
  static void leave();
  // pthread_atfork: prepare closes the gate and waits for the threads inside;
  // parent and child open it again.
  static void prepare_fork();
  static void after_fork();
};

struct ForkGateSection {
  ForkGateSection() { ForkGate::enter(); }
  ~ForkGateSection() { ForkGate::leave(); }
  ForkGateSection(const ForkGateSection&) = delete;
  ForkGateSection& operator=(const ForkGateSection&) = delete;
};

}  // namespace lingprobe::capture
