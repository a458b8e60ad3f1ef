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

#include <cstdlib>
#include <sstream>
#include <type_traits>

#include "capture/cuda_stream.h"
#include "capture/signature_builder.h"
#include "format/float_repr.h"
#include "format/tensor_layout.h"

namespace lingprobe::capture {

using format::PickleValue;

namespace {

std::string bool_text(bool b) { return b ? "true" : "false"; }

template <typename T>
std::string setting_text(T v) {
  if constexpr (std::is_same_v<T, bool>) return bool_text(v);
  else return std::to_string(static_cast<int>(v));
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
  if (v.isTensor()) fn(v.toTensor());
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
  return p;
}

SnapshotCapture::SnapshotCapture(Sampler* sampler, SnapshotSink* sink, RunBudget* run_budget, DeviceAccess* device,
                                 SnapshotOptions options)
    : sampler_(sampler), sink_(sink), run_budget_(run_budget), device_(device), options_(std::move(options)),
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

bool SnapshotCapture::reserve(uint64_t bytes, uint64_t device_bytes, std::string& reason) {
  if (process_bytes_.fetch_add(bytes) + bytes > options_.budget_process) {
    process_bytes_.fetch_sub(bytes);
    reason = "budget_process";
    return false;
  }
  if (device_bytes && device_bytes_.load() + device_bytes > options_.budget_device) {
    process_bytes_.fetch_sub(bytes);
    reason = "budget_device";
    return false;
  }
  if (run_budget_ && !run_budget_->reserve(bytes)) {
    process_bytes_.fetch_sub(bytes);
    reason = "budget_run";
    return false;
  }
  return true;
}

void SnapshotCapture::give_back(uint64_t bytes) {
  process_bytes_.fetch_sub(bytes);
  if (run_budget_ && bytes) run_budget_->give_back(bytes);
}

void SnapshotCapture::drop(Pending* p, const std::string& reason, SampleResult result) {
  count_drop(reason);
  if (p->key) sampler_->finished(p->key, 0, "", result, 0);
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
  if (t.device().type() != c10::DeviceType::CPU && t.device().type() != c10::DeviceType::CUDA) return "unsupported_device";
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

void* SnapshotCapture::begin(const SampledCall& call) {
  std::unique_ptr<Pending> p;
  try {
    p = std::make_unique<Pending>();
  } catch (...) {
    count_drop("internal_error");
    if (call.key) sampler_->finished(call.key, 0, "", SampleResult::Dropped, 0);
    return nullptr;
  }
  p->key = call.key;
  p->schema = call.schema;
  p->op = *call.op_dotted;
  p->stage = call.stage;
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
          if (!device_ || !kHasStreamNativeHandle) reason = "no_gpu_access";
          else if (device_->stream_capture(current_stream_handle(t.device())) != DeviceAccess::Capture::None)
            capturing = true;
        }
      });
    if (capturing) reason = "stream_capturing";
    if (!reason.empty()) {
      drop(p.get(), reason);
      return nullptr;
    }
    if (!options_.snapshots) bytes = device_bytes = 0;  // counters only: nothing is copied
    if (!reserve(bytes, device_bytes, reason)) {
      drop(p.get(), reason);
      return nullptr;
    }
    p->reserved = bytes;
    p->device = device_bytes > 0;
    p->math_policy = current_math_policy();
    // Written arguments now; the others by reference, copied in end().
    const auto& params = call.schema->arguments();
    const bool matches = params.size() == call.inputs.size();
    at::RecordFunctionGuard no_observers(false);
    c10::InferenceMode inference;
    std::shared_ptr<void> relaxed = device_bytes ? device_->relax_capture_mode() : nullptr;
    std::vector<at::Tensor> written_tensors;
    if (options_.snapshots && matches)
      for (size_t i = 0; i < call.inputs.size(); ++i)
        if (is_written(params[i]))
          for_each_tensor(call.inputs[i], [&](const at::Tensor& t) {
            if (t.defined()) written_tensors.push_back(t);
          });
    // An argument that shares memory with a written one (x.add_(x), out=b) changes too: copied before as well.
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
      if (options_.snapshots && matches && (is_written(params[i]) || aliases_written(call.inputs[i]))) {
        c.copied = true;
        p->written.push_back(static_cast<int64_t>(i));
        for_each_tensor(call.inputs[i], [&](const at::Tensor& t) {
          if (t.defined()) c.tensors.push_back(copy_tensor(t, device_, &device_bytes_));
        });
      }
      p->args.push_back(std::move(c));
    }
    if (options_.profile) open_window(*p, call);
  } catch (const c10::OutOfMemoryError&) {
    give_back(p->reserved);
    drop(p.get(), "device_oom");
    return nullptr;
  } catch (const std::exception&) {
    give_back(p->reserved);
    drop(p.get(), "copy_error");
    return nullptr;
  }
  return p.release();
}

void SnapshotCapture::end(void* token, c10::ArrayRef<const c10::IValue> outputs, uint32_t signature_id,
                          uint64_t seq) {
  SampleKey* key = static_cast<Pending*>(token)->key;
  try {
    finish(std::unique_ptr<Pending>(static_cast<Pending*>(token)), outputs, signature_id, seq);
  } catch (...) {  // never into torch; the key must not stay in flight
    count_drop("internal_error");
    if (key) sampler_->finished(key, 0, "", SampleResult::Dropped, 0);
  }
}

void SnapshotCapture::finish(std::unique_ptr<Pending> p, c10::ArrayRef<const c10::IValue> outputs, uint32_t signature_id,
                             uint64_t seq) {
  format::SnapshotJob job;
  if (p->window) {  // first, so that lingprobe's own copies stay outside the window
    job.profiled = true;
    job.profile = p->window->close();
    p->window.reset();
    if (job.profile.status != "passed") count_profile(job.profile.status);
  }
  job.snapshot = options_.snapshots;
  if (!options_.snapshots) {
    finish_profile_only(std::move(p), std::move(job), outputs, signature_id, seq);
    return;
  }
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
            if (!device_ || !kHasStreamNativeHandle) reason = "no_gpu_access";
            else if (device_->stream_capture(current_stream_handle(t.device())) != DeviceAccess::Capture::None)
              reason = "stream_capturing";
          }
        }
      });
    if (reason.empty() && !reserve(out_bytes, out_device, reason)) out_bytes = 0;
    if (!reason.empty()) {
      give_back(p->reserved);
      if (job.profiled) {  // the counters are still worth keeping
        count_drop(reason);
        p->reserved = 0;
        job.snapshot = false;
        submit(std::move(p), std::move(job), signature_id, seq);
        return;
      }
      drop(p.get(), reason);
      return;
    }
    p->reserved += out_bytes;
    p->device = p->device || out_device;

    at::RecordFunctionGuard no_observers(false);
    c10::InferenceMode inference;
    std::shared_ptr<void> relaxed = p->device ? device_->relax_capture_mode() : nullptr;
    ValueWriter write{&job.blobs, &device_bytes_, device_};
    const auto& params = p->schema->arguments();
    const bool matches = params.size() == p->args.size();
    PickleValue args = PickleValue::list(), kwargs = PickleValue::dict();
    for (size_t i = 0; i < p->args.size(); ++i) {
      Captured& c = p->args[i];
      PickleValue v = write(c.value, matches ? params[i].real_type() : nullptr, c.copied ? &c.tensors : nullptr);
      if (matches && params[i].kwarg_only()) kwargs.set(params[i].name(), std::move(v));
      else args.push_back(std::move(v));
    }
    const auto& returns = p->schema->returns();
    PickleValue output;
    if (outputs.size() == 1) {
      output = write(outputs[0], returns.size() == 1 ? returns[0].real_type() : nullptr, nullptr);
    } else {
      output = PickleValue::list();
      for (size_t i = 0; i < outputs.size(); ++i)
        output.push_back(write(outputs[i], returns.size() == outputs.size() ? returns[i].real_type() : nullptr, nullptr));
    }
    std::ostringstream schema_text;
    schema_text << *p->schema;
    PickleValue doc = PickleValue::dict();
    doc.set("format", PickleValue::string(format::kSnapshotFormat));
    doc.set("op", PickleValue::string(p->op));
    doc.set("name", PickleValue::string(p->schema->name()));
    doc.set("overload", PickleValue::string(p->schema->overload_name()));
    doc.set("schema", PickleValue::string(schema_text.str()));
    doc.set("input_sha256", PickleValue::string(p->key ? p->key->input_sha : ""));
    doc.set("stage", PickleValue::string(stage_name(p->stage)));
    doc.set("rank", PickleValue::integer(rank_.load()));
    doc.set("seq", PickleValue::integer(static_cast<int64_t>(seq)));
    doc.set("run_id", PickleValue::string(options_.run_id));
    doc.set("pid", PickleValue::integer(::getpid()));
    doc.set("torch_version", PickleValue::string(TORCH_VERSION));
    doc.set("math_policy", std::move(p->math_policy));
    PickleValue written = PickleValue::list();
    for (int64_t w : p->written) written.push_back(PickleValue::integer(w));
    doc.set("written_args", std::move(written));
    doc.set("captured", PickleValue::string("written_args copied before the op; every other argument and the output "
                                            "after it (the op does not write them)"));
    doc.set("args", std::move(args));
    doc.set("kwargs", std::move(kwargs));
    doc.set("output", std::move(output));
    job.document = std::move(doc);
  } catch (const c10::OutOfMemoryError&) {
    job.blobs.clear();
    give_back(p->reserved);
    drop(p.get(), "device_oom");
    return;
  } catch (const std::exception&) {
    job.blobs.clear();
    give_back(p->reserved);
    drop(p.get(), "copy_error");
    return;
  }
  submit(std::move(p), std::move(job), signature_id, seq);
}

void SnapshotCapture::finish_profile_only(std::unique_ptr<Pending> p, format::SnapshotJob job,
                                          c10::ArrayRef<const c10::IValue>, uint32_t signature_id, uint64_t seq) {
  if (!job.profiled) {  // nothing was measured (the reason is counted): no files
    drop(p.get(), "no_counters");
    return;
  }
  submit(std::move(p), std::move(job), signature_id, seq);
}

void SnapshotCapture::submit(std::unique_ptr<Pending> p, format::SnapshotJob job, uint32_t signature_id, uint64_t seq) {
  job.signature_id = signature_id;
  job.seq = seq;
  job.stage = stage_name(p->stage);
  job.rank = rank_.load();
  for (const auto& b : job.blobs) job.bytes += b->nbytes();
  // The device bytes were reserved up front; the blobs give them back as they stream.
  const uint64_t reserved = p->reserved;
  SampleKey* key = p->key;
  Sampler* sampler = sampler_;
  SnapshotCapture* self = this;
  job.done = [=](format::SnapshotJob::Result r, const std::string& what, const std::string& sha) {
    if (r == format::SnapshotJob::Result::Kept) {
      sampler->finished(key, signature_id, sha, SampleResult::Kept, reserved);
      return;
    }
    self->give_back(reserved);
    if (r == format::SnapshotJob::Result::Duplicate) {
      self->count_drop("duplicate_signature");
      sampler->finished(key, signature_id, sha, SampleResult::Duplicate, 0);
    } else {
      self->count_drop(what);
      sampler->finished(key, signature_id, sha, SampleResult::Dropped, 0);
    }
  };
  sink_->submit(std::move(job));
}

// The counter window: the op's CUDA device and current stream, unless the
// op is a collective (a replayed NCCL kernel would wait for its peers
// forever) or another RecordFunction consumer (torch.profiler) is active on
// this thread (its Activity callbacks must not be replaced mid-session).
void SnapshotCapture::open_window(Pending& p, const SampledCall& call) {
  const std::string name = call.schema->name();
  static const char* const kCollectives[] = {"c10d::", "_c10d_functional::", "c10d_functional::",
                                             "_c10d_functional_autograd::", "symm_mem::"};
  if (std::any_of(std::begin(kCollectives), std::end(kCollectives),
                  [&](const char* prefix) { return name.rfind(prefix, 0) == 0; })) {
    count_profile("collective");
    return;
  }
  if (at::hasThreadLocalCallbacks()) {
    count_profile("profiler_active");
    return;
  }
  at::Tensor cuda;
  for (const auto& v : call.inputs)
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (!cuda.defined() && t.defined() && t.is_cuda()) cuda = t;
    });
  if (!cuda.defined()) {
    count_profile("no_cuda_tensor");
    return;
  }
  std::string reason;
  p.window = device_->open_counters(cuda.get_device(), current_stream_handle(cuda.device()), reason);
  if (!p.window) count_profile(reason.empty() ? "window_not_opened" : reason);
}

void SnapshotCapture::abandon(void* token) {
  std::unique_ptr<Pending> p(static_cast<Pending*>(token));
  if (p->window) {
    p->window->close();  // the profiler must not stay started
    count_profile("abandoned");
  }
  give_back(p->reserved);
  drop(p.get(), "abandoned");
}

}  // namespace lingprobe::capture
