// Termination signals that would end the process without atexit: SIGTERM,
// SIGHUP and SIGINT, each only where its disposition at init is the default
// (Python's KeyboardInterrupt handler, or the program's own, is left alone;
// their exits run atexit). The handler is async-signal-safe: it writes the
// signal's number to a pipe. A thread reading that pipe runs the finalize
// path (at most kFinalizeSeconds), puts the default disposition back and
// raises the signal again, so the process ends as it would have (killed by
// that signal: the exit status is unchanged) with its files complete. A
// second signal while finalizing ends the process at once.
#pragma once

#include <string>

namespace lingprobe::api {

constexpr int kFinalizeSeconds = 10;

// Installs the handlers and starts the thread; once per process (later calls
// do nothing). `finalize` runs on that thread, given the signal's name
// ("SIGTERM").
void install_exit_signal_flush(void (*finalize)(const char* signal_name));

// "SIGTERM", "SIGINT", ...; "SIG" and the number for one without a name here.
std::string signal_name(int sig);

// In a forked child (only the forking thread survives, the pipe's reader is
// gone): the dispositions found at init are put back. Async-signal-safe.
void exit_signals_after_fork();

}  // namespace lingprobe::api
