// The one place that knows all parts: the life-cycle state machine
// (fresh -> running -> finalized), configuration, identity, and the wiring
// capture -> sink. The C ABI in capi/ is a thin exception-safe shell over it.
#pragma once

#include <cstdint>
#include <string>

#include "api/config.h"
#include "api/identity.h"
#include "lingprobe/lingprobe.h"

namespace lingprobe::api {

lingprobe_status session_init(const Config& config, std::string& error);
// A first init, or one after a failed init, configures; a later one returns LINGPROBE_OK for the same
// configuration and LINGPROBE_ERROR_ALREADY_INITIALIZED (naming the options that differ) for another.
// After a configuration error: the running state with recording off (later calls return
// LINGPROBE_ERROR_INVALID_CONFIG, finalize is a no-op, and the next init tries again). false when a working
// configuration is running: it stays.
bool session_init_invalid();
// Starts (on) or stops recording: the hook is registered or removed.
lingprobe_status session_set_recording(bool on, std::string& error);
lingprobe_status session_flush(std::string& error);
// Recording off, then session_flush: the window's records are on disk when it returns. Not from the writer's
// thread (the control file switches recording alone): the flush waits for that thread.
lingprobe_status session_stop(std::string& error);
// `ended_by` goes into the final counts record: "finalize" (the API's call), "exit" (at exit), or the name of the
// signal that ended the process ("SIGTERM"), which the audit reports as an interrupted run.
lingprobe_status session_finalize(const char* ended_by = "finalize");
lingprobe_status session_set_rank(int64_t rank, int64_t local_rank, int64_t world_size, std::string& error);
// lingprobe_hold_counters: false when a window stayed open past the wait.
bool session_hold_counters(bool hold);
lingprobe_state session_state();
// True in a process forked from an initialised one: the C ABI's entry points
// return at once there (no lock, no torch call), recording stays off.
bool session_in_forked_child();
void session_stats(lingprobe_stats& out);
lingprobe_status session_metadata_path(std::string& path);
// OUT/{run_id}: this launch's run directory (known from init on; created lazily).
lingprobe_status session_run_dir(std::string& path);

}  // namespace lingprobe::api
