#include "replay/snapshot_values.h"

#include <c10/core/InferenceMode.h>
#include <torch/version.h>

#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "capture/signature_builder.h"
#include "format/float_repr.h"
#include "format/tensor_layout.h"

namespace lingprobe::replay {

using format::PickleValue;

c10::ScalarType scalar_type_of(const std::string& name) {
  for (int i = 0; i < static_cast<int>(c10::ScalarType::NumOptions); ++i) {
    const auto t = static_cast<c10::ScalarType>(i);
    if (t == c10::ScalarType::Undefined) continue;
    if (capture::python_dtype_name(t) == name) return t;
  }
  throw std::runtime_error("dtype " + name + " is not known to this torch " TORCH_VERSION);
}

namespace {

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
at::Tensor rebuild_tensor(RebuildContext& ctx, const PickleValue& v) {
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
  // `x * 0.5`: the number promotes as a number (an int tensor's product is float32, not float64)
  if (const PickleValue* w = v.find("wrapped_number"); w && w->as_bool())
    t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

c10::TypePtr infer_type(const c10::IValue& v) {
  if (v.isTensor()) return c10::TensorType::get();
  if (v.isInt()) return c10::IntType::get();
  if (v.isDouble()) return c10::FloatType::get();
  if (v.isBool()) return c10::BoolType::get();
  if (v.isString()) return c10::StringType::get();
  return v.type();
}

c10::IValue rebuild_list(RebuildContext& ctx, const PickleValue& v, const c10::TypePtr& type) {
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

}  // namespace

c10::IValue rebuild(RebuildContext& ctx, const PickleValue& v, const c10::TypePtr& type) {
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
  if (kind == "generator") {  // the recorded state is not kept: a copy of the device's default (random all the same)
    const PickleValue* recorded = v.find("device");
    if (!recorded) return c10::IValue();  // a snapshot from before the device was kept: the default generator
    const c10::Device device = target_device(recorded->as_string(), ctx.device, ctx.keep_cpu);
    return c10::IValue(at::globalContext().defaultGenerator(device).clone());
  }
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

}  // namespace lingprobe::replay
