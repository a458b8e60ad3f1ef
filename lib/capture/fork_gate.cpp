#include "capture/fork_gate.h"

#include <sched.h>

#include <ATen/record_function.h>

namespace lingprobe::capture {
namespace {
std::atomic<int> g_inside{0};
std::atomic<bool> g_forking{false};
}  // namespace

void ForkGate::enter() {
  for (;;) {
    g_inside.fetch_add(1, std::memory_order_acq_rel);
    if (!g_forking.load(std::memory_order_acquire)) return;
    g_inside.fetch_sub(1, std::memory_order_acq_rel);  // a fork is being prepared: let it through first
    while (g_forking.load(std::memory_order_acquire)) sched_yield();
  }
}

void ForkGate::leave() { g_inside.fetch_sub(1, std::memory_order_release); }

void ForkGate::prepare_fork() {
  g_forking.store(true, std::memory_order_seq_cst);
  while (g_inside.load(std::memory_order_acquire) != 0) sched_yield();
  // The forking thread's copy of the global callbacks brought up to date now:
  // the child's first op then finds it current and takes no lock. (Otherwise
  // it would rebuild it under torch's mutex, which a parent thread refreshing
  // its own copy after lingprobe's start or stop may hold at the fork.)
  for (int scope = 0; scope < static_cast<int>(at::RecordScope::NUM_SCOPES); ++scope)
    (void)at::getStepCallbacksUnlessEmpty(static_cast<at::RecordScope>(scope));
}

void ForkGate::after_fork() {
  g_inside.store(0, std::memory_order_relaxed);  // the child: only the forking thread, which was not inside
  g_forking.store(false, std::memory_order_release);
}

}  // namespace lingprobe::capture
