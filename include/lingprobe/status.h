/* Status codes returned by every lingprobe C ABI call that can fail. */
#ifndef LINGPROBE_STATUS_H
#define LINGPROBE_STATUS_H

#include "lingprobe/export.h"

LINGPROBE_EXTERN_C_BEGIN

typedef enum lingprobe_status {
  LINGPROBE_OK = 0,
  /* A pointer was NULL, a size field did not match, or a value was out of range. */
  LINGPROBE_ERROR_INVALID_ARGUMENT = 1,
  /* Configuration (LINGPROBE_* variables or options) was invalid; recording stays off. */
  LINGPROBE_ERROR_INVALID_CONFIG = 2,
  /* The call needs lingprobe_init() first. */
  LINGPROBE_ERROR_NOT_INITIALIZED = 3,
  /* lingprobe_finalize() already ran; the call did nothing. */
  LINGPROBE_ERROR_FINALIZED = 4,
  /* A file or directory could not be created or written. */
  LINGPROBE_ERROR_IO = 5,
  /* The process's libtorch is not the one lingprobe was built against. */
  LINGPROBE_ERROR_TORCH_MISMATCH = 6,
  /* The feature was not built in or cannot run here (e.g. CUPTI, NVTX). */
  LINGPROBE_ERROR_UNAVAILABLE = 7,
  /* An output buffer was too small; nothing was written past its end. */
  LINGPROBE_ERROR_BUFFER_TOO_SMALL = 8,
  /* A stage pop without a matching push on this thread. */
  LINGPROBE_ERROR_STAGE_UNDERFLOW = 9,
  /* Input text could not be parsed (e.g. malformed JSON). */
  LINGPROBE_ERROR_PARSE = 10,
  /* An unexpected internal failure; the message is logged. */
  LINGPROBE_ERROR_INTERNAL = 11,
  /* lingprobe_init with options other than the running configuration's (set at load by LD_PRELOAD, or by an
   * earlier init); the first configuration stays. */
  LINGPROBE_ERROR_ALREADY_INITIALIZED = 12,
  LINGPROBE_STATUS_COUNT /* number of codes; not a status */
} lingprobe_status;

/* A static, human-readable description of `status` (never NULL; unknown
 * values give "unknown lingprobe status"). Thread-safe; the caller does not
 * free it. */
LINGPROBE_API const char* lingprobe_status_string(lingprobe_status status);

LINGPROBE_EXTERN_C_END

#endif /* LINGPROBE_STATUS_H */
