// Calls that torch.compile's tracing runs through the dispatcher on fake
// tensors (Dynamo's fake values, AOTAutograd's and make_fx's graphs): they
// compute nothing, so they are counted apart as compile time and never become
// rows, snapshots or counter windows. Recognised by the active tracing mode
// (FakeTensorMode or ProxyTorchDispatchMode, the infra modes of
// c10::impl::TorchDispatchModeTLS, torch 2.2 on), else by a FakeTensor among
// the call's inputs or, for factories, outputs: a Python-dispatched tensor
// whose data lives on the meta device while it reports another one (torch
// before 2.2, and fake tensors used outside their mode). A plain meta tensor is not fake: meta runs, like
// the reference workload's, stay rows.
#pragma once

#include <cstdint>

#include <ATen/record_function.h>

namespace lingprobe::capture {

enum class CompileTracing : uint8_t { None, FakeTensorMode, ProxyMode, FakeTensorInputs, FakeTensorOutputs };
constexpr int kCompileTracingKinds = 5;

// Of a call in its start callback (boxed inputs present). Cheap when no
// dispatch mode is active: one thread-local look and a pass over the inputs'
// dispatch keys.
CompileTracing compile_tracing(const at::RecordFunction& fn);
// Of a recorded call's outputs in its end callback: whether one is a fake tensor.
bool has_fake_tensor(c10::ArrayRef<c10::IValue> values);

// The counts record's name of each kind: "fake_tensor_mode", "proxy_mode",
// "fake_tensor_inputs", "fake_tensor_outputs".
const char* compile_tracing_name(CompileTracing kind);

}  // namespace lingprobe::capture
