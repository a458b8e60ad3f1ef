// The floor of SPEC section 7: an empty global RecordFunction callback that
// asks for inputs and outputs, so that the dispatcher boxes every call's
// arguments and does nothing else. Loaded by bench/cpu_bench.py and
// bench/decode_bench.py through ctypes after `import torch`: floor_install()
// registers it and returns its handle, floor_remove(handle) takes it out again.
// floor_install_toplevel() registers the same empty callback switching
// RecordFunction off on the thread below each top-level call, as lingprobe's
// LINGPROBE_SUPPRESS_NESTED=always does (the top-level floor plus the
// switch's cost); floor_toggle_ns(n) times n off/on pairs of that switch.
#ifndef NDEBUG
#error "compile with -DNDEBUG like every TU that includes ATen headers (SPEC section 5)"
#endif
#include <ATen/record_function.h>

#include <chrono>

namespace {
std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) { return nullptr; }
void on_end(const at::RecordFunction&, at::ObserverContext*) {}

thread_local const at::RecordFunction* t_top = nullptr;  // the top-level call below which RecordFunction is off
std::unique_ptr<at::ObserverContext> on_start_toplevel(const at::RecordFunction& fn) {
  if (!t_top) {
    t_top = &fn;
    at::enableRecordFunction(false);
  }
  return nullptr;
}
void on_end_toplevel(const at::RecordFunction& fn, at::ObserverContext*) {
  if (t_top == &fn) {
    t_top = nullptr;
    at::enableRecordFunction(true);
  }
}

uint64_t install(at::RecordFunctionCallback::StartCallback start, at::RecordFunctionCallback::EndCallback end) {
  return at::addGlobalCallback(
      at::RecordFunctionCallback(start, end).needsInputs(true).needsOutputs(true).scopes({at::RecordScope::FUNCTION}));
}
}  // namespace

extern "C" __attribute__((visibility("default"))) uint64_t floor_install() { return install(on_start, on_end); }

extern "C" __attribute__((visibility("default"))) uint64_t floor_install_toplevel() {
  return install(on_start_toplevel, on_end_toplevel);
}

extern "C" __attribute__((visibility("default"))) void floor_remove(uint64_t handle) { at::removeCallback(handle); }

extern "C" __attribute__((visibility("default"))) double floor_toggle_ns(int n) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    at::enableRecordFunction(false);
    at::enableRecordFunction(true);
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / (n > 0 ? n : 1);
}
