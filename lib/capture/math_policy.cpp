#include "capture/math_policy.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/version.h>

#include <cstdlib>
#include <string>
#include <type_traits>

#include "capture/autocast_state.h"
#include "capture/signature_builder.h"

namespace lingprobe::capture {

using format::PickleValue;

namespace {

std::string bool_text(bool b) { return b ? "true" : "false"; }

template <typename T>
std::string setting_text(T v) {
  if constexpr (std::is_same_v<T, bool>)
    return bool_text(v);
  else
    return std::to_string(static_cast<int>(v));
}

}  // namespace

PickleValue current_math_policy() {
  auto& ctx = at::globalContext();
  PickleValue p = PickleValue::dict();
  auto set = [&](const char* k, const std::string& v) { p.set(k, PickleValue::string(v)); };
  static const char* const kPrecision[] = {"highest", "high", "medium"};
  const int precision = static_cast<int>(ctx.float32MatmulPrecision());
  set("matmul_precision", precision >= 0 && precision < 3 ? kPrecision[precision] : std::to_string(precision));
  set("matmul_allow_tf32", bool_text(ctx.allowTF32CuBLAS()));
  set("cudnn_allow_tf32", bool_text(ctx.allowTF32CuDNN()));
  set("cudnn_benchmark", bool_text(ctx.benchmarkCuDNN()));
  set("cudnn_deterministic", bool_text(ctx.deterministicCuDNN()));
  set("cudnn_enabled", bool_text(ctx.userEnabledCuDNN()));
  set("deterministic_algorithms", bool_text(ctx.deterministicAlgorithms()));
  set("mkldnn_enabled", bool_text(ctx.userEnabledMkldnn()));
  set("matmul_allow_fp16_reduced_precision_reduction", setting_text(ctx.allowFP16ReductionCuBLAS()));
#if TORCH_VERSION_MAJOR >= 2
  set("matmul_allow_bf16_reduced_precision_reduction", setting_text(ctx.allowBF16ReductionCuBLAS()));
  set("sdpa_mem_efficient", bool_text(ctx.userEnabledMemEfficientSDP()));
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  set("sdpa_cudnn", bool_text(ctx.userEnabledCuDNNSDP()));
  set("blas_backend", setting_text(ctx.blasPreferredBackend()));
#endif
  set("sdpa_flash", bool_text(ctx.userEnabledFlashSDP()));
  set("sdpa_math", bool_text(ctx.userEnabledMathSDP()));
  const char* ws = std::getenv("CUBLAS_WORKSPACE_CONFIG");
  set("cublas_workspace_config", ws ? ws : "");
  set("cpu_threads", std::to_string(at::get_num_threads()));
  set("cpu_interop_threads", std::to_string(at::get_num_interop_threads()));
  // The thread's autocast state: a call recorded inside an autocast region
  // shows its inputs before the casts (the dispatcher's view); replay
  // re-enters the region so that the same casts and kernels run.
  const AutocastState autocast = AutocastState::current();
  set("autocast_cuda", bool_text(autocast.cuda));
  set("autocast_cuda_dtype", python_dtype_name(autocast.cuda_dtype));
  set("autocast_cpu", bool_text(autocast.cpu));
  set("autocast_cpu_dtype", python_dtype_name(autocast.cpu_dtype));
  set("autocast_cache", bool_text(autocast.cache));
  return p;
}

format::JsonValue policy_json(const PickleValue& policy) {
  format::JsonValue o = format::JsonValue::object();
  if (policy.kind() != PickleValue::Kind::Dict) return o;
  for (const auto& [key, value] : policy.entries()) {
    if (value.kind() != PickleValue::Kind::String) continue;
    const std::string& t = value.as_string();
    if (t == "true" || t == "false")
      o.set(key, format::JsonValue::boolean(t == "true"));
    else
      o.set(key, format::JsonValue::string(t));
  }
  return o;
}

}  // namespace lingprobe::capture
