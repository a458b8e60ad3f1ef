#include "replay/replay.h"

#include "capture/torch_guard.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/InferenceMode.h>
#include <torch/version.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "capture/autocast_state.h"
#include "capture/signature_builder.h"
#include "capture/math_policy.h"
#include "capture/snapshot_capture.h"
#include "format/canonical_json.h"
#include "format/op_traits.h"
#include "format/sha256.h"
#include "format/snapshot_file.h"
#include "format/tensor_layout.h"
#include "gpu/cuda_driver.h"
#include "lingprobe/version.h"
#include "sink/run_directory.h"

namespace lingprobe::replay {
namespace {

using format::JsonValue;
using format::PickleValue;

struct Context {
  const format::SnapshotReader* reader;
  std::string device;     // target device, "" : as recorded
  bool keep_cpu = false;  // the snapshot has CUDA tensors: --device leaves its CPU tensors alone
  std::ostringstream log;
  bool layout_exact = true;
};

// An exception as one line: a c10::Error without its C++ backtrace.
std::string error_line(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  const size_t newline = text.find('\n');
  return newline == std::string::npos ? text : text.substr(0, newline);
}

c10::ScalarType scalar_type_of(const std::string& name) {
  for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
    const auto t = static_cast<c10::ScalarType>(i);
    if (t == c10::ScalarType::Undefined) continue;
    if (capture::python_dtype_name(t) == name) return t;
  }
  throw std::runtime_error("dtype " + name + " is not known to this torch " TORCH_VERSION);
}

int64_t name_index(const std::string& repr, const char* (*name_of)(int64_t)) {
  for (int64_t i = 0; i < 32; ++i)
    if (const char* n = name_of(i); n && repr == n) return i;
  throw std::runtime_error("unknown value " + repr);
}

// --device moves the recorded device's tensors; in a snapshot that also has
// CUDA tensors, CPU tensors (wrapped scalars, indices) stay on the CPU.
c10::Device target_device(const std::string& recorded, const std::string& wanted, bool keep_cpu) {
  const c10::Device r(recorded);
  const c10::Device d = wanted.empty() || (keep_cpu && r.is_cpu()) ? r : c10::Device(wanted);
  if (d.is_cuda() && !at::hasCUDA())
    throw std::runtime_error("the snapshot's tensors are on " + recorded +
                             ", but this torch (" TORCH_VERSION ") has no CUDA device; replay with --device cpu");
  if (!d.is_cuda() && !d.is_cpu())
    throw std::runtime_error("device " + d.str() + " is not supported by lingprobe replay (cpu, cuda)");
  return d;
}

double parse_float(const std::string& repr) {
  char* end = nullptr;
  const double v = std::strtod(repr.c_str(), &end);
  if (end == repr.c_str()) throw std::runtime_error("malformed float " + repr);
  return v;
}

std::vector<int64_t> ints(const PickleValue* v) {
  std::vector<int64_t> out;
  for (const auto& x : v->items()) out.push_back(x.as_int());
  return out;
}

// A tensor with the recorded shape, strides, storage offset and pointer
// alignment, holding the recorded elements, on the target device.
at::Tensor rebuild_tensor(Context& ctx, const PickleValue& v) {
  const c10::ScalarType dtype = scalar_type_of(v.find("dtype")->as_string());
  const std::vector<int64_t> shape = ints(v.find("shape")), stride = ints(v.find("stride"));
  const int64_t offset = v.find("storage_offset")->as_int();
  const int64_t alignment = v.find("alignment")->as_int();
  const bool span = v.find("layout")->as_string() == "span";
  const c10::Device device = target_device(v.find("device")->as_string(), ctx.device, ctx.keep_cpu);
  std::string bytes;
  if (std::string e = ctx.reader->read_data(v, bytes); !e.empty()) throw std::runtime_error(e);
  const int64_t es = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t extent = format::span_of(shape, stride);
  const int64_t stored = span ? extent : format::numel_of(shape);
  if (static_cast<int64_t>(bytes.size()) != stored * es)
    throw std::runtime_error("tensor bytes do not match its shape");
  at::Tensor host = at::empty({stored}, at::TensorOptions().dtype(dtype));
  if (!bytes.empty()) std::memcpy(host.data_ptr(), bytes.data(), bytes.size());
  // A buffer with room to place the data pointer at the recorded alignment.
  const int64_t elements = offset + extent;
  at::Tensor buffer = at::zeros({elements * es + 8192}, at::TensorOptions().dtype(at::kByte).device(device));
  auto* base = static_cast<char*>(buffer.data_ptr());
  int64_t shift = 0;
  bool aligned = false;
  for (int64_t k = 0; k < 8192 && !aligned; k += es) {
    const auto a = format::pointer_alignment(reinterpret_cast<uintptr_t>(base + k + offset * es));
    if (a == alignment || (alignment >= 4096 && a >= 4096)) shift = k, aligned = true;
  }
  if (!aligned) ctx.layout_exact = false;
  at::Tensor storage = at::from_blob(
      base + shift, {elements}, [buffer](void*) {}, at::TensorOptions().dtype(dtype).device(device));
  at::Tensor t = storage.as_strided(shape, stride, offset);
  if (stored > 0) {
    if (span)
      storage.narrow(0, offset, extent).copy_(host);
    else
      t.copy_(host.view(shape));
  }
  return t;
}

c10::IValue rebuild(Context& ctx, const PickleValue& v, const c10::TypePtr& type);

c10::TypePtr infer_type(const c10::IValue& v) {
  if (v.isTensor()) return c10::TensorType::get();
  if (v.isInt()) return c10::IntType::get();
  if (v.isDouble()) return c10::FloatType::get();
  if (v.isBool()) return c10::BoolType::get();
  if (v.isString()) return c10::StringType::get();
  return v.type();
}

c10::IValue rebuild_list(Context& ctx, const PickleValue& v, const c10::TypePtr& type) {
  c10::TypePtr element = capture::list_element_type(type);
  std::vector<c10::IValue> items;
  for (const auto& x : v.items()) items.push_back(rebuild(ctx, x, element));
  bool has_none = false;
  for (const auto& x : items) has_none = has_none || x.isNone();
  if (!element) {
    element = items.empty() ? c10::TensorType::get() : infer_type(items.front());
    for (const auto& x : items)
      if (!x.isNone()) element = infer_type(x);
    if (has_none) element = c10::OptionalType::create(element);
  }
  c10::impl::GenericList list(element);
  for (auto& x : items) list.push_back(std::move(x));
  return c10::IValue(std::move(list));
}

c10::IValue rebuild(Context& ctx, const PickleValue& v, const c10::TypePtr& type) {
  switch (v.kind()) {
    case PickleValue::Kind::None: return c10::IValue();
    case PickleValue::Kind::Bool: return c10::IValue(v.as_bool());
    case PickleValue::Kind::Int: return c10::IValue(v.as_int());
    case PickleValue::Kind::String: return c10::IValue(v.as_string());
    case PickleValue::Kind::List: return rebuild_list(ctx, v, type);
    case PickleValue::Kind::Dict: break;
    default: throw std::runtime_error("unexpected value");
  }
  const std::string& kind = v.find("kind")->as_string();
  if (kind == "tensor") return c10::IValue(rebuild_tensor(ctx, v));
  if (kind == "float") return c10::IValue(parse_float(v.find("repr")->as_string()));
  if (kind == "complex")
    return c10::IValue(
        c10::complex<double>(parse_float(v.find("real")->as_string()), parse_float(v.find("imag")->as_string())));
  if (kind == "dtype") return c10::IValue(static_cast<int64_t>(scalar_type_of(v.find("repr")->as_string())));
  if (kind == "layout") return c10::IValue(name_index(v.find("repr")->as_string(), capture::python_layout_name));
  if (kind == "memory_format")
    return c10::IValue(name_index(v.find("repr")->as_string(), capture::python_memory_format_name));
  if (kind == "device") return c10::IValue(target_device(v.find("repr")->as_string(), ctx.device, ctx.keep_cpu));
  if (kind == "tuple") {
    std::vector<c10::IValue> items;
    for (const auto& x : v.find("items")->items()) items.push_back(rebuild(ctx, x, nullptr));
    return c10::IValue(c10::ivalue::Tuple::create(std::move(items)));
  }
  if (kind == "generator") return c10::IValue();  // the op falls back to the default generator: nondeterministic
  throw std::runtime_error("a " + v.find("repr")->as_string() + " argument cannot be rebuilt");
}

bool has_cuda_tensor(const PickleValue& v) {
  if (v.kind() == PickleValue::Kind::List)
    for (const auto& x : v.items())
      if (has_cuda_tensor(x)) return true;
  if (v.kind() != PickleValue::Kind::Dict) return false;
  const PickleValue* kind = v.find("kind");
  if (kind && kind->kind() == PickleValue::Kind::String && kind->as_string() == "tensor") {
    const PickleValue* d = v.find("device");
    return d && d->as_string().rfind("cuda", 0) == 0;
  }
  for (const auto& [k, x] : v.entries())
    if (has_cuda_tensor(x)) return true;
  return false;
}

bool policy_true(const PickleValue* policy, const char* key) {
  const PickleValue* v = policy ? policy->find(key) : nullptr;
  return v && v->kind() == PickleValue::Kind::String && v->as_string() == "true";
}

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

void apply_math_policy(const PickleValue* p, std::ostringstream& log) {
  if (!p) return;
  auto& c = at::globalContext();
  for (const auto& [key, value] : p->entries()) {
    if (value.kind() != PickleValue::Kind::String) continue;
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

JsonValue policy_json(const PickleValue* p) { return p ? capture::policy_json(*p) : JsonValue::object(); }

// Re-enters the recorded autocast region around the replayed call, so that
// a call recorded inside one (its inputs before the casts) runs the same
// casts and kernels; the thread's own state comes back after.
class AutocastScope {
 public:
  AutocastScope(const PickleValue* policy, std::ostringstream& log) : saved_(capture::AutocastState::current()) {
    if (!policy || !policy->find("autocast_cuda")) return;
    auto text = [&](const char* k) {
      const PickleValue* v = policy->find(k);
      return v && v->kind() == PickleValue::Kind::String ? v->as_string() : std::string();
    };
    capture::AutocastState s = saved_;
    s.cuda = text("autocast_cuda") == "true";
    s.cpu = text("autocast_cpu") == "true";
    s.cache = text("autocast_cache") != "false";
    if (s.cuda) s.cuda_dtype = scalar_type_of(text("autocast_cuda_dtype"));
    if (s.cpu) s.cpu_dtype = scalar_type_of(text("autocast_cpu_dtype"));
    if (s.cuda) log << "autocast: cuda " << text("autocast_cuda_dtype") << "\n";
    if (s.cpu) log << "autocast: cpu " << text("autocast_cpu_dtype") << "\n";
    s.apply();
    entered_ = true;
  }
  ~AutocastScope() {
    if (!entered_) return;
    at::autocast::clear_cache();
    saved_.apply();
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  capture::AutocastState saved_;
  bool entered_ = false;
};

void flatten_tensors(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor())
    out.push_back(v.toTensor());
  else if (v.isList())
    for (const auto& x : v.toListRef()) flatten_tensors(x, out);
  else if (v.isTuple())
    for (const auto& x : v.toTupleRef().elements()) flatten_tensors(x, out);
}

struct Difference {
  bool exact = true, finite = true;
  double max_abs = 0, sum_sq = 0;
  int64_t n = 0;
};

void compare(const at::Tensor& expected, const at::Tensor& got, Difference& d) {
  if (!expected.defined() || !got.defined()) {
    d.exact = d.exact && expected.defined() == got.defined();
    return;
  }
  if (expected.sizes() != got.sizes() || expected.scalar_type() != got.scalar_type()) {
    d.exact = false;
    d.finite = false;
    return;
  }
  const at::Tensor e = expected.contiguous(), g = got.to(at::kCPU).contiguous();
  if (e.numel() == 0) return;
  d.exact = d.exact && std::memcmp(e.data_ptr(), g.data_ptr(), static_cast<size_t>(e.numel() * e.element_size())) == 0;
  const bool complex = e.is_complex();
  const at::Tensor ed = complex ? e.to(at::kComplexDouble) : e.to(at::kDouble);
  const at::Tensor gd = complex ? g.to(at::kComplexDouble) : g.to(at::kDouble);
  if (g.is_floating_point() || complex) d.finite = d.finite && at::isfinite(g).all().item<bool>();
  at::Tensor diff = (gd - ed).abs();
  if (!complex)
    diff = at::where(at::isnan(ed) & at::isnan(gd), at::zeros_like(diff), diff);
  else
    diff = diff.to(at::kDouble);
  d.max_abs = std::max(d.max_abs, diff.max().item<double>());
  d.sum_sq += (diff * diff).sum().item<double>();
  d.n += e.numel();
}

std::string write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  return f ? "" : "cannot write " + path;
}

JsonValue identity_json(const std::string& device_str, const std::string& snapshot, const std::string& snapshot_sha) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  JsonValue id = JsonValue::object();
  id.set("tool", JsonValue::string("lingprobe replay"));
  id.set("lingprobe_version", JsonValue::string(LINGPROBE_VERSION_STRING));
  id.set("torch_version", JsonValue::string(TORCH_VERSION));
  id.set("host", JsonValue::string(host));
  id.set("pid", JsonValue::integer(getpid()));
  id.set("device", JsonValue::string(device_str));
  c10::Device d(device_str);
  if (d.is_cuda()) {
    if (gpu::CudaDriver* drv = gpu::CudaDriver::get()) {
      const int index = d.has_index() ? d.index() : 0;
      id.set("gpu_name", JsonValue::string(drv->device_name(index)));
      id.set("gpu_uuid", JsonValue::string(drv->device_uuid(index)));
      id.set("driver_version", JsonValue::integer(drv->driver_version()));
    }
  }
  id.set("snapshot", JsonValue::string(snapshot));
  id.set("snapshot_sha256", JsonValue::string(snapshot_sha));
  return id;
}

}  // namespace

namespace {
ReplayResult replay_one(const std::string& path, const ReplayOptions& options);
}  // namespace

std::string nondeterminism(const std::string& op, const std::string& device_type, bool cudnn_benchmark,
                           bool deterministic_algorithms, bool has_generator) {
  auto starts = [&](const char* p) { return op.rfind(p, 0) == 0; };
  if (std::string why = format::result_by_definition(op); !why.empty()) return why;
  if (has_generator) return "takes a Generator";
  const bool conv = op.find("conv") != std::string::npos || starts("aten::cudnn_");
  if (device_type == "cuda" && conv && cudnn_benchmark) return "cuDNN benchmark mode picks the algorithm per run";
  static const char* const kAtomics[] = {"aten::index_add",
                                         "aten::scatter_add",
                                         "aten::scatter_reduce",
                                         "aten::index_put",
                                         "aten::_index_put_impl",
                                         "aten::put_",
                                         "aten::embedding_dense_backward",
                                         "aten::_embedding_bag",
                                         "aten::histc",
                                         "aten::bincount",
                                         "aten::index_reduce"};
  if (device_type == "cuda" && !deterministic_algorithms)
    for (const char* a : kAtomics)
      if (starts(a)) return "CUDA kernel with atomic accumulation (deterministic algorithms off)";
  return "";
}

ReplayResult replay_snapshot(const std::string& path, const ReplayOptions& options) {
  try {
    return replay_one(path, options);
  } catch (const std::exception& e) {  // a c10::Error (an asynchronous CUDA fault, ...) fails this snapshot only
    ReplayResult r;
    r.error = path + ": " + error_line(e);
    return r;
  } catch (...) {
    ReplayResult r;
    r.error = path + ": unknown error";
    return r;
  }
}

namespace {

ReplayResult replay_one(const std::string& path, const ReplayOptions& options) {
  ReplayResult r;
  Context ctx;
  format::SnapshotReader reader;
  ctx.reader = &reader;
  ctx.device = options.device;
  const auto t0 = std::chrono::steady_clock::now();
  if (std::string e = reader.open(path); !e.empty()) {
    r.error = path + ": " + e;
    return r;
  }
  const PickleValue& doc = reader.document();
  ctx.keep_cpu = has_cuda_tensor(doc);
  const std::string name = doc.find("name")->as_string(), overload = doc.find("overload")->as_string();
  r.op = doc.find("op")->as_string();
  r.stage = doc.find("stage")->as_string();
  ctx.log << "snapshot " << path << "\nop " << name << (overload.empty() ? "" : "." + overload) << " stage " << r.stage
          << " rank " << doc.find("rank")->as_int() << " seq " << doc.find("seq")->as_int() << "\n";
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle) {
    const std::string full = name + (overload.empty() ? "" : "." + overload);
    const std::string ns = name.substr(0, name.find("::"));
    if (ns == "aten" || ns == "prim")
      r.error = path + ": unknown op " + full + " (not registered in torch " + TORCH_VERSION + ")";
    else  // an extension's op (torchvision::, a custom op): its library registers it
      r.skipped = "op " + full +
                  " is registered by a library this process did not load; replay it with "
                  "`lingprobe replay --library PATH/TO/THE/" +
                  ns + "/LIBRARY.so`";
    return r;
  }
  const c10::FunctionSchema& schema = handle->schema();
  const PickleValue* policy = doc.find("math_policy");
  apply_math_policy(policy, ctx.log);

  std::vector<c10::IValue> stack;
  std::vector<c10::IValue> inputs;
  std::vector<at::Tensor> expected;
  bool has_generator = false;
  std::string device_str = "cpu";
  try {
    c10::InferenceMode inference;
    const auto& params = schema.arguments();
    const auto& args = doc.find("args")->items();
    const PickleValue* kwargs = doc.find("kwargs");
    for (size_t i = 0; i < params.size(); ++i) {
      const PickleValue* v = i < args.size() ? &args[i] : kwargs->find(params[i].name());
      if (v && v->kind() == PickleValue::Kind::Dict && v->find("kind")->as_string() == "generator")
        has_generator = true;
      if (v)
        stack.push_back(rebuild(ctx, *v, params[i].real_type()));
      else if (params[i].default_value())
        stack.push_back(*params[i].default_value());
      else
        throw std::runtime_error("argument '" + params[i].name() + "' is missing from the snapshot");
    }
    if (args.size() > params.size()) throw std::runtime_error("more arguments than the schema has");
    for (const auto& v : stack) {
      std::vector<at::Tensor> ts;
      flatten_tensors(v, ts);
      for (const auto& t : ts)
        if (t.defined()) device_str = t.device().str();
    }
    inputs = stack;  // the replayed call's own signature is built from these (shapes do not change)
    // The recorded output, rebuilt on the CPU for the comparison.
    Context host_ctx;
    host_ctx.reader = &reader;
    host_ctx.device = "cpu";
    flatten_tensors(rebuild(host_ctx, *doc.find("output"), nullptr), expected);
    if (options.before_call) options.before_call();
    try {
      AutocastScope autocast(policy, ctx.log);
      handle->callBoxed(&stack);
    } catch (...) {
      if (options.after_call) options.after_call();
      throw;
    }
    if (options.after_call) options.after_call();
  } catch (const std::exception& e) {
    r.error = path + ": " + error_line(e);
    return r;
  }
  r.device = device_str;
  std::vector<at::Tensor> got;
  for (const auto& v : stack) flatten_tensors(v, got);
  Difference d;
  if (got.size() != expected.size()) {
    d.exact = false;
    ctx.log << "output count differs: recorded " << expected.size() << ", replayed " << got.size() << "\n";
  } else {
    for (size_t i = 0; i < got.size(); ++i) compare(expected[i], got[i], d);
  }
  r.max_abs = d.max_abs;
  r.rmse = d.n ? std::sqrt(d.sum_sq / static_cast<double>(d.n)) : 0.0;
  r.finite = d.finite;
  const std::string device_type = c10::Device(device_str).is_cuda() ? "cuda" : "cpu";
  r.nondeterministic = nondeterminism(schema.name(), device_type, policy_true(policy, "cudnn_benchmark"),
                                      policy_true(policy, "deterministic_algorithms"), has_generator);
  if (r.nondeterministic.empty()) r.exact = d.exact;
  const std::string replayed_sha =
      capture::canonical_signature(schema, c10::ArrayRef<const c10::IValue>(inputs.data(), inputs.size()),
                                   c10::ArrayRef<const c10::IValue>(stack.data(), stack.size()), r.stage)
          .sha256;
  const std::string recorded_sha = doc.find("signature_sha256") ? doc.find("signature_sha256")->as_string() : "";
  r.signature_matches = replayed_sha == recorded_sha;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  JsonValue shape = JsonValue::array();
  if (!got.empty() && got[0].defined())
    for (int64_t s : got[0].sizes()) shape.push_back(JsonValue::integer(s));
  JsonValue c = JsonValue::object();
  c.set("op", JsonValue::string(r.op));
  c.set("stage", JsonValue::string(r.stage));
  c.set("shape", std::move(shape));
  c.set("exact", r.exact ? JsonValue::boolean(*r.exact) : JsonValue::null());
  c.set("max_abs", JsonValue::floating(r.max_abs));
  c.set("rmse", JsonValue::floating(r.rmse));
  c.set("finite", JsonValue::boolean(r.finite));
  c.set("math_policy", policy_json(policy));
  c.set("scope", JsonValue::string("Original ATen op (" + name + (overload.empty() ? "" : "." + overload) +
                                   ", dispatcher, boxed) on this run's own saved tensors, rebuilt with their recorded "
                                   "layout; isolated replay on " +
                                   device_str + " by lingprobe replay"));
  if (!r.nondeterministic.empty()) c.set("nondeterministic", JsonValue::string(r.nondeterministic));
  c.set("signature_sha256", JsonValue::string(recorded_sha));
  c.set("replayed_signature_sha256", JsonValue::string(replayed_sha));
  c.set("signature_matches", JsonValue::boolean(r.signature_matches));
  c.set("layout_exact", JsonValue::boolean(ctx.layout_exact));
  c.set("input_sha256", JsonValue::string(doc.find("input_sha256") ? doc.find("input_sha256")->as_string() : ""));
  c.set("seq", JsonValue::integer(doc.find("seq")->as_int()));
  c.set("rank", JsonValue::integer(doc.find("rank")->as_int()));
  c.set("device", JsonValue::string(device_str));
  c.set("outputs", JsonValue::integer(static_cast<int64_t>(got.size())));
  c.set("elapsed_seconds", JsonValue::floating(secs));
  r.comparison = c;
  r.ok = true;
  ctx.log << "exact " << (r.exact ? (*r.exact ? "true" : "false") : "null (" + r.nondeterministic + ")") << " max_abs "
          << r.max_abs << " rmse " << r.rmse << " finite " << r.finite << " signature_matches " << r.signature_matches
          << " on " << device_str << " in " << secs << " s\n";

  if (!options.out_dir.empty()) {
    if (std::string e = sink::make_directories(options.out_dir); !e.empty()) {
      r.ok = false;
      r.error = e;
      return r;
    }
    std::string snapshot_sha;
    format::sha256_file_hex(path, snapshot_sha);
    const std::string rel = options.snapshot_rel.empty() ? path : options.snapshot_rel;
    r.comparison.set("snapshot", JsonValue::string(rel));
    r.comparison.set("snapshot_sha256", JsonValue::string(snapshot_sha));
    const std::vector<std::pair<std::string, std::string>> files = {
        {"replay_comparison.json", format::pretty_json(r.comparison) + "\n"},
        {"identity.json", format::pretty_json(identity_json(device_str, rel, snapshot_sha)) + "\n"},
        {"run.log", ctx.log.str()},
        {"replay_operator.py", replay_operator_script(path)},
    };
    JsonValue manifest = JsonValue::object();
    JsonValue sums = JsonValue::object();
    for (const auto& [file, text] : files) {
      if (std::string e = write_text(options.out_dir + "/" + file, text); !e.empty()) {
        r.ok = false;
        r.error = e;
        return r;
      }
      sums.set(file, JsonValue::string(format::sha256_hex(text)));
    }
    manifest.set("snapshot", JsonValue::string(rel));
    manifest.set("snapshot_sha256", JsonValue::string(snapshot_sha));
    manifest.set("sha256", std::move(sums));
    if (std::string e = write_text(options.out_dir + "/manifest.json", format::pretty_json(manifest) + "\n");
        !e.empty()) {
      r.ok = false;
      r.error = e;
    }
  }
  return r;
}

}  // namespace

}  // namespace lingprobe::replay
