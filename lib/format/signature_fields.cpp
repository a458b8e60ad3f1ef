#include "format/signature_fields.h"

#include <vector>

#include "format/canonical_json.h"
#include "format/snapshot_file.h"
#include "format/tensor_layout.h"

namespace lingprobe::format {

std::string input_key_sha256(const JsonValue& signature) {
  JsonValue input = JsonValue::object();
  for (const auto& [name, value] : signature.members())
    if (name != "output") input.set(name, value);
  return canonical_sha256(input);
}

namespace {

std::vector<int64_t> ints(const JsonValue* v) {
  std::vector<int64_t> out;
  if (v && v->kind() == JsonValue::Kind::Array)
    for (const auto& i : v->items()) out.push_back(i.kind() == JsonValue::Kind::Int ? i.as_int() : -1);
  return out;
}

void add_tensor_bytes(const JsonValue& v, uint64_t& bytes) {
  if (v.kind() == JsonValue::Kind::Array) {
    for (const auto& i : v.items()) add_tensor_bytes(i, bytes);
    return;
  }
  if (v.kind() != JsonValue::Kind::Object) return;
  const JsonValue* dtype = v.find("dtype");
  const JsonValue* shape = v.find("shape");
  if (dtype && shape && dtype->kind() == JsonValue::Kind::String) {
    const std::vector<int64_t> sizes = ints(shape), strides = ints(v.find("stride"));
    const int64_t elements =
        strides.size() == sizes.size() && !non_overlapping(sizes, strides) ? span_of(sizes, strides) : numel_of(sizes);
    if (elements > 0)
      bytes += static_cast<uint64_t>(elements) * static_cast<uint64_t>(dtype_element_size(dtype->as_string()));
    return;
  }
  for (const auto& [name, member] : v.members()) add_tensor_bytes(member, bytes);
}

}  // namespace

uint64_t signature_tensor_bytes(const JsonValue& signature) {
  uint64_t bytes = 0;
  for (const char* part : {"args", "kwargs", "output"})
    if (const JsonValue* v = signature.find(part)) add_tensor_bytes(*v, bytes);
  return bytes;
}

JsonValue raised_output() { return JsonValue::object({{"raised", JsonValue::boolean(true)}}); }

bool call_raised(const JsonValue& signature) {
  const JsonValue* output = signature.find("output");
  if (!output || output->kind() != JsonValue::Kind::Object) return false;
  const JsonValue* raised = output->find("raised");
  return raised && raised->kind() == JsonValue::Kind::Bool && raised->as_bool();
}

}  // namespace lingprobe::format
