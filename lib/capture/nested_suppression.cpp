#include "capture/nested_suppression.h"

namespace lingprobe::capture {
namespace {

constexpr uint32_t kSuppressLearnCalls = 8;       // an op's first calls, nested calls observed, decide auto suppression
constexpr uint32_t kOtherCallbacksRecheck = 256;  // suppressions between two looks at the global callbacks

}  // namespace

// getStepCallbacks counts as a step of sampled callbacks: one may fire at
// this look instead of a call.
bool other_callbacks(ThreadState* ts, at::RecordFunctionCallback::StartCallback own) {
  if (at::hasThreadLocalCallbacks()) return true;
  if (ts->others_recheck == 0) {
    ts->others_recheck = kOtherCallbacksRecheck;
    ts->others_global = false;
    const ForkGateSection gate;
    for (int scope = 0; scope < static_cast<int>(at::RecordScope::NUM_SCOPES); ++scope)  // any scope's ranges nest too
      for (const auto& cb : at::getStepCallbacks(static_cast<at::RecordScope>(scope)).callbacks_)
        if (cb.start_ != own) ts->others_global = true;
  }
  --ts->others_recheck;
  return ts->others_global;
}

void learn_nested_calls(OpInfo* op, uint32_t nested, uint32_t min_nested) {
  const uint64_t total = op->learn_nested.fetch_add(nested, std::memory_order_relaxed) + nested;
  const uint32_t n = op->learn_calls.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n == kSuppressLearnCalls) {
    int8_t learning = -1;
    op->suppress.compare_exchange_strong(learning, total >= static_cast<uint64_t>(min_nested) * n ? 1 : 0,
                                         std::memory_order_relaxed);
  }
}

}  // namespace lingprobe::capture
