#include "capture/setup_calls.h"

#include "capture/torch_guard.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>
#include <string>

#include "capture/tensor_copy.h"
#include "format/op_traits.h"

namespace lingprobe::capture {

namespace {

// An in-place op (not an optimizer's _foreach_*) that writes its first argument, a leaf tensor without a gradient
// yet, and reads no other tensor (a Python number given to mul_ or add_ arrives as a wrapped-number tensor: a
// scalar). AdamW's param.mul_(1 - lr * wd) runs in step(), after backward gave the parameter its gradient: compute.
// A non-leaf (an activation in the graph: `h.relu_()`) is compute, and its .grad is never read: torch warns there.
bool writes_with_scalars_only(const SampledCall& call, const std::string& name) {
  if (name.rfind("aten::_foreach_", 0) == 0 || call.inputs.empty() || !is_written(call.schema->arguments()[0]) ||
      !call.inputs[0].isTensor())
    return false;
  const at::Tensor& written = call.inputs[0].toTensor();
  if (!written.is_leaf() || written.grad().defined()) return false;
  bool other_tensor = false;
  for (size_t i = 1; i < call.inputs.size(); ++i)
    for_each_tensor(call.inputs[i], [&](const at::Tensor& t) {
      other_tensor = other_tensor || (t.defined() && !t.unsafeGetTensorImpl()->is_wrapped_number());
    });
  return !other_tensor;
}

// Tensors on more than one device (0-dim ones aside: a CPU scalar tensor may join any op's GPU tensors), or with
// `moves`, any tensor or the target device: a move (to(device), .cpu()), a copy_ from another device, or
// Module._apply's _has_compatible_shallow_copy_type(cpu_param, cuda_param), which reads no data but whose snapshot
// holds both (module.cuda() spent the compute's budget on it).
bool crosses_devices(const SampledCall& call, bool moves) {
  std::optional<c10::Device> first;
  bool crosses = false;
  auto see = [&](const c10::Device& d) {  // "cuda" (no index) is the same device as a tensor's cuda:0
    if (!first) first = d;
    crosses = crosses || d.type() != first->type() || (d.has_index() && first->has_index() && d != *first);
  };
  for (const auto& v : call.inputs) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (t.defined() && (moves || t.dim() > 0)) see(t.device());
    });
    if (moves && v.isDevice()) see(v.toDevice());
  }
  return crosses;
}

}  // namespace

bool is_setup_call(const SampledCall& call) {
  const std::string name = call.schema->name();
  if (!format::result_by_definition(name).empty()) return true;
  // Ops whose result may alias their input but that copy when they must (a kernel may run): not view-only.
  static const char* const kMayCopy[] = {"aten::to",
                                         "aten::contiguous",
                                         "aten::reshape",
                                         "aten::reshape_as",
                                         "aten::flatten",
                                         "aten::type_as",
                                         "aten::_autocast_to_reduced_precision",
                                         "aten::_autocast_to_full_precision"};
  const auto& returns = call.schema->returns();
  if (!returns.empty() &&
      std::none_of(std::begin(kMayCopy), std::end(kMayCopy), [&](const char* n) { return name == n; }) &&
      std::all_of(returns.begin(), returns.end(),
                  [](const c10::Argument& r) { return r.alias_info() && !r.alias_info()->isWrite(); }))
    return true;
  // Writes that initialise or load a parameter (an optimizer's add_ or _foreach_* on one is compute): fills and
  // copies, and in-place arithmetic whose other arguments hold no tensor (trunc_normal_'s erfinv_, mul_, add_ and
  // clamp_ after its uniform_; an optimizer's update runs once the parameter has a gradient).
  const auto& params = call.schema->arguments();
  const bool matches = params.size() == call.inputs.size();
  const bool fills = name == "aten::copy_" || name == "aten::fill_" || name == "aten::zero_" || name == "aten::set_" ||
                     (matches && writes_with_scalars_only(call, name));
  const bool moves = name == "aten::to" || name == "aten::_to_copy";
  // Across devices, whatever the tensor: a frozen model's weights (requires_grad_(False), as inference pipelines
  // do) look like any other tensor, and module.to(device) or loading them onto the GPU is set-up all the same.
  if (crosses_devices(call, moves || name == "aten::copy_")) return true;
  bool setup = false;
  for (size_t i = 0; i < call.inputs.size() && !setup; ++i) {
    const bool written = fills && matches && is_written(params[i]);
    if (!written && !moves) continue;
    for_each_tensor(call.inputs[i],
                    [&](const at::Tensor& t) { setup = setup || (t.defined() && t.is_leaf() && t.requires_grad()); });
  }
  return setup;
}

}  // namespace lingprobe::capture
