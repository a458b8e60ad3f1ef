// Every exported C function of lingprobe is defined here: the C ABI. Each one
// catches everything; nothing may throw across it.
#include "lingprobe/lingprobe.h"

#include <cstring>
#include <exception>

#include "format/canonical_json.h"
#include "format/json_parse.h"

extern "C" {

LINGPROBE_API const char* lingprobe_status_string(lingprobe_status status) {
  switch (status) {
    case LINGPROBE_OK: return "ok";
    case LINGPROBE_ERROR_INVALID_ARGUMENT: return "invalid argument (NULL pointer, wrong struct size or value out of range)";
    case LINGPROBE_ERROR_INVALID_CONFIG: return "invalid configuration; recording is off (run `lingprobe config` for the options)";
    case LINGPROBE_ERROR_NOT_INITIALIZED: return "lingprobe is not initialized; call lingprobe_init() first";
    case LINGPROBE_ERROR_FINALIZED: return "lingprobe was finalized; the call did nothing";
    case LINGPROBE_ERROR_IO: return "a file or directory could not be created or written (see the log)";
    case LINGPROBE_ERROR_TORCH_MISMATCH: return "this process's libtorch is not the one lingprobe was built against; recording is off";
    case LINGPROBE_ERROR_UNAVAILABLE: return "feature not available in this build or on this machine";
    case LINGPROBE_ERROR_BUFFER_TOO_SMALL: return "output buffer too small";
    case LINGPROBE_ERROR_STAGE_UNDERFLOW: return "stage pop without a matching push on this thread";
    case LINGPROBE_ERROR_PARSE: return "input could not be parsed";
    case LINGPROBE_ERROR_INTERNAL: return "internal error (see the log)";
    case LINGPROBE_STATUS_COUNT: break;
  }
  return "unknown lingprobe status";
}

LINGPROBE_API const char* lingprobe_version(void) { return LINGPROBE_VERSION_STRING; }

LINGPROBE_API lingprobe_status lingprobe_hash_signature(const char* json, size_t len, char* out_hex,
                                                        size_t out_size) {
  if (!json || !out_hex) return LINGPROBE_ERROR_INVALID_ARGUMENT;
  if (out_size < 65) return LINGPROBE_ERROR_BUFFER_TOO_SMALL;
  try {
    auto parsed = lingprobe::format::parse_json(std::string_view(json, len));
    if (!parsed.ok || parsed.value.kind() != lingprobe::format::JsonValue::Kind::Object) return LINGPROBE_ERROR_PARSE;
    const std::string hex = lingprobe::format::canonical_sha256(parsed.value);
    std::memcpy(out_hex, hex.c_str(), 65);
    return LINGPROBE_OK;
  } catch (...) {
    return LINGPROBE_ERROR_INTERNAL;
  }
}

}  // extern "C"
