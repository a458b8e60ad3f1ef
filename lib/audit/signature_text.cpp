#include "audit/signature_text.h"

#include "format/canonical_json.h"

namespace lingprobe::audit {

using format::JsonValue;

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
      out += shape ? format::canonical_json(*shape) : format::canonical_json(a);
    }
  return out + ")";
}

}  // namespace lingprobe::audit
