/* lingprobe C ABI. All exported functions are declared in include/lingprobe/
 * and defined in capi/. Every call that can fail returns lingprobe_status;
 * none throws, exits or aborts the host process. */
#ifndef LINGPROBE_LINGPROBE_H
#define LINGPROBE_LINGPROBE_H

#include <stddef.h>

#include "lingprobe/export.h"
#include "lingprobe/status.h"
#include "lingprobe/version.h"

LINGPROBE_EXTERN_C_BEGIN

/* The library's version string, e.g. "0.1.0" (static; do not free). */
LINGPROBE_API const char* lingprobe_version(void);

/* Canonical SHA-256 of a signature (SPEC section 3): parses `json` (`len`
 * bytes, a JSON object in any key order and spacing, NaN/Infinity allowed as
 * Python's json reads them), re-writes it as Python's
 * json.dumps(sort_keys=True, separators=(",", ":")) would, and writes the
 * 64 hex digits plus a NUL to `out_hex`, which must hold
 * `out_size` >= 65 bytes. Thread-safe; allocates only temporaries.
 * Returns LINGPROBE_OK, LINGPROBE_ERROR_INVALID_ARGUMENT (NULL pointer),
 * LINGPROBE_ERROR_BUFFER_TOO_SMALL, or LINGPROBE_ERROR_PARSE (not a JSON
 * object). */
LINGPROBE_API lingprobe_status lingprobe_hash_signature(const char* json, size_t len, char* out_hex,
                                                        size_t out_size);

LINGPROBE_EXTERN_C_END

#endif /* LINGPROBE_LINGPROBE_H */
