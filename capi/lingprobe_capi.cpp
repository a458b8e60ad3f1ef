// Every exported C function of lingprobe is defined here: the C ABI. Each one
// catches everything; nothing may throw across it.
#include "lingprobe/lingprobe.h"

#include <cstddef>
#include <cstring>
#include <exception>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "api/config.h"
#include "api/exit_signals.h"
#include "api/log.h"
#include "api/program_calls.h"
#include "api/session.h"

namespace {

thread_local std::string t_last_error;

lingprobe_status fail(lingprobe_status st, const std::string& message) {
  t_last_error = message;
  return st;
}

lingprobe_status done(lingprobe_status st, const std::string& message) {
  if (st != LINGPROBE_OK) t_last_error = message.empty() ? lingprobe_status_string(st) : message;
  return st;
}

extern "C" char** environ;

lingprobe_status copy_path(lingprobe_status (*get)(std::string&), char* buf, size_t size) {
  if (!buf) return fail(LINGPROBE_ERROR_INVALID_ARGUMENT, "buf is NULL");
  try {
    std::string path;
    lingprobe_status st = get(path);
    if (st != LINGPROBE_OK) return fail(st, lingprobe_status_string(st));
    if (path.size() + 1 > size)
      return fail(LINGPROBE_ERROR_BUFFER_TOO_SMALL, "need " + std::to_string(path.size() + 1) + " bytes");
    std::memcpy(buf, path.c_str(), path.size() + 1);
    return LINGPROBE_OK;
  } catch (...) {
    return fail(LINGPROBE_ERROR_INTERNAL, "path query failed");
  }
}

// The configuration of lingprobe_init: the environment first (when asked),
// then the options' fields and settings. Every failure is reported as
// LINGPROBE_ERROR_INVALID_CONFIG, whatever its code.
lingprobe::format::Status configure(lingprobe::api::Config& config, const lingprobe_options* options,
                                    bool warn_unknown) {
  using lingprobe::api::apply_setting;
  using lingprobe::format::Status;
  if (!options || options->use_environment) {
    std::vector<std::string> unknown;
    Status status = lingprobe::api::apply_environment(config, environ, &unknown);
    if (warn_unknown)
      for (const auto& name : unknown)
        lingprobe::api::log_warn(name + " is not a lingprobe option" + lingprobe::api::did_you_mean(name) +
                                 "; ignored (run `lingprobe config` for the list)");
    if (!status.ok() || !options) return status;
  }
  // Fields past the caller's struct_size are absent (older callers).
  auto has = [&](size_t end) { return options->struct_size >= end; };
  if (has(offsetof(lingprobe_options, out_dir) + sizeof(char*)) && options->out_dir)
    if (Status status = apply_setting(config, "OUT", options->out_dir); !status.ok()) return status;
  if (has(offsetof(lingprobe_options, ops) + sizeof(char*)) && options->ops)
    if (Status status = apply_setting(config, "OPS", options->ops); !status.ok()) return status;
  if (!has(offsetof(lingprobe_options, settings_count) + sizeof(size_t)) || !options->settings) return Status();
  for (size_t i = 0; i < options->settings_count; ++i) {
    const char* kv = options->settings[i];
    const char* eq = kv ? std::strchr(kv, '=') : nullptr;
    if (!eq)
      return Status(lingprobe::format::StatusCode::kBadInput,
                    std::string("setting '") + (kv ? kv : "(null)") + "' is not NAME=VALUE");
    if (Status status = apply_setting(config, std::string(kv, eq), eq + 1); !status.ok()) return status;
  }
  return Status();
}

}  // namespace

extern "C" {

LINGPROBE_API const char* lingprobe_status_string(lingprobe_status status) {
  switch (status) {
    case LINGPROBE_OK: return "ok";
    case LINGPROBE_ERROR_INVALID_ARGUMENT:
      return "invalid argument (NULL pointer, wrong struct size or value out of range)";
    case LINGPROBE_ERROR_INVALID_CONFIG:
      return "invalid configuration; recording is off (run `lingprobe config` for the options)";
    case LINGPROBE_ERROR_NOT_INITIALIZED: return "lingprobe is not initialized; call lingprobe_init() first";
    case LINGPROBE_ERROR_FINALIZED: return "lingprobe was finalized; the call did nothing";
    case LINGPROBE_ERROR_IO: return "a file or directory could not be created or written (see the log)";
    case LINGPROBE_ERROR_TORCH_MISMATCH:
      return "this process's libtorch is not the one lingprobe was built against; recording is off";
    case LINGPROBE_ERROR_UNAVAILABLE: return "feature not available in this build or on this machine";
    case LINGPROBE_ERROR_BUFFER_TOO_SMALL: return "output buffer too small";
    case LINGPROBE_ERROR_STAGE_UNDERFLOW: return "stage pop without a matching push on this thread";
    case LINGPROBE_ERROR_PARSE: return "input could not be parsed";
    case LINGPROBE_ERROR_INTERNAL: return "internal error (see the log)";
    case LINGPROBE_ERROR_ALREADY_INITIALIZED:
      return "lingprobe is already initialised with other options; the first configuration stays";
    case LINGPROBE_STATUS_COUNT: break;
  }
  return "unknown lingprobe status";
}

LINGPROBE_API const char* lingprobe_version(void) { return LINGPROBE_VERSION_STRING; }

LINGPROBE_API lingprobe_status lingprobe_hash_signature(const char* json, size_t len, char* out_hex, size_t out_size) {
  if (!json || !out_hex) return LINGPROBE_ERROR_INVALID_ARGUMENT;
  if (out_size < 65) return LINGPROBE_ERROR_BUFFER_TOO_SMALL;
  try {
    std::string hex;
    if (!lingprobe::api::hash_signature_json(std::string_view(json, len), hex)) return LINGPROBE_ERROR_PARSE;
    std::memcpy(out_hex, hex.c_str(), 65);
    return LINGPROBE_OK;
  } catch (...) {
    return LINGPROBE_ERROR_INTERNAL;
  }
}

// The forked child's answer, before any lock is taken (see session_in_forked_child).
#define LINGPROBE_NOT_IN_FORKED_CHILD()                                        \
  if (lingprobe::api::session_in_forked_child())                               \
  return fail(LINGPROBE_ERROR_UNAVAILABLE,                                     \
              "this is a forked child; lingprobe records only in the process " \
              "that initialised it")

LINGPROBE_API lingprobe_status lingprobe_init(const lingprobe_options* options) {
  LINGPROBE_NOT_IN_FORKED_CHILD();
  try {
    if (options && options->struct_size < sizeof(size_t) + sizeof(int))
      return fail(LINGPROBE_ERROR_INVALID_ARGUMENT, "lingprobe_options.struct_size is " +
                                                        std::to_string(options->struct_size) +
                                                        ": set it to sizeof(lingprobe_options)");
    const lingprobe_state state = lingprobe::api::session_state();  // running: session_init compares the options
    if (state == LINGPROBE_STATE_FINALIZED)
      return fail(LINGPROBE_ERROR_FINALIZED,
                  "lingprobe was finalized: finalize() ends the process's only run; record again in a new process "
                  "(stop() and start() pause and resume within the run)");
    lingprobe::api::Config config;
    lingprobe::format::Status status = configure(config, options, state == LINGPROBE_STATE_FRESH);  // warned once
    if (!status.ok()) {
      if (!lingprobe::api::session_init_invalid()) {
        lingprobe::api::log_error(status.message() + "; the running configuration stays");
        return fail(LINGPROBE_ERROR_INVALID_CONFIG, status.message() + "; the running configuration stays");
      }
      lingprobe::api::log_error(status.message() + "; recording is off, the program runs on");
      return fail(LINGPROBE_ERROR_INVALID_CONFIG, status.message());
    }
    std::string err;
    return done(lingprobe::api::session_init(config, err), err);
  } catch (const std::exception& e) {
    return fail(LINGPROBE_ERROR_INTERNAL, e.what());
  } catch (...) {
    return fail(LINGPROBE_ERROR_INTERNAL, "unknown exception in lingprobe_init");
  }
}

LINGPROBE_API lingprobe_status lingprobe_preload_attach(void) {
  lingprobe_options options;
  std::memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.use_environment = 1;
  return lingprobe_init(&options);
}

#define LINGPROBE_GUARDED(call)                                 \
  try {                                                         \
    std::string err;                                            \
    return done(call, err);                                     \
  } catch (const std::exception& e) {                           \
    return fail(LINGPROBE_ERROR_INTERNAL, e.what());            \
  } catch (...) {                                               \
    return fail(LINGPROBE_ERROR_INTERNAL, "unknown exception"); \
  }

LINGPROBE_API lingprobe_status lingprobe_start(void) {
  LINGPROBE_NOT_IN_FORKED_CHILD();
  LINGPROBE_GUARDED(lingprobe::api::session_set_recording(true, err))
}
LINGPROBE_API lingprobe_status lingprobe_stop(void) {
  LINGPROBE_NOT_IN_FORKED_CHILD();
  LINGPROBE_GUARDED(lingprobe::api::session_stop(err))
}
LINGPROBE_API lingprobe_status lingprobe_flush(void) {
  LINGPROBE_NOT_IN_FORKED_CHILD();
  LINGPROBE_GUARDED(lingprobe::api::session_flush(err))
}
LINGPROBE_API lingprobe_status lingprobe_finalize(void) { LINGPROBE_GUARDED(lingprobe::api::session_finalize()); }
LINGPROBE_API lingprobe_status lingprobe_finalize_on_signal(int signal_number) {
  if (signal_number <= 0) return fail(LINGPROBE_ERROR_INVALID_ARGUMENT, "signal_number must be a signal (> 0)");
  LINGPROBE_GUARDED(lingprobe::api::session_finalize(lingprobe::api::signal_name(signal_number).c_str()))
}
LINGPROBE_API lingprobe_status lingprobe_set_rank(int64_t rank, int64_t local_rank, int64_t world_size) {
  LINGPROBE_NOT_IN_FORKED_CHILD();
  LINGPROBE_GUARDED(lingprobe::api::session_set_rank(rank, local_rank, world_size, err))
}

LINGPROBE_API lingprobe_state lingprobe_get_state(void) { return lingprobe::api::session_state(); }

LINGPROBE_API lingprobe_status lingprobe_stage_push(const char* name) {
  if (!name || !*name) return fail(LINGPROBE_ERROR_INVALID_ARGUMENT, "stage name must be a non-empty string");
  if (lingprobe::api::session_in_forked_child()) return LINGPROBE_OK;  // stages still nest in the program's code
  try {
    lingprobe::api::push_stage(name);
    return LINGPROBE_OK;
  } catch (...) {
    return fail(LINGPROBE_ERROR_INTERNAL, "stage push failed");
  }
}

LINGPROBE_API lingprobe_status lingprobe_stage_pop(void) {
  if (lingprobe::api::session_in_forked_child()) return LINGPROBE_OK;
  return lingprobe::api::pop_stage() ? LINGPROBE_OK
                                     : fail(LINGPROBE_ERROR_STAGE_UNDERFLOW, "stage pop on an empty stack");
}

LINGPROBE_API lingprobe_status lingprobe_get_stats(lingprobe_stats* out) {
  constexpr size_t kFirstVersion = offsetof(lingprobe_stats, world_size) + sizeof(int64_t);
  try {
    if (!out || out->struct_size < kFirstVersion)
      return fail(LINGPROBE_ERROR_INVALID_ARGUMENT,
                  "lingprobe_stats.struct_size is " + std::to_string(out ? out->struct_size : 0) +
                      ": set it to sizeof(lingprobe_stats) (at least " + std::to_string(kFirstVersion) +
                      ", the fields through world_size)");
    lingprobe_stats full;
    std::memset(&full, 0, sizeof full);
    lingprobe::api::session_stats(full);
    const size_t n = out->struct_size < sizeof full ? out->struct_size : sizeof full;
    full.struct_size = out->struct_size;
    std::memcpy(out, &full, n);
    return LINGPROBE_OK;
  } catch (...) {
    return fail(LINGPROBE_ERROR_INTERNAL, "stats failed");
  }
}

LINGPROBE_API lingprobe_status lingprobe_get_metadata_path(char* buf, size_t size) {
  return copy_path(lingprobe::api::session_metadata_path, buf, size);
}

LINGPROBE_API lingprobe_status lingprobe_get_run_dir(char* buf, size_t size) {
  return copy_path(lingprobe::api::session_run_dir, buf, size);
}

LINGPROBE_API lingprobe_status lingprobe_hold_counters(int hold) {
  LINGPROBE_NOT_IN_FORKED_CHILD();
  try {
    return lingprobe::api::session_hold_counters(hold != 0)
               ? LINGPROBE_OK
               : fail(LINGPROBE_ERROR_UNAVAILABLE,
                      "a counter window on another thread stayed open for 30 s; the hold "
                      "is taken, later windows wait for its release");
  } catch (...) {
    return fail(LINGPROBE_ERROR_INTERNAL, "hold_counters failed");
  }
}

LINGPROBE_API void lingprobe_nvtx_range_push(const char* name) {
  if (lingprobe::api::session_in_forked_child()) return;
  try {
    lingprobe::api::nvtx_range_push(name);
  } catch (...) {
  }
}

LINGPROBE_API void lingprobe_nvtx_range_pop(void) {
  if (lingprobe::api::session_in_forked_child()) return;
  try {
    lingprobe::api::nvtx_range_pop();
  } catch (...) {
  }
}

LINGPROBE_API const char* lingprobe_last_error(void) { return t_last_error.c_str(); }

}  // extern "C"
