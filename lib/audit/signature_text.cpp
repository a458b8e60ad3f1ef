#include "audit/signature_text.h"

#include <cmath>
#include <cstdio>
#include <utility>

#include "format/canonical_json.h"

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

}  // namespace

std::string short_signature(const JsonValue& signature) {
  const JsonValue* op = signature.find("op");
  std::string out = (op && op->kind() == JsonValue::Kind::String ? op->as_string() : std::string("?")) + "(";
  const JsonValue* args = signature.find("args");
  bool first = true;
  if (args && args->kind() == JsonValue::Kind::Array)
    for (const auto& a : args->items()) {
      if (!first) out += ", ";
      first = false;
      const JsonValue* shape = a.kind() == JsonValue::Kind::Object ? a.find("shape") : nullptr;
      const bool sized = shape && shape->kind() == JsonValue::Kind::Array;  // null where sizes were unreadable
      out += (sized ? short_dtype(a.find("dtype")) : "") +
             (shape ? format::canonical_json(*shape) : format::canonical_json(a));
    }
  return out + ")";
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

bool is_collective_op(std::string_view op) {
  return op.rfind("c10d.", 0) == 0 || op.rfind("_c10d_functional.", 0) == 0;
}

}  // namespace lingprobe::audit
