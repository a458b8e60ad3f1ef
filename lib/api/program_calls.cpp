#include "api/program_calls.h"

#include "capture/nvtx_stages.h"
#include "capture/stages.h"
#include "format/canonical_json.h"
#include "format/json_parse.h"

namespace lingprobe::api {

bool hash_signature_json(std::string_view json, std::string& hex) {
  auto parsed = format::parse_json(json);
  if (!parsed.status.ok() || parsed.value.kind() != format::JsonValue::Kind::Object) return false;
  hex = format::canonical_sha256(parsed.value);
  return true;
}

void push_stage(const char* name) { capture::push_stage(capture::intern_stage(name)); }
bool pop_stage() { return capture::pop_stage(); }
void nvtx_range_push(const char* name) { capture::nvtx_range_push(name); }
void nvtx_range_pop() { capture::nvtx_range_pop(); }

}  // namespace lingprobe::api
