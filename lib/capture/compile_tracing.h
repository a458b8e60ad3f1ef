// Calls that torch.compile's tracing runs through the dispatcher on fake
// tensors (Dynamo's fake values, AOTAutograd's and make_fx's graphs traced in
// fake mode): they compute nothing, so they are counted apart as compile time
// and never become rows, snapshots or counter windows. Recognised by the
// active FakeTensorMode (the FAKE infra mode of c10::impl::TorchDispatchModeTLS,
// torch 2.2 on), else by a FakeTensor among the call's inputs or, for
// factories among the selected ops, its outputs: a Python-dispatched tensor
// whose data lives on the meta device while it reports another one. A plain
// meta tensor is not fake: meta runs, like the reference workload's, stay
// rows; nor is make_fx's real-mode tracing (ProxyMode over real tensors:
// those calls compute). Blind spot before torch 2.2: AOTAutograd's calls on
// functional wrappers of fake tensors (the wrapper hides the Python key)
// are not recognised (docs/USAGE.md).
#pragma once

#include "capture/torch_guard.h"

#include <ATen/record_function.h>
#include <torch/version.h>

#include <cstdint>

// FakeTensorMode is an infra mode of c10::impl::TorchDispatchModeTLS from torch 2.2 on.
#define LINGPROBE_INFRA_MODES (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 2))

namespace lingprobe::capture {

enum class CompileTracing : uint8_t { None, FakeTensorMode, FakeTensorInputs, FakeTensorOutputs };
constexpr int kCompileTracingKinds = 4;

// A FakeTensor: a Python-dispatched tensor whose data lives on the meta device while it reports another one.
C10_ALWAYS_INLINE bool is_fake_tensor(const at::Tensor& t) {
  if (!t.defined()) return false;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const c10::DispatchKeySet ks = impl->key_set();
  if (!ks.has(c10::DispatchKey::Python) || ks.has_backend(c10::BackendComponent::MetaBit)) return false;
  const c10::Storage& storage = impl->unsafe_storage();  // no Python: the data's device, not the reported one
  return storage && storage.device_type() == c10::DeviceType::Meta;
}

// Of a call in its start callback: the active FakeTensorMode (torch 2.2 on;
// one thread-local look when no dispatch mode is active), else None; then the
// recorder looks for fake tensors among the inputs in the same pass that
// builds their key (capture/signature_key: append_input_keys), or with
// has_fake_tensor for an op it does not record.
CompileTracing compile_tracing_mode();
// Whether one of the values (a recorded call's outputs, in its end callback) is a fake tensor; `any_tensor`
// (optional): set when a defined tensor was met before the answer.
bool has_fake_tensor(c10::ArrayRef<c10::IValue> values, bool* any_tensor = nullptr);
// Whether a factory under FakeTensorMode passes compile_tracing_mode and the input pass unseen, so that only its fake
// outputs tell (torch before 2.2, no infra modes): from 2.2 on the end callback need not look at outputs. Only a
// factory's (a call without tensor inputs): a call on real tensors under the mode is refused by it, one on fake tensors
// was seen at its start.
constexpr bool kFakeFactoriesUnseenAtStart = !LINGPROBE_INFRA_MODES;

// The counts record's name of each kind: "fake_tensor_mode", "fake_tensor_inputs", "fake_tensor_outputs".
const char* compile_tracing_name(CompileTracing kind);

}  // namespace lingprobe::capture
