/* Callgrind client requests for bench/cpu_bench.py, callable through ctypes:
 * the benchmark turns instrumentation on after its warm-up and dumps the
 * counts of each measured loop under a label. Outside valgrind each request is
 * a handful of no-op instructions. */
#include <valgrind/callgrind.h>

#define LPBENCH_EXPORT __attribute__((visibility("default")))

LPBENCH_EXPORT void lpbench_start_instrumentation(void) { CALLGRIND_START_INSTRUMENTATION; }
LPBENCH_EXPORT void lpbench_zero(void) { CALLGRIND_ZERO_STATS; }
LPBENCH_EXPORT void lpbench_dump(const char* label) { CALLGRIND_DUMP_STATS_AT(label); }
LPBENCH_EXPORT int lpbench_under_valgrind(void) { return (int)RUNNING_ON_VALGRIND; }
