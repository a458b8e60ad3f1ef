#include "capture/signature_builder.h"

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <cctype>
#include <cstring>

#include "format/canonical_json.h"
#include "format/sha256.h"
#include "format/signature_fields.h"

namespace lingprobe::capture {
namespace {

using format::JsonValue;

JsonValue int_array(c10::IntArrayRef values) {
  JsonValue a = JsonValue::array();
  a.items().reserve(values.size());
  for (int64_t v : values) a.push_back(JsonValue::integer(v));
  return a;
}

JsonValue tensor_json(const at::Tensor& t) {
  if (!t.defined()) return JsonValue::null();
  JsonValue o = JsonValue::object();
  o.set("dtype", JsonValue::string(python_dtype_name(t.scalar_type())));
  try {
    o.set("shape", int_array(t.sizes()));
    o.set("stride", t.layout() == c10::kStrided ? int_array(t.strides()) : JsonValue::null());
  } catch (const std::exception&) {
    o.set("shape", JsonValue::null());
    o.set("stride", JsonValue::null());
  }
  return o;
}

JsonValue fallback(const c10::IValue& v) { return JsonValue::string("<" + v.tagKind() + ">"); }

JsonValue to_json(const c10::IValue& v, const c10::TypePtr& type) {
  if (v.isNone()) return JsonValue::null();
  if (v.isTensor()) return tensor_json(v.toTensor());
  if (v.isInt()) {
    const int64_t i = v.toInt();
    if (type_is(type, c10::TypeKind::ScalarTypeType))
      return JsonValue::string(python_dtype_name(static_cast<c10::ScalarType>(i)));
    if (type_is(type, c10::TypeKind::LayoutType)) {
      if (const char* name = python_layout_name(i)) return JsonValue::string(name);
    }
    if (type_is(type, c10::TypeKind::MemoryFormatType)) {
      if (const char* name = python_memory_format_name(i)) return JsonValue::string(name);
    }
    return JsonValue::integer(i);
  }
  if (v.isDouble()) return JsonValue::floating(v.toDouble());
  if (v.isBool()) return JsonValue::boolean(v.toBool());
  if (v.isString()) return JsonValue::string(v.toStringRef());
  if (v.isDevice()) return JsonValue::string(c10::DeviceTypeName(v.toDevice().type(), /*lower_case=*/true));
  if (v.isList()) {
    const c10::TypePtr element = list_element_type(type);
    JsonValue a = JsonValue::array();
    for (const auto& item : v.toListRef()) a.push_back(to_json(item, element));
    return a;
  }
  if (v.isTuple()) {
    JsonValue a = JsonValue::array();
    for (const auto& item : v.toTupleRef().elements()) a.push_back(to_json(item, nullptr));
    return a;
  }
  if (v.isGenericDict()) {
    JsonValue o = JsonValue::object();
    for (const auto& entry : v.toGenericDict()) {
      const c10::IValue& key = entry.key();
      std::string name = key.isString() ? key.toStringRef() : format::canonical_json(to_json(key, nullptr));
      o.set(std::move(name), to_json(entry.value(), nullptr));
    }
    return o;
  }
  return fallback(v);
}

// IValue equality as c10::IValue::equals decides it for default values
// (tag-strict: Int 1 is not Double 1.0), which is what Python's dispatch
// uses to drop defaulted arguments.
bool equals_default(const c10::IValue& v, const c10::IValue& d) {
  if (d.isNone()) return v.isNone();
  if (d.isInt()) return v.isInt() && v.toInt() == d.toInt();
  if (d.isDouble()) return v.isDouble() && v.toDouble() == d.toDouble();
  if (d.isBool()) return v.isBool() && v.toBool() == d.toBool();
  if (d.isString()) return v.isString() && v.toStringRef() == d.toStringRef();
  if (d.isDevice()) return v.isDevice() && v.toDevice() == d.toDevice();
  if (d.isList()) {
    if (!v.isList()) return false;
    auto a = v.toListRef();
    auto b = d.toListRef();
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!equals_default(a[i], b[i])) return false;
    return true;
  }
  return false;
}

bool is_default(const c10::Argument& arg, const c10::IValue& v) {
  return arg.default_value().has_value() && equals_default(v, *arg.default_value());
}

}  // namespace

bool type_is(const c10::TypePtr& type, c10::TypeKind kind) {
  if (!type) return false;
  if (type->kind() == kind) return true;
  if (auto opt = type->cast<c10::OptionalType>()) return opt->getElementType()->kind() == kind;
  return false;
}

c10::TypePtr list_element_type(const c10::TypePtr& type) {
  if (!type) return nullptr;
  c10::TypePtr t = type;
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  if (auto list = t->cast<c10::ListType>()) return list->getElementType();
  return nullptr;
}

const char* python_layout_name(int64_t layout) {
  // c10::Layout enumerators, in declaration order (stable across versions).
  static const char* const kNames[] = {"torch.strided",    "torch.sparse_coo", "torch.sparse_csr", "torch._mkldnn",
                                       "torch.sparse_csc", "torch.sparse_bsr", "torch.sparse_bsc", "torch.jagged"};
  if (layout >= 0 && layout < static_cast<int64_t>(sizeof kNames / sizeof kNames[0])) return kNames[layout];
  return nullptr;
}

const char* python_memory_format_name(int64_t format) {
  static const char* const kNames[] = {"torch.contiguous_format", "torch.preserve_format", "torch.channels_last",
                                       "torch.channels_last_3d"};
  if (format >= 0 && format < 4) return kNames[format];
  return nullptr;
}

std::string dotted_op_name(const c10::OperatorName& name) {
  std::string out;
  out.reserve(name.name.size() + name.overload_name.size() + 9);
  for (size_t i = 0; i < name.name.size(); ++i) {
    if (name.name[i] == ':' && i + 1 < name.name.size() && name.name[i + 1] == ':') {
      out.push_back('.');
      ++i;
    } else {
      out.push_back(name.name[i]);
    }
  }
  out.push_back('.');
  out += name.overload_name.empty() ? "default" : name.overload_name;
  return out;
}

std::string python_dtype_name(c10::ScalarType type) {
  struct Entry {
    const char* c10_name;
    const char* python_name;
  };
  static const Entry kNames[] = {
      {"Byte", "uint8"},
      {"Char", "int8"},
      {"Short", "int16"},
      {"Int", "int32"},
      {"Long", "int64"},
      {"Half", "float16"},
      {"Float", "float32"},
      {"Double", "float64"},
      {"ComplexHalf", "complex32"},
      {"ComplexFloat", "complex64"},
      {"ComplexDouble", "complex128"},
      {"Bool", "bool"},
      {"QInt8", "qint8"},
      {"QUInt8", "quint8"},
      {"QInt32", "qint32"},
      {"BFloat16", "bfloat16"},
      {"QUInt4x2", "quint4x2"},
      {"QUInt2x4", "quint2x4"},
  };
  const char* c10_name = c10::toString(type);
  for (const auto& e : kNames)
    if (std::strcmp(e.c10_name, c10_name) == 0) return std::string("torch.") + e.python_name;
  // Newer types (Float8_e4m3fn, UInt16, Bits8, ...): Python spells them as
  // the lowercased c10 name.
  std::string lower = "torch.";
  for (const char* p = c10_name; *p; ++p)
    lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(*p))));
  return lower;
}

namespace {

bool is_scalar_type(const c10::TypePtr& type) {
  for (c10::TypeKind kind : {c10::TypeKind::IntType, c10::TypeKind::FloatType, c10::TypeKind::NumberType,
                             c10::TypeKind::SymIntType, c10::TypeKind::SymFloatType})
    if (type_is(type, kind)) return true;
  return false;
}

uint64_t scalar_mask(const std::vector<c10::Argument>& arguments) {
  uint64_t mask = 0;
  for (size_t i = 0; i < arguments.size() && i < 64; ++i)
    if (is_scalar_type(arguments[i].real_type())) mask |= uint64_t{1} << i;
  return mask;
}

bool folds(uint64_t fold, size_t i) { return i < 64 && (fold >> i & 1); }

// A value as its JSON, or, where folded, an int or float as its type.
JsonValue value_json(const c10::IValue& v, const c10::TypePtr& type, bool folded) {
  if (folded && v.isInt()) return JsonValue::string("<int>");
  if (folded && v.isDouble()) return JsonValue::string("<float>");
  return to_json(v, type);
}

}  // namespace

ScalarFold scalar_fold_of(const c10::FunctionSchema& schema) {
  return {scalar_mask(schema.arguments()), scalar_mask(schema.returns())};
}

JsonValue build_arguments(const c10::FunctionSchema& schema, c10::ArrayRef<const c10::IValue> inputs, uint64_t fold) {
  const auto& params = schema.arguments();
  JsonValue args = JsonValue::array();
  JsonValue kwargs = JsonValue::object();
  if (inputs.size() == params.size()) {
    size_t kwarg_only_start = params.size();
    while (kwarg_only_start > 0 && params[kwarg_only_start - 1].kwarg_only()) --kwarg_only_start;
    size_t positional_end = kwarg_only_start;
    while (positional_end > 0 && is_default(params[positional_end - 1], inputs[positional_end - 1])) --positional_end;
    for (size_t i = 0; i < positional_end; ++i)
      args.push_back(value_json(inputs[i], params[i].real_type(), folds(fold, i)));
    for (size_t i = kwarg_only_start; i < params.size(); ++i) {
      if (is_default(params[i], inputs[i])) continue;
      kwargs.set(params[i].name(), value_json(inputs[i], params[i].real_type(), folds(fold, i)));
    }
  } else {
    for (const auto& v : inputs) args.push_back(to_json(v, nullptr));
  }
  return JsonValue::object({{"args", std::move(args)}, {"kwargs", std::move(kwargs)}});
}

JsonValue build_output(const c10::FunctionSchema& schema, c10::ArrayRef<const c10::IValue> outputs, uint64_t fold) {
  const auto& returns = schema.returns();
  if (outputs.size() == 1)
    return value_json(outputs[0], returns.size() == 1 ? returns[0].real_type() : nullptr, folds(fold, 0));
  if (ended_without_outputs(schema, outputs)) return format::raised_output();
  if (outputs.empty()) return JsonValue::null();
  JsonValue output = JsonValue::array();
  for (size_t i = 0; i < outputs.size(); ++i)
    output.push_back(
        value_json(outputs[i], returns.size() == outputs.size() ? returns[i].real_type() : nullptr, folds(fold, i)));
  return output;
}

JsonValue assemble_signature(const std::string& dotted_op, const JsonValue& arguments, JsonValue output,
                             const std::string& stage) {
  JsonValue sig = JsonValue::object();
  sig.set("op", JsonValue::string(dotted_op));
  sig.set("args", *arguments.find("args"));
  sig.set("kwargs", *arguments.find("kwargs"));
  sig.set("output", std::move(output));
  sig.set("stage", JsonValue::string(stage));
  return sig;
}

JsonValue build_signature(const c10::FunctionSchema& schema, c10::ArrayRef<const c10::IValue> inputs,
                          c10::ArrayRef<const c10::IValue> outputs, const std::string& stage) {
  return assemble_signature(dotted_op_name(schema.operator_name()), build_arguments(schema, inputs),
                            build_output(schema, outputs), stage);
}

CanonicalSignature canonical_signature(const c10::FunctionSchema& schema, c10::ArrayRef<const c10::IValue> inputs,
                                       c10::ArrayRef<const c10::IValue> outputs, const std::string& stage,
                                       const ScalarFold& fold) {
  CanonicalSignature out;
  out.json = format::canonical_json(assemble_signature(dotted_op_name(schema.operator_name()),
                                                       build_arguments(schema, inputs, fold.arguments),
                                                       build_output(schema, outputs, fold.returns), stage));
  out.sha256 = format::sha256_hex(out.json);
  return out;
}

}  // namespace lingprobe::capture
