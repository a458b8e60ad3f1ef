// The math settings a snapshot recorded, applied before its call is
// replayed (at::globalContext()'s TF32, reduced-precision reductions, cuDNN
// and SDPA backends, determinism, threads), and the recorded autocast region
// re-entered around the call so that the same casts and kernels run.
#pragma once

#include "capture/torch_guard.h"

#include <sstream>

#include "capture/autocast_state.h"
#include "format/pickle.h"
#include "replay/snapshot_values.h"

namespace lingprobe::replay {

// Applies the recorded policy (`p` may be null: nothing), saying in `log` what it set.
void apply_math_policy(const format::PickleValue* p, std::ostringstream& log);

// Re-enters the recorded autocast region around the replayed call, so that
// a call recorded inside one (its inputs before the casts) runs the same
// casts and kernels; the thread's own state comes back after.
class AutocastScope {
 public:
  AutocastScope(const format::PickleValue* policy, std::ostringstream& log)
      : saved_(capture::AutocastState::current()) {
    if (!policy || !policy->find("autocast_cuda")) return;
    auto text = [&](const char* k) {
      const format::PickleValue* v = policy->find(k);
      return v && v->kind() == format::PickleValue::Kind::String ? v->as_string() : std::string();
    };
    capture::AutocastState s = saved_;
    s.cuda = text("autocast_cuda") == "true";
    s.cpu = text("autocast_cpu") == "true";
    s.cache = text("autocast_cache") != "false";
    if (s.cuda) s.cuda_dtype = scalar_type_of(text("autocast_cuda_dtype"));
    if (s.cpu) s.cpu_dtype = scalar_type_of(text("autocast_cpu_dtype"));
    if (s.cuda) log << "autocast: cuda " << text("autocast_cuda_dtype") << "\n";
    if (s.cpu) log << "autocast: cpu " << text("autocast_cpu_dtype") << "\n";
    s.apply();
    entered_ = true;
  }
  ~AutocastScope() {
    if (!entered_) return;
    at::autocast::clear_cache();
    saved_.apply();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  capture::AutocastState saved_;
  bool entered_ = false;
};

}  // namespace lingprobe::replay
