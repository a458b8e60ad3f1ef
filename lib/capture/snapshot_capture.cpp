#include "capture/snapshot_capture.h"

#include "capture/torch_guard.h"

#include <algorithm>
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/version.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <type_traits>

#include "capture/autocast_state.h"
#include "capture/cuda_stream.h"
#include "capture/signature_builder.h"
#include "format/float_repr.h"
#include "format/op_traits.h"
#include "format/tensor_layout.h"
#include "runtime/snapshot_job.h"

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

// A tensor copied for a snapshot: its metadata and the copy (compact or span).
// Counts a device copy's bytes while it lives (the device budget).
class DeviceHold {
 public:
  DeviceHold(std::atomic<uint64_t>* counter, uint64_t n) : counter_(counter), n_(n) { counter_->fetch_add(n_); }
  ~DeviceHold() { counter_->fetch_sub(n_); }
  DeviceHold(const DeviceHold&) = delete;
  DeviceHold& operator=(const DeviceHold&) = delete;

 private:
  std::atomic<uint64_t>* counter_;
  uint64_t n_;
};

struct CopiedTensor {
  format::TensorMeta meta;
  at::Tensor copy;
  int64_t stored_numel = 0;
  uint64_t nbytes = 0;
  std::unique_ptr<DeviceTransfer> transfer;  // device tensors: the host copy, later
  std::unique_ptr<DeviceHold> hold;          // device tensors: counted while the copy lives
};

class TensorBlob : public format::BlobSource {
 public:
  explicit TensorBlob(CopiedTensor t) : t_(std::move(t)) {}
  uint64_t nbytes() const override { return t_.nbytes; }
  std::string stream(const std::function<bool(const void*, size_t)>& out) override {
    std::string err;
    if (t_.transfer) {
      err = t_.transfer->stream(out);
    } else if (t_.nbytes && !out(t_.copy.data_ptr(), t_.nbytes)) {
      err = "write failed";
    }
    t_.transfer.reset();  // the device copy goes back to the caching allocator now
    t_.copy = at::Tensor();
    t_.hold.reset();
    return err;
  }

 private:
  CopiedTensor t_;
};

uint64_t stored_bytes(const at::Tensor& t) {
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end()), stride(t.strides().begin(), t.strides().end());
  const int64_t n = format::non_overlapping(shape, stride) ? format::numel_of(shape) : format::span_of(shape, stride);
  return static_cast<uint64_t>(n) * t.element_size();
}

// Walks the tensors of an IValue (lists, tuples, optionals).
template <typename Fn>
void for_each_tensor(const c10::IValue& v, Fn&& fn) {
  if (v.isTensor())
    fn(v.toTensor());
  else if (v.isList())
    for (const auto& x : v.toListRef()) for_each_tensor(x, fn);
  else if (v.isTuple())
    for (const auto& x : v.toTupleRef().elements()) for_each_tensor(x, fn);
}

bool is_written(const c10::Argument& a) {
  if (a.alias_info() && a.alias_info()->isWrite()) return true;
  if (const auto* info = a.alias_info())
    for (const auto& c : info->containedTypes())
      if (c.isWrite()) return true;
  return false;
}

}  // namespace

// What a snapshot holds for one argument: a copied tensor or the value (a reference until end()).
struct SnapshotCapture::Captured {
  bool copied = false;  // written by the op: copied before it ran
  c10::IValue value;    // the input (or, if copied, the tensors' copies: see tensors)
  std::vector<CopiedTensor> tensors;
};

struct SnapshotCapture::Pending {
  std::unique_ptr<CounterWindow> window;  // open while the op runs
  SampleKey* key = nullptr;
  bool snapshot = false;  // this call's tensors are copied
  bool setup = false;     // a set-up call (construction, loading): its share of the budgets
  uint8_t settled = 0;    // evidence no later call could give (Evidence bits)
  const c10::FunctionSchema* schema = nullptr;
  std::string op;
  StageId stage = kUnstaged;
  std::vector<Captured> args;
  std::vector<int64_t> written;
  PickleValue math_policy;
  uint64_t reserved = 0;  // budget bytes taken (process, run)
  bool device = false;    // CUDA tensors involved
};

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

SnapshotCapture::SnapshotCapture(Sampler* sampler, SnapshotSink* sink, RunBudget* run_budget, DeviceAccess* device,
                                 SnapshotOptions options)
    : sampler_(sampler),
      sink_(sink),
      run_budget_(run_budget),
      device_(device),
      options_(std::move(options)),
      rank_(options_.rank) {}

void SnapshotCapture::count_drop(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++drops_[reason];
}

void SnapshotCapture::count_profile(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++profile_drops_[reason];
}

format::DropCounts SnapshotCapture::drops() const {
  std::lock_guard<std::mutex> lock(mu_);
  format::DropCounts d;
  if (!drops_.empty()) d["snapshots"] = drops_;
  if (!profile_drops_.empty()) d["profiles"] = profile_drops_;
  return d;
}

bool SnapshotCapture::reserve(uint64_t bytes, uint64_t device_bytes, bool setup, std::string& reason) {
  if (setup && setup_bytes_.fetch_add(bytes) + bytes > options_.budget_process / kSetupShareDivisor) {
    setup_bytes_.fetch_sub(bytes);
    reason = "setup_share";
    return false;
  }
  auto undo = [&](const char* why) {
    process_bytes_.fetch_sub(bytes);
    if (setup) setup_bytes_.fetch_sub(bytes);
    reason = why;
    return false;
  };
  if (process_bytes_.fetch_add(bytes) + bytes > options_.budget_process) return undo("budget_process");
  if (device_bytes && device_bytes_.load() + device_bytes > options_.budget_device) return undo("budget_device");
  if (run_budget_ && !run_budget_->reserve(bytes)) return undo("budget_run");
  return true;
}

void SnapshotCapture::give_back(uint64_t bytes, bool setup) {
  process_bytes_.fetch_sub(bytes);
  if (setup) setup_bytes_.fetch_sub(bytes);
  if (run_budget_ && bytes) run_budget_->give_back(bytes);
}

namespace {

// Evidence that no later call of the key could give either: counters the
// machine or the op cannot have, a snapshot of what no snapshot holds.
bool settles(uint8_t evidence, const std::string& reason) {
  if (evidence == kCounters)
    return reason == "collective" || reason == "counters_unavailable" || reason == "not_built_with_cupti";
  return reason == "unsupported_layout" || reason == "unsupported_dtype" || reason == "unsupported_device" ||
         reason == "no_gpu_access" || reason == "too_large";
}

}  // namespace

void SnapshotCapture::refuse(Pending& p, uint8_t evidence, const std::string& reason) {
  if (evidence == kCounters)
    count_profile(reason);
  else
    count_drop(reason);
  if (p.key) sampler_->note_refusal(p.key, evidence, reason);
  if (settles(evidence, reason)) p.settled |= evidence;
}

void SnapshotCapture::give_up(std::unique_ptr<Pending> p) {
  if (p->key) sampler_->finished(p->key, 0, "", SampleResult::Refused, 0, 0, p->settled);
}

namespace {

// Copies one tensor (compactly, or its span if its elements overlap) on the
// current stream. Throws c10::Error (OOM included).
CopiedTensor copy_tensor(const at::Tensor& t, DeviceAccess* device, std::atomic<uint64_t>* device_bytes) {
  CopiedTensor c;
  c.meta.dtype = python_dtype_name(t.scalar_type());
  c.meta.shape.assign(t.sizes().begin(), t.sizes().end());
  c.meta.stride.assign(t.strides().begin(), t.strides().end());
  c.meta.storage_offset = t.storage_offset();
  c.meta.device = t.device().str();
  c.meta.alignment = format::pointer_alignment(reinterpret_cast<uintptr_t>(t.data_ptr()));
  c.meta.requires_grad = t.requires_grad();
  if (format::non_overlapping(c.meta.shape, c.meta.stride)) {
    c.copy = t.clone(at::MemoryFormat::Contiguous);
    c.stored_numel = format::numel_of(c.meta.shape);
  } else {
    c.meta.span = true;
    c.stored_numel = format::span_of(c.meta.shape, c.meta.stride);
    c.copy = t.as_strided({c.stored_numel}, {1}, t.storage_offset()).clone();
  }
  c.nbytes = static_cast<uint64_t>(c.stored_numel) * t.element_size();
  if (t.is_cuda()) {
    c.hold = std::make_unique<DeviceHold>(device_bytes, c.nbytes);
    std::string err;
    c.transfer = device ? device->transfer(t.get_device(), current_stream_handle(t.device()), c.copy.data_ptr(),
                                           static_cast<size_t>(c.nbytes), err)
                        : nullptr;
    if (!c.transfer) throw std::runtime_error("device copy: " + (err.empty() ? "no GPU access" : err));
  }
  return c;
}

// Why a tensor cannot be snapshotted ("" if it can).
std::string unsupported(const at::Tensor& t) {
  if (!t.defined()) return "";
  if (t.is_meta() || !t.has_storage()) return "no_storage";
  if (t.layout() != c10::kStrided || t.is_quantized() || t.is_nested()) return "unsupported_layout";
  if (t.device().type() != c10::DeviceType::CPU && t.device().type() != c10::DeviceType::CUDA)
    return "unsupported_device";
  if (format::dtype_element_size(python_dtype_name(t.scalar_type())) == 0) return "unsupported_dtype";
  return "";
}

// IValue -> snapshot value (SPEC section 4, format/snapshot_file.h); tensors
// become blobs. Throws std::runtime_error for values a snapshot cannot hold.
struct ValueWriter {
  std::vector<std::unique_ptr<format::BlobSource>>* blobs;
  std::atomic<uint64_t>* device_bytes;
  DeviceAccess* device;

  PickleValue tensor(CopiedTensor c) {
    const size_t index = blobs->size();
    const int64_t n = c.stored_numel;
    format::TensorMeta meta = c.meta;
    blobs->push_back(std::make_unique<TensorBlob>(std::move(c)));
    return format::tensor_value(meta, index, n);
  }

  PickleValue operator()(const c10::IValue& v, const c10::TypePtr& type, std::vector<CopiedTensor>* copied) {
    if (v.isNone()) return PickleValue::none();
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) return PickleValue::none();
      if (copied && !copied->empty()) {
        CopiedTensor c = std::move(copied->front());
        copied->erase(copied->begin());
        return tensor(std::move(c));
      }
      return tensor(copy_tensor(t, device, device_bytes));
    }
    if (v.isInt()) {
      const int64_t i = v.toInt();
      if (type_is(type, c10::TypeKind::ScalarTypeType))
        return format::typed_value("dtype", python_dtype_name(static_cast<c10::ScalarType>(i)));
      if (type_is(type, c10::TypeKind::LayoutType))
        if (const char* name = python_layout_name(i)) return format::typed_value("layout", name);
      if (type_is(type, c10::TypeKind::MemoryFormatType))
        if (const char* name = python_memory_format_name(i)) return format::typed_value("memory_format", name);
      return PickleValue::integer(i);
    }
    if (v.isDouble()) return format::typed_value("float", format::python_float_repr(v.toDouble()));
    if (v.isBool()) return PickleValue::boolean(v.toBool());
    if (v.isString()) return PickleValue::string(v.toStringRef());
    if (v.isDevice()) return format::typed_value("device", v.toDevice().str());
    if (v.isComplexDouble()) {
      const auto z = v.toComplexDouble();
      return PickleValue::dict({{"kind", PickleValue::string("complex")},
                                {"real", PickleValue::string(format::python_float_repr(z.real()))},
                                {"imag", PickleValue::string(format::python_float_repr(z.imag()))}});
    }
    if (v.isList()) {
      const c10::TypePtr element = list_element_type(type);
      PickleValue l = PickleValue::list();
      for (const auto& x : v.toListRef()) l.push_back((*this)(x, element, copied));
      return l;
    }
    if (v.isTuple()) {
      PickleValue items = PickleValue::list();
      for (const auto& x : v.toTupleRef().elements()) items.push_back((*this)(x, nullptr, copied));
      return PickleValue::dict({{"kind", PickleValue::string("tuple")}, {"items", std::move(items)}});
    }
    if (v.isGenerator()) return PickleValue::dict({{"kind", PickleValue::string("generator")}});
    return format::typed_value("unsupported", "<" + v.tagKind() + ">");
  }
};

}  // namespace

CallRefusal SnapshotCapture::refusal(const SampledCall& call) {
  bool gpu = false, storage = true;
  for (const auto& v : call.inputs) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!t.defined()) return;
      storage = storage && !t.is_meta() && t.has_storage();
      gpu = gpu || t.is_cuda();
    });
    if (v.isDevice()) {  // factory ops and to(device): where the result goes
      storage = storage && v.toDevice().type() != c10::DeviceType::Meta;
      gpu = gpu || v.toDevice().is_cuda();
    }
  }
  if (!storage) return CallRefusal::NoStorage;
  if (options_.gpu_calls_only && !gpu) return CallRefusal::NotOnGpu;
  return CallRefusal::None;
}

namespace {

// A call of model construction or loading rather than of the compute: its
// result is random or uninitialised by definition (init, to_empty), or it
// writes a parameter (a leaf that requires grad: init, load_state_dict's
// copy_) or moves one (module.to(device)). View-only calls count with them
// (their schema says every result aliases an input without writing it:
// detach, view, t, expand... no kernel runs): Parameter() detaches every
// new weight, and such a snapshot costs the whole tensor twice.
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

}  // namespace

void* SnapshotCapture::begin(const SampledCall& call) {
  std::unique_ptr<Pending> p;
  try {
    p = std::make_unique<Pending>();
  } catch (...) {
    count_drop("internal_error");
    if (call.key) sampler_->finished(call.key, 0, "", SampleResult::Refused, 0, 0);
    return nullptr;
  }
  p->key = call.key;
  p->schema = call.schema;
  p->op = *call.op_dotted;
  p->stage = call.stage;
  const uint8_t wants =
      call.key ? sampler_->wanted(call.key)
               : static_cast<uint8_t>((options_.snapshots ? kSnapshot : 0) | (options_.profile ? kCounters : 0));
  bool snapshot = options_.snapshots && (wants & kSnapshot);
  const bool counters = options_.profile && (wants & kCounters);
  try {
    // What can be captured at all, and what it costs.
    std::string reason;
    uint64_t bytes = 0, device_bytes = 0;
    bool capturing = false;
    for (const auto& v : call.inputs)
      for_each_tensor(v, [&](const at::Tensor& t) {
        if (!t.defined() || !reason.empty()) return;
        reason = unsupported(t);
        if (!reason.empty()) return;
        const uint64_t b = stored_bytes(t);
        bytes += b;
        if (t.is_cuda()) {
          device_bytes += b;
          if (!device_ || !kHasStreamNativeHandle)
            reason = "no_gpu_access";
          else if (device_->stream_capture(current_stream_handle(t.device())) != DeviceAccess::Capture::None)
            capturing = true;
        }
      });
    if (capturing) {  // neither copies nor a window while a graph is captured
      refuse(*p, wants, "stream_capturing");
      give_up(std::move(p));
      return nullptr;
    }
    p->setup = is_setup_call(call);
    if (reason.empty() && bytes > options_.max_snapshot_bytes) reason = "too_large";
    if (snapshot && (!reason.empty() || !reserve(bytes, device_bytes, p->setup, reason))) {
      refuse(*p, kSnapshot, reason);
      snapshot = false;
    }
    if (!snapshot && !counters) {
      give_up(std::move(p));
      return nullptr;
    }
    p->snapshot = snapshot;
    p->reserved = snapshot ? bytes : 0;
    p->device = snapshot && device_bytes > 0;
    p->math_policy = current_math_policy();
    if (snapshot) copy_written_arguments(*p, call);
    if (counters) open_window(*p, call);
  } catch (const c10::OutOfMemoryError&) {
    if (!p) return nullptr;  // given up already (the throw came after)
    give_back(p->reserved, p->setup);
    refuse(*p, wants, "device_oom");
    give_up(std::move(p));
    return nullptr;
  } catch (const std::exception&) {
    if (!p) return nullptr;
    give_back(p->reserved, p->setup);
    refuse(*p, wants, "copy_error");
    give_up(std::move(p));
    return nullptr;
  }
  if (!p->snapshot && !p->window) {  // the window was refused (reported) and there is nothing to copy
    give_up(std::move(p));
    return nullptr;
  }
  return p.release();
}

// Written arguments now; the others by reference, copied in end(). An
// argument that shares memory with a written one (x.add_(x), out=b) changes
// too: copied before as well. Throws (OOM included).
void SnapshotCapture::copy_written_arguments(Pending& p, const SampledCall& call) {
  const auto& params = call.schema->arguments();
  const bool matches = params.size() == call.inputs.size();
  at::RecordFunctionGuard no_observers(false);
  c10::InferenceMode inference;
  std::shared_ptr<void> relaxed = p.device ? device_->relax_capture_mode() : nullptr;
  std::vector<at::Tensor> written_tensors;
  if (matches)
    for (size_t i = 0; i < call.inputs.size(); ++i)
      if (is_written(params[i]))
        for_each_tensor(call.inputs[i], [&](const at::Tensor& t) {
          if (t.defined()) written_tensors.push_back(t);
        });
  auto aliases_written = [&](const c10::IValue& v) {
    bool alias = false;
    for_each_tensor(v, [&](const at::Tensor& t) {
      for (const auto& w : written_tensors) alias = alias || (t.defined() && t.is_alias_of(w));
    });
    return alias;
  };
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    Captured c;
    c.value = call.inputs[i];
    if (matches && (is_written(params[i]) || aliases_written(call.inputs[i]))) {
      c.copied = true;
      p.written.push_back(static_cast<int64_t>(i));
      for_each_tensor(call.inputs[i], [&](const at::Tensor& t) {
        if (t.defined()) c.tensors.push_back(copy_tensor(t, device_, &device_bytes_));
      });
    }
    p.args.push_back(std::move(c));
  }
}

void SnapshotCapture::end(void* token, c10::ArrayRef<const c10::IValue> outputs, uint32_t signature_id, uint64_t seq) {
  SampleKey* key = static_cast<Pending*>(token)->key;
  try {
    finish(std::unique_ptr<Pending>(static_cast<Pending*>(token)), outputs, signature_id, seq);
  } catch (...) {  // never into torch; the key must not stay in flight
    count_drop("internal_error");
    if (key) sampler_->finished(key, 0, "", SampleResult::Refused, 0, 0);
  }
}

void SnapshotCapture::charge_window(const Pending& p, double seconds) {
  const auto us = static_cast<uint64_t>(std::max(0.0, seconds) * 1e6);
  window_us_.fetch_add(us);
  if (p.setup) setup_window_us_.fetch_add(us);
}

void SnapshotCapture::close_window(Pending& p, runtime::SnapshotJob& job) {
  job.profiled = true;
  job.profile = p.window->close();
  p.window.reset();
  charge_window(p, job.profile.window_seconds);
  job.profile.identity.set("math_policy", policy_json(p.math_policy));
  job.profile.identity.set("setup_call", format::JsonValue::boolean(p.setup));
  if (job.profile.status != "passed") refuse(p, kCounters, job.profile.status);
}

void SnapshotCapture::finish(std::unique_ptr<Pending> p, c10::ArrayRef<const c10::IValue> outputs,
                             uint32_t signature_id, uint64_t seq) {
  runtime::SnapshotJob job;
  if (p->window) close_window(*p, job);  // first, so that lingprobe's own copies stay outside the window
  job.snapshot = p->snapshot;
  if (!p->snapshot) {  // counters only (a refused snapshot, or snapshots off)
    submit(std::move(p), std::move(job), signature_id, seq);
    return;
  }
  // A snapshot that cannot be completed still leaves the counters to keep.
  auto without_snapshot = [&](const std::string& reason) {
    job.blobs.clear();
    give_back(p->reserved, p->setup);
    p->reserved = 0;
    refuse(*p, kSnapshot, reason);
    if (!job.profiled) return give_up(std::move(p));
    job.snapshot = false;
    submit(std::move(p), std::move(job), signature_id, seq);
  };
  try {
    uint64_t out_bytes = 0, out_device = 0;
    std::string reason;
    for (const auto& v : outputs)
      for_each_tensor(v, [&](const at::Tensor& t) {
        if (!t.defined() || !reason.empty()) return;
        reason = unsupported(t);
        if (reason.empty()) {
          out_bytes += stored_bytes(t);
          if (t.is_cuda()) {
            out_device += stored_bytes(t);
            // factory ops and to(cuda) have CUDA outputs only: the same rules as inputs
            if (!device_ || !kHasStreamNativeHandle)
              reason = "no_gpu_access";
            else if (device_->stream_capture(current_stream_handle(t.device())) != DeviceAccess::Capture::None)
              reason = "stream_capturing";
          }
        }
      });
    if (reason.empty() && p->reserved + out_bytes > options_.max_snapshot_bytes) reason = "too_large";
    if (reason.empty() && !reserve(out_bytes, out_device, p->setup, reason)) out_bytes = 0;
    if (!reason.empty()) return without_snapshot(reason);
    p->reserved += out_bytes;
    p->device = p->device || out_device;
    job.document = snapshot_document(*p, outputs, seq, job.blobs);
  } catch (const c10::OutOfMemoryError&) {
    if (p) without_snapshot("device_oom");  // else it ran already and the throw came after
    return;
  } catch (const std::exception&) {
    if (p) without_snapshot("copy_error");
    return;
  }
  submit(std::move(p), std::move(job), signature_id, seq);
}

format::PickleValue SnapshotCapture::snapshot_document(Pending& p, c10::ArrayRef<const c10::IValue> outputs,
                                                       uint64_t seq,
                                                       std::vector<std::unique_ptr<format::BlobSource>>& blobs) {
  at::RecordFunctionGuard no_observers(false);
  c10::InferenceMode inference;
  std::shared_ptr<void> relaxed = p.device ? device_->relax_capture_mode() : nullptr;
  ValueWriter write{&blobs, &device_bytes_, device_};
  const auto& params = p.schema->arguments();
  const bool matches = params.size() == p.args.size();
  PickleValue args = PickleValue::list(), kwargs = PickleValue::dict();
  for (size_t i = 0; i < p.args.size(); ++i) {
    Captured& c = p.args[i];
    PickleValue v = write(c.value, matches ? params[i].real_type() : nullptr, c.copied ? &c.tensors : nullptr);
    if (matches && params[i].kwarg_only())
      kwargs.set(params[i].name(), std::move(v));
    else
      args.push_back(std::move(v));
  }
  const auto& returns = p.schema->returns();
  PickleValue output;
  if (outputs.size() == 1) {
    output = write(outputs[0], returns.size() == 1 ? returns[0].real_type() : nullptr, nullptr);
  } else {
    output = PickleValue::list();
    for (size_t i = 0; i < outputs.size(); ++i)
      output.push_back(write(outputs[i], returns.size() == outputs.size() ? returns[i].real_type() : nullptr, nullptr));
  }
  std::ostringstream schema_text;
  schema_text << *p.schema;
  PickleValue doc = PickleValue::dict();
  doc.set("format", PickleValue::string(format::kSnapshotFormat));
  doc.set("op", PickleValue::string(p.op));
  doc.set("name", PickleValue::string(p.schema->name()));
  doc.set("overload", PickleValue::string(p.schema->overload_name()));
  doc.set("schema", PickleValue::string(schema_text.str()));
  doc.set("input_sha256", PickleValue::string(p.key ? p.key->input_sha : ""));
  doc.set("stage", PickleValue::string(stage_name(p.stage)));
  doc.set("rank", PickleValue::integer(rank_.load()));
  doc.set("seq", PickleValue::integer(static_cast<int64_t>(seq)));
  doc.set("run_id", PickleValue::string(options_.run_id));
  doc.set("pid", PickleValue::integer(::getpid()));
  doc.set("torch_version", PickleValue::string(TORCH_VERSION));
  doc.set("math_policy", p.math_policy);
  doc.set("setup_call", PickleValue::boolean(p.setup));
  PickleValue written = PickleValue::list();
  for (int64_t w : p.written) written.push_back(PickleValue::integer(w));
  doc.set("written_args", std::move(written));
  doc.set("captured", PickleValue::string("written_args copied before the op; every other argument and the output "
                                          "after it (the op does not write them)"));
  doc.set("args", std::move(args));
  doc.set("kwargs", std::move(kwargs));
  doc.set("output", std::move(output));
  return doc;
}

void SnapshotCapture::submit(std::unique_ptr<Pending> p, runtime::SnapshotJob job, uint32_t signature_id,
                             uint64_t seq) {
  job.signature_id = signature_id;
  job.seq = seq;
  job.stage = stage_name(p->stage);
  job.rank = rank_.load();
  for (const auto& b : job.blobs) job.bytes += b->nbytes();
  // The device bytes were reserved up front; the blobs give them back as they stream.
  const uint64_t reserved = p->reserved;
  const bool setup = p->setup;
  const uint8_t settled = p->settled;
  const uint8_t asked = static_cast<uint8_t>((job.snapshot ? kSnapshot : 0) | (job.profiled ? kCounters : 0));
  const bool counters_passed = job.profiled && job.profile.status == "passed";
  SampleKey* key = p->key;
  Sampler* sampler = sampler_;
  SnapshotCapture* self = this;
  job.done = [=](runtime::SnapshotJob::Result r, const std::string& what, const std::string& sha, uint8_t kept) {
    using Result = runtime::SnapshotJob::Result;
    if (r == Result::Kept) {
      const bool snapshot_kept = kept & runtime::SnapshotJob::kKeptSnapshot;
      if (!snapshot_kept) self->give_back(reserved, setup);
      const uint8_t got =
          static_cast<uint8_t>((snapshot_kept ? kSnapshot : 0) |
                               (counters_passed && (kept & runtime::SnapshotJob::kKeptProfile) ? kCounters : 0));
      sampler->finished(key, signature_id, sha, SampleResult::Kept, snapshot_kept ? reserved : 0, got, settled);
      return;
    }
    self->give_back(reserved, setup);
    if (r == Result::Duplicate) {
      self->count_drop("duplicate_signature");
      sampler->finished(key, signature_id, sha, SampleResult::Duplicate, 0, 0, settled);
    } else {
      if (asked & kSnapshot)
        self->count_drop(what);
      else
        self->count_profile(what);
      if (key) sampler->note_refusal(key, asked, what);
      sampler->finished(key, signature_id, sha, SampleResult::Refused, 0, 0, settled);
    }
  };
  sink_->submit(std::move(job));
}

// The counter window: the op's CUDA device and current stream, unless the
// op is a collective (a replayed NCCL kernel would wait for its peers
// forever), another RecordFunction consumer (torch.profiler) is active on
// this thread (its Activity callbacks must not be replaced mid-session), or
// the process's window seconds (set-up calls: their share) are spent.
void SnapshotCapture::open_window(Pending& p, const SampledCall& call) {
  const std::string name = call.schema->name();
  static const char* const kCollectives[] = {
      "c10d::", "_c10d_functional::", "c10d_functional::", "_c10d_functional_autograd::", "symm_mem::"};
  const auto budget_us = static_cast<uint64_t>(options_.profile_budget_s * 1e6);
  if (std::any_of(std::begin(kCollectives), std::end(kCollectives),
                  [&](const char* prefix) { return name.rfind(prefix, 0) == 0; }))
    return refuse(p, kCounters, "collective");
  if (window_us_.load() >= budget_us) return refuse(p, kCounters, "budget_profile");
  if (p.setup && setup_window_us_.load() >= budget_us / kSetupShareDivisor) return refuse(p, kCounters, "setup_share");
  if (at::hasThreadLocalCallbacks()) return refuse(p, kCounters, "profiler_active");
  // The op's device: its first CUDA tensor's, else a factory call's CUDA device argument (randint(device="cuda")).
  std::optional<c10::Device> cuda;
  for (const auto& v : call.inputs) {
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!cuda && t.defined() && t.is_cuda()) cuda = t.device();
    });
    if (!cuda && v.isDevice() && v.toDevice().is_cuda()) {
      cuda = v.toDevice();
      if (!cuda->has_index()) cuda = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice();
    }
  }
  if (!cuda) {
    refuse(p, kCounters, "no_cuda_tensor");
    if (!options_.gpu_on_machine) p.settled |= kCounters;  // no call of this machine has counters
    return;
  }
  void* stream = current_stream_handle(*cuda);
  if (device_->stream_capture(stream) != DeviceAccess::Capture::None) return refuse(p, kCounters, "stream_capturing");
  std::string reason;
  const auto t0 = std::chrono::steady_clock::now();
  p.window = device_->open_counters(cuda->index(), stream, reason);
  if (!p.window) {  // a refused window's wait (the counter lock, the probe) is stall too
    charge_window(p, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    refuse(p, kCounters, reason.empty() ? "window_not_opened" : reason);
  }
}

void SnapshotCapture::abandon(void* token) {
  std::unique_ptr<Pending> p(static_cast<Pending*>(token));
  if (p->window) {
    charge_window(*p, p->window->close().window_seconds);  // the profiler must not stay started
    p->window.reset();
    count_profile("abandoned");
  }
  give_back(p->reserved, p->setup);
  if (p->snapshot) count_drop("abandoned");
  give_up(std::move(p));
}

}  // namespace lingprobe::capture
