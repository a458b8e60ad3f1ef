/* lingprobe C ABI. All exported functions are declared in include/lingprobe/
 * and defined in capi/. Every call that can fail returns lingprobe_status;
 * none throws, exits or aborts the host process. */
#ifndef LINGPROBE_LINGPROBE_H
#define LINGPROBE_LINGPROBE_H

#include <stddef.h>
#include <stdint.h>

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
LINGPROBE_API lingprobe_status lingprobe_hash_signature(const char* json, size_t len, char* out_hex, size_t out_size);

/* ---- life cycle ----------------------------------------------------------
 * fresh --init--> running --finalize--> finalized. init is idempotent (a
 * second call with the same configuration returns LINGPROBE_OK and changes
 * nothing; with another, LINGPROBE_ERROR_ALREADY_INITIALIZED); an init that
 * failed leaves recording off, and the next init tries again; after finalize,
 * init, start, stop, flush and set_rank do nothing and return
 * LINGPROBE_ERROR_FINALIZED, a second finalize returns LINGPROBE_OK, and the
 * stage stack, stats, run directory and state work as in every state (their
 * own comments say so). finalize runs at exit by
 * itself (atexit). The writer thread and the files start on first use. A
 * child forked from a process that had initialised (running or finalized)
 * is LINGPROBE_STATE_FORKED_CHILD: it records nothing, its stats are 0. */

typedef enum lingprobe_state {
  LINGPROBE_STATE_FRESH = 0,
  LINGPROBE_STATE_RUNNING = 1,
  LINGPROBE_STATE_FINALIZED = 2,
  LINGPROBE_STATE_FORKED_CHILD = 3 /* a child forked from an initialised process: records nothing, its stats are 0 */
} lingprobe_state;

/* Options for lingprobe_init. Zero-initialise, set struct_size, then set
 * what you need; NULL/0 fields keep the configuration's value. */
typedef struct lingprobe_options {
  size_t struct_size;          /* sizeof(lingprobe_options): required */
  int use_environment;         /* nonzero: apply LINGPROBE_* variables first */
  const char* out_dir;         /* output root (LINGPROBE_OUT): the run directory is out_dir/{run_id} */
  const char* ops;             /* op selection (LINGPROBE_OPS) */
  const char* const* settings; /* further "NAME=VALUE" strings, NAME as `lingprobe config` lists it */
  size_t settings_count;
} lingprobe_options;

/* Grows at its end only; a caller's smaller struct_size gets the fields that fit. */
typedef struct lingprobe_stats {
  size_t struct_size;       /* set by the caller to sizeof(lingprobe_stats) (at least up to world_size) */
  uint64_t calls_seen;      /* op calls observed while recording (top-level unless nested) */
  uint64_t calls_recorded;  /* of those, selected and counted */
  uint64_t signatures;      /* distinct signatures */
  uint64_t records_written; /* JSONL lines written */
  uint64_t dropped;         /* everything dropped, all reasons (details in the counts records) */
  int32_t recording;        /* 1 while recording */
  int32_t state;            /* lingprobe_state */
  int64_t rank;
  int64_t world_size;
  uint64_t snapshots_written; /* snapshot files written (LINGPROBE_SNAPSHOTS) */
  uint64_t snapshot_bytes;    /* their bytes on disk */
  uint64_t nested_seen;       /* nested op calls that reached lingprobe's callback (each boxed by the dispatcher) */
  uint64_t
      nested_suppressed; /* top-level calls below which RecordFunction was switched off (LINGPROBE_SUPPRESS_NESTED) */
} lingprobe_stats;

/* Initialises lingprobe and installs the dispatcher hook; records at once
 * unless the configuration says enable=0. `options` may be NULL (environment
 * only). Any thread; the library is usable from any thread afterwards.
 * Returns LINGPROBE_OK (also when already initialised with the same
 * configuration), LINGPROBE_ERROR_ALREADY_INITIALIZED (initialised with other
 * options: by LD_PRELOAD at load, or an earlier init; lingprobe_last_error
 * names the options that differ, and the first configuration stays),
 * LINGPROBE_ERROR_INVALID_ARGUMENT (bad struct_size),
 * LINGPROBE_ERROR_INVALID_CONFIG (an invalid value: one error line is logged,
 * recording stays off, the host runs on, and a later init with a valid
 * configuration initialises; while a valid one runs, it stays), LINGPROBE_ERROR_FINALIZED,
 * LINGPROBE_ERROR_UNAVAILABLE in a process forked from an initialised one.
 * In such a child every entry point returns at once and takes no lock (a
 * thread of the parent may have held any at the fork): start, stop, flush,
 * set_rank and hold_counters return UNAVAILABLE; finalize, stage push/pop and
 * the NVTX forwards do nothing and return LINGPROBE_OK; stats give the state. */
LINGPROBE_API lingprobe_status lingprobe_init(const lingprobe_options* options);

/* Starts / stops recording (a window of a long-running server). Stopping
 * disables the hook, so the dispatcher stops boxing arguments, then writes
 * what the window recorded, as lingprobe_flush: the metadata file holds the
 * window's call records and counts when stop returns (it waits for one write
 * of the writer thread, not fsync; snapshots still being written, and calls
 * other threads are inside, land after).
 * Any thread. Returns LINGPROBE_OK, LINGPROBE_ERROR_NOT_INITIALIZED,
 * LINGPROBE_ERROR_INVALID_CONFIG (init failed), LINGPROBE_ERROR_FINALIZED,
 * LINGPROBE_ERROR_UNAVAILABLE (launcher, forked child). */
LINGPROBE_API lingprobe_status lingprobe_start(void);
LINGPROBE_API lingprobe_status lingprobe_stop(void);

/* Writes everything buffered so far and a cumulative counts record; returns
 * when it is on disk (not fsynced). Any thread. Same return codes as start. */
LINGPROBE_API lingprobe_status lingprobe_flush(void);

/* Stops recording, drains, writes the final counts record, fsyncs and
 * closes. Idempotent; runs at exit by itself. Any thread; do not call it
 * from inside an operator. Returns LINGPROBE_OK or
 * LINGPROBE_ERROR_NOT_INITIALIZED. */
LINGPROBE_API lingprobe_status lingprobe_finalize(void);

/* lingprobe_finalize for a process ending because of a signal it handles
 * itself (Python's KeyboardInterrupt, a server's own SIGTERM handler; the
 * default dispositions of SIGTERM, SIGHUP and SIGINT are lingprobe's, which
 * does this by itself): the final counts record names the signal
 * ("ended_by": "SIGTERM"), and the audit reports the run as interrupted.
 * Not async-signal-safe: call it from the handler's deferred work, not the
 * handler. Any thread. Returns as lingprobe_finalize, or
 * LINGPROBE_ERROR_INVALID_ARGUMENT (signal_number <= 0, nothing done). */
LINGPROBE_API lingprobe_status lingprobe_finalize_on_signal(int signal_number);

LINGPROBE_API lingprobe_state lingprobe_get_state(void);

/* The calling thread's stage stack: calls made between push and pop carry
 * `name` as their stage (copied; the caller keeps ownership). Works before
 * init too. Returns LINGPROBE_OK, LINGPROBE_ERROR_INVALID_ARGUMENT (NULL or
 * empty name), LINGPROBE_ERROR_STAGE_UNDERFLOW (pop of an empty stack). */
LINGPROBE_API lingprobe_status lingprobe_stage_push(const char* name);
LINGPROBE_API lingprobe_status lingprobe_stage_pop(void);

/* Assigns this process's rank (-1 keeps a value; a rank given makes the role
 * "rank", e.g. an mp.spawn child once init_process_group ran: the Python shim
 * calls this). Only until the metadata file is created (the writer's first
 * flush with data, LINGPROBE_FLUSH_INTERVAL_MS after the first recorded call),
 * since the rank names the file; afterwards returns
 * LINGPROBE_ERROR_INVALID_ARGUMENT and changes nothing. Any thread.
 * Also NOT_INITIALIZED, FINALIZED, INVALID_CONFIG, UNAVAILABLE (launcher,
 * forked child, or liblingprobe.so preloaded itself). */
LINGPROBE_API lingprobe_status lingprobe_set_rank(int64_t rank, int64_t local_rank, int64_t world_size);

/* Fills `out` up to its struct_size (set by the caller; at least the fields
 * through world_size). Any thread. Returns LINGPROBE_OK or
 * LINGPROBE_ERROR_INVALID_ARGUMENT. Works in every state. */
LINGPROBE_API lingprobe_status lingprobe_get_stats(lingprobe_stats* out);

/* The metadata file this process writes (or will write), NUL-terminated,
 * into `buf`. Returns LINGPROBE_OK, LINGPROBE_ERROR_NOT_INITIALIZED,
 * LINGPROBE_ERROR_BUFFER_TOO_SMALL, LINGPROBE_ERROR_INVALID_ARGUMENT. */
LINGPROBE_API lingprobe_status lingprobe_get_metadata_path(char* buf, size_t size);

/* This launch's run directory, OUT/{run_id} (SPEC section 4's layout lives
 * there; OUT/latest points at the newest), NUL-terminated, into `buf`. Known
 * from init on, created when something is first written. Any thread.
 * Returns LINGPROBE_OK, LINGPROBE_ERROR_NOT_INITIALIZED,
 * LINGPROBE_ERROR_BUFFER_TOO_SMALL, LINGPROBE_ERROR_INVALID_ARGUMENT. */
LINGPROBE_API lingprobe_status lingprobe_get_run_dir(char* buf, size_t size);

/* The message of the calling thread's last failed call ("" if none). The
 * pointer stays valid until the thread's next lingprobe call. */
LINGPROBE_API const char* lingprobe_last_error(void);

/* NVTX range push/pop as stage markers (LINGPROBE_NVTX_MAP maps names to
 * stages). Called by the preload stub's NVTX injection; any other injection
 * layer may call them too. `name` may be NULL (an unmapped range). Calling
 * thread only; never fails. */
LINGPROBE_API void lingprobe_nvtx_range_push(const char* name);
LINGPROBE_API void lingprobe_nvtx_range_pop(void);

/* Holds counter windows (LINGPROBE_PROFILE) off while another CUPTI client
 * starts or runs: while held, sampled calls are not profiled (counted as
 * `profiler_active`), so CUPTI's one callback subscriber, which a window takes
 * for its duration, is free when that client initialises. The Python shim
 * calls it around torch.profiler sessions; C++ code that starts Kineto or
 * another CUPTI tool itself should too. `hold` nonzero takes a hold and waits
 * up to 30 s for a window open on another thread to close; zero releases one.
 * Holds are counts for the whole process, not per thread: each hold taken
 * needs one release (a release with none taken does nothing). Never call it
 * from inside an op's callbacks. Any thread, any state (a no-op without
 * profiling).
 * Returns LINGPROBE_OK, or LINGPROBE_ERROR_UNAVAILABLE when a window stayed
 * open past the wait (the hold is taken all the same). */
LINGPROBE_API lingprobe_status lingprobe_hold_counters(int hold);

/* Entry point for the LD_PRELOAD stub: initialise from the environment.
 * Same return codes as lingprobe_init. */
LINGPROBE_API lingprobe_status lingprobe_preload_attach(void);

LINGPROBE_EXTERN_C_END

#endif /* LINGPROBE_LINGPROBE_H */
