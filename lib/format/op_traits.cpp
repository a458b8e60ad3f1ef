#include "format/op_traits.h"

namespace lingprobe::format {

std::string result_by_definition(const std::string& op) {
  auto starts = [&](const char* p) { return op.rfind(p, 0) == 0; };
  if (starts("aten::empty") || starts("aten::new_empty") || op == "aten::empty_like" || op == "aten::empty_strided")
    return "uninitialised memory (empty*)";
  static const char* const kRandom[] = {
      "aten::rand",          "aten::randn",       "aten::randint",        "aten::randperm",
      "aten::normal",        "aten::bernoulli",   "aten::uniform_",       "aten::exponential_",
      "aten::geometric_",    "aten::log_normal_", "aten::cauchy_",        "aten::random_",
      "aten::multinomial",   "aten::dropout",     "aten::native_dropout", "aten::feature_dropout",
      "aten::alpha_dropout", "aten::rrelu",       "aten::poisson",        "aten::_fused_dropout",
      "aten::trunc_normal_"};
  for (const char* r : kRandom)
    if (starts(r)) return "random op";
  return "";
}

}  // namespace lingprobe::format
