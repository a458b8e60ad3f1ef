#include "capture/compile_tracing.h"

#include "capture/torch_guard.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

#if LINGPROBE_INFRA_MODES
#include <c10/core/impl/TorchDispatchModeTLS.h>
#endif

namespace lingprobe::capture {
namespace {

C10_ALWAYS_INLINE bool is_fake(const at::Tensor& t) {
  if (!t.defined()) return false;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const c10::DispatchKeySet ks = impl->key_set();
  if (!ks.has(c10::DispatchKey::Python) || ks.has_backend(c10::BackendComponent::MetaBit)) return false;
  const c10::Storage& storage = impl->unsafe_storage();  // no Python: the data's device, not the reported one
  return storage && storage.device_type() == c10::DeviceType::Meta;
}

}  // namespace

CompileTracing compile_tracing(const at::RecordFunction& fn, bool* tensor_inputs) {
#if LINGPROBE_INFRA_MODES
  // Every mode pushed includes the Python key in the thread's dispatch keys. ProxyMode alone is not enough:
  // make_fx's real-mode tracing runs real tensors (fake-mode tracing sets FAKE too).
  if (C10_UNLIKELY(c10::impl::tls_is_dispatch_key_included(c10::DispatchKey::Python)) &&
      c10::impl::TorchDispatchModeTLS::get_mode(c10::impl::TorchDispatchModeKey::FAKE).has_value())
    return CompileTracing::FakeTensorMode;
#endif
  const auto inputs = fn.inputs();
  return has_fake_tensor(c10::ArrayRef<c10::IValue>(inputs.data(), inputs.size()), tensor_inputs)
             ? CompileTracing::FakeTensorInputs
             : CompileTracing::None;
}

bool has_fake_tensor(c10::ArrayRef<c10::IValue> values, bool* any_tensor) {
  for (const c10::IValue& v : values) {
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (C10_UNLIKELY(is_fake(t))) return true;
      if (any_tensor && t.defined()) *any_tensor = true;
    } else if (v.isList() && v.isTensorList()) {    // the inline tag check first: isTensorList is a call
      for (const c10::IValue& t : v.toListRef()) {  // no copy of the list
        if (is_fake(t.toTensor())) return true;
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
