#include "capture/tensor_copy.h"

#include <stdexcept>

#include "capture/cuda_stream.h"
#include "capture/signature_builder.h"
#include "format/float_repr.h"

namespace lingprobe::capture {

using format::PickleValue;

std::string TensorBlob::stream(const std::function<bool(const void*, size_t)>& out) {
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

uint64_t stored_bytes(const at::Tensor& t) {
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end()), stride(t.strides().begin(), t.strides().end());
  const int64_t n = format::non_overlapping(shape, stride) ? format::numel_of(shape) : format::span_of(shape, stride);
  return static_cast<uint64_t>(n) * t.element_size();
}

bool is_written(const c10::Argument& a) {
  if (a.alias_info() && a.alias_info()->isWrite()) return true;
  if (const auto* info = a.alias_info())
    for (const auto& c : info->containedTypes())
      if (c.isWrite()) return true;
  return false;
}

namespace {

// A device tensor's stored bytes copied into pinned host memory on its stream: a contiguous tensor straight from
// its memory, another (or a lazily conjugated or negated view, whose memory holds other values) through a compact
// device copy that goes back to the caching allocator at once (the allocator is stream-ordered: nothing reuses it
// before the copy out of it has run).
void copy_to_host_buffer(CopiedTensor& c, const at::Tensor& t, HostBuffer& host) {
  if (!c.nbytes) return;
  const at::Tensor values = t.resolve_conj().resolve_neg();  // t itself unless a bit is set
  at::Tensor source = values;
  if (c.meta.span)
    source = values.as_strided({c.stored_numel}, {1}, values.storage_offset()).clone();
  else if (!values.is_contiguous())
    source = values.clone(at::MemoryFormat::Contiguous);
  std::string err;
  c.transfer = host.copy(t.get_device(), current_stream_handle(t.device()), source.data_ptr(),
                         static_cast<size_t>(c.nbytes), err);
  if (!c.transfer) throw std::runtime_error("copy to pinned host memory: " + err);
}

}  // namespace

CopiedTensor copy_tensor(const at::Tensor& t, DeviceAccess* device, std::atomic<uint64_t>* device_bytes,
                         HostBuffer* host) {
  CopiedTensor c;
  c.meta.dtype = python_dtype_name(t.scalar_type());
  c.meta.shape.assign(t.sizes().begin(), t.sizes().end());
  c.meta.stride.assign(t.strides().begin(), t.strides().end());
  c.meta.storage_offset = t.storage_offset();
  c.meta.device = t.device().str();
  c.meta.alignment = format::pointer_alignment(reinterpret_cast<uintptr_t>(t.data_ptr()));
  c.meta.requires_grad = t.requires_grad();
  c.meta.wrapped_number = t.unsafeGetTensorImpl()->is_wrapped_number();
  c.meta.span = !format::non_overlapping(c.meta.shape, c.meta.stride);
  c.stored_numel = c.meta.span ? format::span_of(c.meta.shape, c.meta.stride) : format::numel_of(c.meta.shape);
  c.nbytes = static_cast<uint64_t>(c.stored_numel) * t.element_size();
  if (host && t.is_cuda()) {
    copy_to_host_buffer(c, t, *host);
    return c;
  }
  c.copy = c.meta.span ? t.as_strided({c.stored_numel}, {1}, t.storage_offset()).clone()
                       : t.clone(at::MemoryFormat::Contiguous);
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

std::string unsupported(const at::Tensor& t) {
  if (!t.defined()) return "";
  if (t.is_meta() || !t.has_storage()) return "no_storage";
  if (t.layout() != c10::kStrided || t.is_quantized() || t.is_nested()) return "unsupported_layout";
  if (t.device().type() != c10::DeviceType::CPU && t.device().type() != c10::DeviceType::CUDA)
    return "unsupported_device";
  if (format::dtype_element_size(python_dtype_name(t.scalar_type())) == 0) return "unsupported_dtype";
  return "";
}

bool replayable_value(const c10::IValue& v) {
  if (v.isList()) {
    for (const auto& x : v.toListRef())
      if (!replayable_value(x)) return false;
    return true;
  }
  if (v.isTuple()) {
    for (const auto& x : v.toTupleRef().elements())
      if (!replayable_value(x)) return false;
    return true;
  }
  return v.isNone() || v.isTensor() || v.isInt() || v.isDouble() || v.isBool() || v.isString() || v.isDevice() ||
         v.isComplexDouble() || v.isGenerator();
}

PickleValue ValueWriter::tensor(CopiedTensor c) {
  const size_t index = blobs->size();
  const int64_t n = c.stored_numel;
  format::TensorMeta meta = c.meta;
  blobs->push_back(std::make_unique<TensorBlob>(std::move(c)));
  return format::tensor_value(meta, index, n);
}

PickleValue ValueWriter::operator()(const c10::IValue& v, const c10::TypePtr& type, std::vector<CopiedTensor>* copied) {
  if (v.isNone()) return PickleValue::none();
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) return PickleValue::none();
    if (copied && !copied->empty()) {
      CopiedTensor c = std::move(copied->front());
      copied->erase(copied->begin());
      return tensor(std::move(c));
    }
    return tensor(copy_tensor(t, device, device_bytes, host));
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
  if (v.isGenerator())  // its device: the replay passes a generator of its own there (its state is not kept)
    return PickleValue::dict(
        {{"kind", PickleValue::string("generator")}, {"device", PickleValue::string(v.toGenerator().device().str())}});
  return format::typed_value("unsupported", "<" + v.tagKind() + ">");
}

format::PickleValue ValueWriter::outputs(c10::ArrayRef<const c10::IValue> values,
                                         const std::vector<c10::Argument>& returns) {
  if (values.size() == 1) return (*this)(values[0], returns.size() == 1 ? returns[0].real_type() : nullptr, nullptr);
  format::PickleValue list = format::PickleValue::list();
  for (size_t i = 0; i < values.size(); ++i)
    list.push_back((*this)(values[i], returns.size() == values.size() ? returns[i].real_type() : nullptr, nullptr));
  return list;
}

}  // namespace lingprobe::capture
