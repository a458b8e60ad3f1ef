#include "capture/setup_calls.h"

#include "capture/torch_guard.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>

#include "capture/tensor_copy.h"
#include "format/op_traits.h"

namespace lingprobe::capture {

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
  // Writes that initialise or load a parameter (an optimizer's add_ or _foreach_* on one is compute).
  const bool fills = name == "aten::copy_" || name == "aten::fill_" || name == "aten::zero_" || name == "aten::set_";
  const auto& params = call.schema->arguments();
  const bool matches = params.size() == call.inputs.size();
  const bool moves = name == "aten::to" || name == "aten::_to_copy";
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
