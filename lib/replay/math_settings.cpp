#include "replay/math_settings.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <cctype>
#include <cstdlib>
#include <type_traits>

namespace lingprobe::replay {

using format::PickleValue;

namespace {

// Sets a cuBLAS reduced-precision option from text written by either torch
// version ("true"/"false", or the CuBLASReductionOption number of torch >= 2.9).
template <typename Ctx, typename Get, typename Set>
void apply_reduction(Ctx& c, const std::string& text, Get get, Set set) {
  using T = decltype((c.*get)());
  const bool numeric = !text.empty() && std::isdigit(static_cast<unsigned char>(text[0]));
  const int n = numeric ? std::atoi(text.c_str()) : (text == "true" ? 0 : 1);
  if constexpr (std::is_same_v<T, bool>)
    (c.*set)(n == 0);
  else
    (c.*set)(n == 0, n != 2);
}

}  // namespace

void apply_math_policy(const PickleValue* p, std::ostringstream& log) {
  if (!p) return;
  auto& c = at::globalContext();
  for (const auto& [key, value] : p->entries()) {
    if (value.kind() != PickleValue::Kind::String) continue;
    if (key.rfind("autocast_", 0) == 0) continue;  // entered around the call alone (AutocastScope), logged there
    const std::string& t = value.as_string();
    const bool b = t == "true";
    try {
      if (key == "matmul_precision")
        c.setFloat32MatmulPrecision(t);
      else if (key == "matmul_allow_tf32")
        c.setAllowTF32CuBLAS(b);
      else if (key == "cudnn_allow_tf32")
        c.setAllowTF32CuDNN(b);
      else if (key == "cudnn_benchmark")
        c.setBenchmarkCuDNN(b);
      else if (key == "cudnn_deterministic")
        c.setDeterministicCuDNN(b);
      else if (key == "cudnn_enabled")
        c.setUserEnabledCuDNN(b);
      else if (key == "deterministic_algorithms")
        c.setDeterministicAlgorithms(b, false);
      else if (key == "mkldnn_enabled")
        c.setUserEnabledMkldnn(b);
      else if (key == "matmul_allow_fp16_reduced_precision_reduction")
        apply_reduction(c, t, &at::Context::allowFP16ReductionCuBLAS, &at::Context::setAllowFP16ReductionCuBLAS);
#if TORCH_VERSION_MAJOR >= 2
      else if (key == "matmul_allow_bf16_reduced_precision_reduction")
        apply_reduction(c, t, &at::Context::allowBF16ReductionCuBLAS, &at::Context::setAllowBF16ReductionCuBLAS);
      else if (key == "sdpa_mem_efficient")
        c.setSDPUseMemEfficient(b);
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
      else if (key == "sdpa_cudnn")
        c.setSDPUseCuDNN(b);
      else if (key == "blas_backend")
        c.setBlasPreferredBackend(static_cast<at::BlasBackend>(std::atoi(t.c_str())));
#endif
      else if (key == "sdpa_flash")
        c.setSDPUseFlash(b);
      else if (key == "sdpa_math")
        c.setSDPUseMath(b);
      else if (key == "cublas_workspace_config") {
        if (!t.empty()) ::setenv("CUBLAS_WORKSPACE_CONFIG", t.c_str(), 1);
      } else if (key == "cpu_threads")
        at::set_num_threads(std::atoi(t.c_str()));
      else {
        log << "math policy: " << key << "=" << t << " is not settable in torch " TORCH_VERSION << "\n";
        continue;
      }
      log << "math policy: " << key << " = " << t << "\n";
    } catch (const std::exception& e) {
      log << "math policy: " << key << "=" << t << " not applied: " << e.what() << "\n";
    }
  }
}

}  // namespace lingprobe::replay
