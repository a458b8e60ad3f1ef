// The floor of SPEC section 7: an empty global RecordFunction callback that
// asks for inputs and outputs, so that the dispatcher boxes every call's
// arguments and does nothing else. Loaded by bench/cpu_bench.py through
// ctypes after `import torch`; floor_install() registers it and returns its
// handle, floor_remove(handle) takes it out again.
#ifndef NDEBUG
#error "compile with -DNDEBUG like every TU that includes ATen headers (SPEC section 5)"
#endif
#include <ATen/record_function.h>

namespace {
std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) { return nullptr; }
void on_end(const at::RecordFunction&, at::ObserverContext*) {}
}  // namespace

extern "C" __attribute__((visibility("default"))) uint64_t floor_install() {
  return at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                            .needsInputs(true)
                            .needsOutputs(true)
                            .scopes({at::RecordScope::FUNCTION}));
}

extern "C" __attribute__((visibility("default"))) void floor_remove(uint64_t handle) { at::removeCallback(handle); }
