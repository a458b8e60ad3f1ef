// What the C ABI asks of the lower layers on the program's behalf, outside
// the session's life cycle: a signature's hash, the thread's stage stack,
// NVTX ranges. The C ABI reaches capture and format only through here
// (the layer table: C ABI -> api). Each function may throw (std::bad_alloc);
// the C ABI catches.
#pragma once

#include <string>
#include <string_view>

namespace lingprobe::api {

// The canonical SHA-256 (hex) of a JSON object's text; false when the text is
// not one JSON object.
bool hash_signature_json(std::string_view json, std::string& hex);

// The calling thread's stage stack (SPEC section 5).
void push_stage(const char* name);
bool pop_stage();  // false on an empty stack
// One warning line naming the stages still pushed on the calling thread at finalize: a push without its pop (a raise
// between them) put every later call of the thread into that stage. Nothing when empty. (Not at stop: a pause
// inside a stage, or inside an NVTX range the stage map follows, is no mistake.)
void warn_stages_left_pushed_at_finalize();

// NVTX ranges of the calling thread, as the NVTX injection sees them.
void nvtx_range_push(const char* name);
void nvtx_range_pop();

}  // namespace lingprobe::api
