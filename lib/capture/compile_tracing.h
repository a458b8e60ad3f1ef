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

// Of a call in its start callback (boxed inputs present): the active mode or
// the inputs. Cheap when no dispatch mode is active: one thread-local look and
// a pass over the inputs' dispatch keys (no allocation, tensor lists too).
// `tensor_inputs` (optional): set when the pass met a tensor, i.e. the call
// is not a factory (left alone when the mode decided).
CompileTracing compile_tracing(const at::RecordFunction& fn, bool* tensor_inputs = nullptr);
// Whether one of the values (a recorded call's outputs, in its end callback) is a fake tensor; `any_tensor`
// (optional): set when a defined tensor was met before the answer.
bool has_fake_tensor(c10::ArrayRef<c10::IValue> values, bool* any_tensor = nullptr);
// Whether a factory under FakeTensorMode passes compile_tracing unseen, so that only its fake outputs tell
// (torch before 2.2, no infra modes): from 2.2 on the end callback need not look at outputs. Only a factory's
// (a call without tensor inputs): a call on real tensors under the mode is refused by it, one on fake tensors
// was seen at its start.
constexpr bool kFakeFactoriesUnseenAtStart = !LINGPROBE_INFRA_MODES;

// The counts record's name of each kind: "fake_tensor_mode", "fake_tensor_inputs", "fake_tensor_outputs".
const char* compile_tracing_name(CompileTracing kind);

}  // namespace lingprobe::capture
