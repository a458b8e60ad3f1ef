#include "audit/signature_compare.h"

#include <algorithm>
#include <set>

#include "format/canonical_json.h"

namespace lingprobe::audit {

using format::JsonValue;
using Kind = JsonValue::Kind;

bool is_tensor(const JsonValue& v) { return v.kind() == Kind::Object && v.find("shape") && v.find("dtype"); }

namespace {

std::string field_text(const JsonValue* v) { return v ? format::canonical_json(*v) : "null"; }

// The positions of an op's weight and bias among its positional arguments
// (their shapes are part of the pairing key: a layer is the same layer at any
// input size, a different one with other weights). Ops whose operands may be
// activations or weights alike (mm, bmm, matmul, baddbmm) have none.
std::set<size_t> weight_positions(const std::string& op) {
  auto starts = [&op](const char* p) { return op.rfind(p, 0) == 0; };
  for (const char* conv : {"aten.linear.", "aten.conv1d.", "aten.conv2d.", "aten.conv3d.", "aten.conv_transpose1d.",
                           "aten.conv_transpose2d.", "aten.conv_transpose3d.", "aten.convolution.",
                           "aten._convolution.", "aten.cudnn_convolution.", "aten.mkldnn_convolution."})
    if (starts(conv)) return {1, 2};         // (input, weight, bias, ...)
  if (starts("aten.addmm.")) return {0, 2};  // (bias, input, weight)
  if (starts("aten.layer_norm.") || starts("aten.native_layer_norm.") || starts("aten.group_norm.") ||
      starts("aten.rms_norm.") || starts("aten._fused_rms_norm."))
    return {2, 3};  // (input, normalized_shape or groups, weight, bias)
  if (starts("aten.native_group_norm.") || starts("aten.batch_norm.") || starts("aten.native_batch_norm.") ||
      starts("aten._native_batch_norm_legit"))
    return {1, 2};  // (input, weight, bias, ...)
  if (starts("aten.embedding.")) return {0};
  return {};
}

// A value's shape-free form: tensors by dtype and rank (weights by their
// shape), int lists by their length, everything else exactly.
void shape_free(const JsonValue& v, bool weight, std::string& out) {
  if (is_tensor(v)) {
    out += "T(" + field_text(v.find("dtype")) + ",";
    out += weight ? field_text(v.find("shape")) : std::to_string(v.find("shape")->items().size());
    out += ")";
  } else if (v.kind() == Kind::Array) {
    const bool ints = !v.items().empty() && std::all_of(v.items().begin(), v.items().end(), [](const JsonValue& x) {
      return x.kind() == Kind::Int || x.kind() == Kind::BigInt;
    });
    if (ints) {
      out += "L" + std::to_string(v.items().size());
      return;
    }
    out += "[";
    for (const auto& x : v.items()) shape_free(x, weight, out), out += ",";
    out += "]";
  } else if (v.kind() == Kind::Object) {
    out += "{";
    for (const auto& [k, x] : v.members()) out += k + ":", shape_free(x, false, out), out += ",";
    out += "}";
  } else {
    out += format::canonical_json(v);
  }
}

// Every tensor's shape in a value, one after another.
void shapes(const JsonValue& v, std::vector<int64_t>& out) {
  if (is_tensor(v)) {
    for (const auto& d : v.find("shape")->items()) out.push_back(d.kind() == Kind::Int ? d.as_int() : -1);
    out.push_back(-2);  // a separator: [2,3],[4] is not [2],[3,4]
  } else if (v.kind() == Kind::Array) {
    for (const auto& x : v.items()) shapes(x, out);
  } else if (v.kind() == Kind::Object) {
    for (const auto& [k, x] : v.members()) shapes(x, out);
  }
}

}  // namespace

std::string pairing_key(const JsonValue& signature, const std::string& stage, const std::string& op) {
  std::string key = stage + "|" + op + "|";
  const std::set<size_t> weights = weight_positions(op);
  if (const JsonValue* args = signature.find("args"); args && args->kind() == Kind::Array)
    for (size_t i = 0; i < args->items().size(); ++i)
      shape_free(args->items()[i], weights.count(i) > 0, key), key += ",";
  key += "|";
  if (const JsonValue* kwargs = signature.find("kwargs")) shape_free(*kwargs, false, key);
  key += "|";
  if (const JsonValue* out = signature.find("output")) shape_free(*out, false, key);
  return key;
}

std::vector<int64_t> signature_shapes(const JsonValue& signature) {
  std::vector<int64_t> out;
  for (const char* k : {"args", "kwargs", "output"})
    if (const JsonValue* v = signature.find(k)) shapes(*v, out);
  return out;
}

// The signature with one member of every tensor left out.
JsonValue without_tensor_member(const JsonValue& v, const char* member) {
  if (v.kind() == Kind::Array) {
    JsonValue a = JsonValue::array();
    for (const auto& x : v.items()) a.push_back(without_tensor_member(x, member));
    return a;
  }
  if (v.kind() != Kind::Object) return v;
  const bool tensor = is_tensor(v);
  JsonValue o = JsonValue::object();
  for (const auto& [k, x] : v.members())
    if (!(tensor && k == member)) o.set(k, without_tensor_member(x, member));
  return o;
}

JsonValue without_strides(const JsonValue& v) { return without_tensor_member(v, "stride"); }

std::string retyping_key(const JsonValue& signature, const std::string& stage, const std::string& op) {
  return stage + "|" + op + "|" + format::canonical_json(without_tensor_member(signature, "dtype"));
}

// Where two signatures differ: "args[0].shape: [1,4680,5120] -> [1,2640,5120]".
void differences(const JsonValue& a, const JsonValue& b, const std::string& path, std::vector<std::string>& out) {
  if (out.size() >= 12 || a == b) return;
  const bool leaf_array = [&] {
    if (a.kind() != Kind::Array || b.kind() != Kind::Array) return false;
    for (const auto* v : {&a, &b})
      for (const auto& x : v->items())
        if (x.kind() == Kind::Array || x.kind() == Kind::Object) return false;
    return true;
  }();
  if (a.kind() == Kind::Object && b.kind() == Kind::Object) {
    std::set<std::string> keys;
    for (const auto& [k, v] : a.members()) keys.insert(k);
    for (const auto& [k, v] : b.members()) keys.insert(k);
    for (const auto& k : keys) {
      const JsonValue *x = a.find(k), *y = b.find(k);
      const std::string p = path.empty() ? k : path + "." + k;
      if (x && y)
        differences(*x, *y, p, out);
      else
        out.push_back(p + ": " + (x ? format::canonical_json(*x) : "absent") + " -> " +
                      (y ? format::canonical_json(*y) : "absent"));
    }
  } else if (a.kind() == Kind::Array && b.kind() == Kind::Array && !leaf_array &&
             a.items().size() == b.items().size()) {
    for (size_t i = 0; i < a.items().size(); ++i)
      differences(a.items()[i], b.items()[i], path + "[" + std::to_string(i) + "]", out);
  } else {
    out.push_back(path + ": " + format::canonical_json(a) + " -> " + format::canonical_json(b));
  }
}

}  // namespace lingprobe::audit
