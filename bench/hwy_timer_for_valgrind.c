/* Preloaded under valgrind only (bench/cpu_bench.py, bench/decode_bench.py). On a host whose CPUID hides RDTSCP (an
 * AMD EPYC virtual machine), valgrind 3.19 cannot decode the RDTSCP in libhwy's hwy::platform::TimerResolution(),
 * which Debian's libtorch loads through OpenCV and calls at `import torch`: SIGILL before any instruction of the
 * benchmark is counted (issue 25). This definition of the same symbol takes its place in the process: a resolution
 * of one tick, read by libhwy's own timers only, which nothing measured here uses. */
#include <stdint.h>

__attribute__((visibility("default"))) uint64_t _ZN3hwy8platform15TimerResolutionEv(void) { return 1; }
