#include "capture/compile_tracing.h"

#include "capture/torch_guard.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

#if LINGPROBE_INFRA_MODES
#include <c10/core/impl/TorchDispatchModeTLS.h>
#endif

namespace lingprobe::capture {
CompileTracing compile_tracing_mode() {
#if LINGPROBE_INFRA_MODES
  // Every mode pushed includes the Python key in the thread's dispatch keys. ProxyMode alone is not enough:
  // make_fx's real-mode tracing runs real tensors (fake-mode tracing sets FAKE too).
  if (C10_UNLIKELY(c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Python)) &&
      c10::impl::TorchDispatchModeTLS::get_mode(c10::impl::TorchDispatchModeKey::FAKE).has_value())
    return CompileTracing::FakeTensorMode;
#endif
  return CompileTracing::None;
}

bool has_fake_tensor(c10::ArrayRef<c10::IValue> values, bool* any_tensor) {
  for (const c10::IValue& v : values) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (C10_UNLIKELY(is_fake_tensor(t))) return true;
      if (any_tensor && t.defined()) *any_tensor = true;
    } else if (v.isList() && v.isTensorList()) {    // the inline tag check first: isTensorList is a call
      for (const c10::IValue& t : v.toListRef()) {  // no copy of the list
        if (is_fake_tensor(t.toTensor())) return true;
        if (any_tensor) *any_tensor = true;
      }
    }
  }
  return false;
}

const char* compile_tracing_name(CompileTracing kind) {
  switch (kind) {
    case CompileTracing::FakeTensorMode: return "fake_tensor_mode";
    case CompileTracing::FakeTensorInputs: return "fake_tensor_inputs";
    case CompileTracing::FakeTensorOutputs: return "fake_tensor_outputs";
    case CompileTracing::None: break;
  }
  return "none";
}

}  // namespace lingprobe::capture
