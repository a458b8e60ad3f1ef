#include "api/program_calls.h"

#include <cstdint>

#include "api/log.h"
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

void warn_stages_left_pushed_at_finalize() {
  const capture::StageStack& stack = *capture::this_thread_stage_stack();
  if (stack.size == 0) return;
  std::string names;
  for (uint32_t i = stack.size; i-- > 0;)
    names += (names.empty() ? "'" : ", '") + capture::stage_name(stack.ids[i]) + "'";
  log_warn("finalize with stage(s) " + names +
           " still pushed on this thread (innermost first): a push whose pop never came (a raise between them?) "
           "put every later call of the thread into that stage; pair each push with its pop (the shim's `with "
           "lingprobe.stage(...)` pops when its block raises)");
}

void nvtx_range_push(const char* name) { capture::nvtx_range_push(name); }
void nvtx_range_pop() { capture::nvtx_range_pop(); }

}  // namespace lingprobe::api
