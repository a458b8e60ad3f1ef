"""The overhead benchmark's wall-clock gate (issue 6): the quick mode prints
its ratios on the last line within a minute, and lingprobe's added wall time
stays within a bound of the floor's (paired in one process: the gate on every
host). A timing test: ctest runs this file alone (tests/CMakeLists.txt). The
instruction counts are test_bench_instructions.py's."""
import pathlib
import re
import subprocess
import sys
import time

BENCH = pathlib.Path(__file__).resolve().parents[2] / "bench" / "cpu_bench.py"


def run_bench(build_dir, *args, timeout=600):
    return subprocess.run([sys.executable, str(BENCH), "--build", str(build_dir), *args], capture_output=True,
                          text=True, timeout=timeout)


def test_quick_mode_prints_ratios_on_its_last_line(build_dir):
    t0 = time.time()
    p = run_bench(build_dir, "--quick")
    elapsed = time.time() - t0
    assert p.returncode == 0, p.stderr[-3000:]
    last = p.stdout.strip().splitlines()[-1]
    ratios = dict(re.findall(r"([\w-]+)/floor wall (-?[\d.]+|nan)", last))
    assert set(ratios) == {"lingprobe", "profiler"}, last
    assert all(float(v) == float(v) for v in ratios.values()), last  # not NaN: the floor's added cost was positive
    assert elapsed < 90, f"--quick took {elapsed:.0f} s"  # 20 s on an idle machine; CI shares its 2 cores
    # The wall-clock gate, measured as pairs in one process, which stands in for the instruction gate where
    # valgrind cannot run torch: lingprobe's added time over the floor's. Six runs on an AMD EPYC CI machine
    # (2026-12-02): 2.25 to 3.00. A hot-path regression of thousands of instructions per call (a format, a
    # lock) lands far above 5; one of a few hundred (a lookup) does not: the instruction gate catches those.
    print(f"\nquick bench: {last}")
    assert float(ratios["lingprobe"]) < 5, last
