/* Tier 2: the C ABI as a C program sees it. Includes every public header
 * (compiled as C99 with -pedantic -Werror) and checks every status code has
 * its own string. */
#include "lingprobe/export.h"
#include "lingprobe/lingprobe.h"
#include "lingprobe/status.h"
#include "lingprobe/version.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;
#define EXPECT(cond)                                                      \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                         \
    }                                                                     \
  } while (0)

int main(void) {
  int s, t;
  const char* unknown = lingprobe_status_string((lingprobe_status)LINGPROBE_STATUS_COUNT);
  char hex[65];
  const char sig[] = "{\"b\": 1, \"a\": [1.0, NaN]}";

  for (s = 0; s < LINGPROBE_STATUS_COUNT; ++s) {
    const char* text = lingprobe_status_string((lingprobe_status)s);
    EXPECT(text != NULL && text[0] != '\0');
    EXPECT(strcmp(text, unknown) != 0);
    for (t = 0; t < s; ++t) EXPECT(strcmp(text, lingprobe_status_string((lingprobe_status)t)) != 0);
  }
  EXPECT(strcmp(lingprobe_status_string((lingprobe_status)-1), unknown) == 0);
  EXPECT(strcmp(lingprobe_version(), LINGPROBE_VERSION_STRING) == 0);

  EXPECT(lingprobe_hash_signature(sig, strlen(sig), hex, sizeof hex) == LINGPROBE_OK);
  /* sha256 of {"a":[1.0,NaN],"b":1}, as Python computes it */
  EXPECT(strcmp(hex, "3147bb0a1ae19be2c362642358d9bf21e62d3319bbb05144dbff90b79b344083") == 0);
  EXPECT(lingprobe_hash_signature(sig, strlen(sig), hex, 64) == LINGPROBE_ERROR_BUFFER_TOO_SMALL);
  EXPECT(lingprobe_hash_signature(NULL, 0, hex, sizeof hex) == LINGPROBE_ERROR_INVALID_ARGUMENT);
  EXPECT(lingprobe_hash_signature("[1]", 3, hex, sizeof hex) == LINGPROBE_ERROR_PARSE);
  EXPECT(lingprobe_hash_signature("{\"a\":", 5, hex, sizeof hex) == LINGPROBE_ERROR_PARSE);

  /* Life cycle, as a C program sees it. */
  {
    lingprobe_stats st;
    lingprobe_options o;
    const char* settings[] = {"nested=0", "flush_interval_ms=50"};
    const char* bad[] = {"overflow=sometimes"};
    char path[4096];
    EXPECT(lingprobe_get_state() == LINGPROBE_STATE_FRESH);
    EXPECT(lingprobe_start() == LINGPROBE_ERROR_NOT_INITIALIZED);
    EXPECT(strlen(lingprobe_last_error()) > 0);
    EXPECT(lingprobe_finalize() == LINGPROBE_ERROR_NOT_INITIALIZED);
    EXPECT(lingprobe_stage_pop() == LINGPROBE_ERROR_STAGE_UNDERFLOW);
    EXPECT(lingprobe_stage_push(NULL) == LINGPROBE_ERROR_INVALID_ARGUMENT);
    EXPECT(lingprobe_stage_push("dit") == LINGPROBE_OK);
    EXPECT(lingprobe_stage_pop() == LINGPROBE_OK);
    memset(&st, 0, sizeof st);
    EXPECT(lingprobe_get_stats(&st) == LINGPROBE_ERROR_INVALID_ARGUMENT); /* struct_size unset */
    st.struct_size = 16; /* below the first version: what was wrong, and the smallest size taken */
    EXPECT(lingprobe_get_stats(&st) == LINGPROBE_ERROR_INVALID_ARGUMENT);
    EXPECT(strstr(lingprobe_last_error(), "struct_size is 16: set it to sizeof(lingprobe_stats) (at least") != NULL);
    st.struct_size = sizeof st;
    EXPECT(lingprobe_get_stats(&st) == LINGPROBE_OK && st.state == LINGPROBE_STATE_FRESH);

    memset(&o, 0, sizeof o);
    EXPECT(lingprobe_init(&o) == LINGPROBE_ERROR_INVALID_ARGUMENT); /* struct_size unset */
    o.struct_size = sizeof o;
    o.out_dir = "capi-test-out";
    o.settings = bad;
    o.settings_count = 1;
    EXPECT(lingprobe_init(&o) == LINGPROBE_ERROR_INVALID_CONFIG);
    EXPECT(strstr(lingprobe_last_error(), "LINGPROBE_OVERFLOW") != NULL);
    EXPECT(lingprobe_start() == LINGPROBE_ERROR_INVALID_CONFIG);
    /* The program fixes its option and tries again: initialised (a retry used to say ok and record nothing). */
    o.settings = settings;
    o.settings_count = 2;
    EXPECT(lingprobe_init(&o) == LINGPROBE_OK);
    EXPECT(lingprobe_start() == LINGPROBE_OK);
    EXPECT(lingprobe_init(&o) == LINGPROBE_OK); /* the same configuration again: idempotent */
    o.out_dir = "capi-test-elsewhere";          /* another: refused, naming what differs; the first stays */
    EXPECT(lingprobe_init(&o) == LINGPROBE_ERROR_ALREADY_INITIALIZED);
    EXPECT(strstr(lingprobe_last_error(), "with other options (LINGPROBE_OUT)") != NULL);
    o.settings = bad;
    o.settings_count = 1;
    EXPECT(lingprobe_init(&o) == LINGPROBE_ERROR_INVALID_CONFIG);
    EXPECT(strstr(lingprobe_last_error(), "the running configuration stays") != NULL);
    EXPECT(lingprobe_flush() == LINGPROBE_OK);                                   /* still recording */
    EXPECT(lingprobe_finalize_on_signal(0) == LINGPROBE_ERROR_INVALID_ARGUMENT); /* nothing done */
    EXPECT(lingprobe_get_state() == LINGPROBE_STATE_RUNNING);
    EXPECT(lingprobe_finalize_on_signal(SIGTERM) == LINGPROBE_OK); /* a server's own handler, ending */
    EXPECT(lingprobe_finalize() == LINGPROBE_OK);                  /* idempotent: the first end stays */
    EXPECT(lingprobe_get_state() == LINGPROBE_STATE_FINALIZED);
    EXPECT(lingprobe_start() == LINGPROBE_ERROR_FINALIZED);
    EXPECT(lingprobe_init(&o) == LINGPROBE_ERROR_FINALIZED);
    EXPECT(lingprobe_get_metadata_path(path, sizeof path) == LINGPROBE_OK);
    EXPECT(lingprobe_get_run_dir(path, sizeof path) == LINGPROBE_OK && strstr(path, "capi-test-out/") == path);
    EXPECT(lingprobe_get_run_dir(NULL, 0) == LINGPROBE_ERROR_INVALID_ARGUMENT);
    EXPECT(lingprobe_hold_counters(1) == LINGPROBE_OK); /* any state: no window is open */
    EXPECT(lingprobe_hold_counters(1) == LINGPROBE_OK); /* holds nest */
    EXPECT(lingprobe_hold_counters(0) == LINGPROBE_OK && lingprobe_hold_counters(0) == LINGPROBE_OK);
    EXPECT(lingprobe_hold_counters(0) == LINGPROBE_OK); /* one release too many changes nothing */
  }

  if (failures) {
    fprintf(stderr, "%d C ABI check(s) failed\n", failures);
    return 1;
  }
  printf("C ABI: all checks passed\n");
  return 0;
}
