#include "audit/signature_text.h"

#include <cmath>
#include <cstdio>
#include <utility>

#include "format/canonical_json.h"
#include "format/signature_fields.h"

namespace lingprobe::audit {

using format::JsonValue;

namespace {

// "torch.bfloat16" -> "bf16", "torch.float32" -> "f32", "torch.int64" -> "i64", "torch.uint8" -> "u8".
std::string short_dtype(const JsonValue* dtype) {
  if (!dtype || dtype->kind() != JsonValue::Kind::String) return "";
  std::string name = dtype->as_string();
  if (name.rfind("torch.", 0) == 0) name.erase(0, 6);
  for (const auto& [word, abbreviation] : {std::pair<const char*, const char*>{"bfloat", "bf"},
                                           {"float", "f"},
                                           {"complex", "c"},
                                           {"uint", "u"},
                                           {"int", "i"}})
    if (name.rfind(word, 0) == 0) return abbreviation + name.substr(std::string(word).size());
  return name;
}

// A tensor as dtype and shape (`bf16[2,3]`; the shape alone where sizes were unreadable: null), a list of values
// element by element, anything else as its canonical JSON.
std::string value_text(const JsonValue& v) {
  if (v.kind() == JsonValue::Kind::Object && v.find("dtype")) {
    const JsonValue* shape = v.find("shape");
    const bool sized = shape && shape->kind() == JsonValue::Kind::Array;
    return (sized ? short_dtype(v.find("dtype")) : "") + (shape ? format::canonical_json(*shape) : "null");
  }
  if (v.kind() != JsonValue::Kind::Array) return format::canonical_json(v);
  std::string out = "[";
  for (size_t i = 0; i < v.items().size(); ++i) out += (i ? "," : "") + value_text(v.items()[i]);
  return out + "]";
}

}  // namespace

std::string short_signature(const JsonValue& signature) {
  const JsonValue* op = signature.find("op");
  std::string out = (op && op->kind() == JsonValue::Kind::String ? op->as_string() : std::string("?")) + "(";
  const JsonValue* args = signature.find("args");
  bool first = true;
  if (args && args->kind() == JsonValue::Kind::Array)
    for (const auto& a : args->items()) {
      out += (first ? "" : ", ") + value_text(a);
      first = false;
    }
  if (const JsonValue* kwargs = signature.find("kwargs"); kwargs && kwargs->kind() == JsonValue::Kind::Object)
    for (const auto& [name, value] : kwargs->members()) {
      out += (first ? "" : ", ") + name + "=" + value_text(value);
      first = false;
    }
  out += ")";
  if (format::call_raised(signature)) return out + " -> raised";
  const JsonValue* output = signature.find("output");
  return output && !output->is_null() ? out + " -> " + value_text(*output) : out;
}

std::string human_count(long double x) {
  const char* units[] = {"", "K", "M", "G", "T", "P", "E"};
  int u = 0;
  const bool negative = x < 0;
  x = std::fabs(x);
  while (x >= 1000 && u < 6) x /= 1000, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%s%.2f%s" : "%s%.0f%s", negative ? "-" : "", static_cast<double>(x), units[u]);
  return buf;
}

std::string short_decimal(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, x >= 100 ? "%.0f" : x >= 1 ? "%.1f" : "%.3f", x);
  return buf;
}

bool is_collective_op(std::string_view op) {
  return op.rfind("c10d.", 0) == 0 || op.rfind("_c10d_functional.", 0) == 0;
}

}  // namespace lingprobe::audit
