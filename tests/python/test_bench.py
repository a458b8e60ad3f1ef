"""The overhead benchmark runs and its numbers hold (issue 6): the quick mode
prints its ratios on the last line within a minute; under callgrind, the
instruction counts per call are reproducible and lingprobe recording every
top-level call with call records stays within the bounds docs/PERFORMANCE.md
reports (a regression guard on the calling thread's instructions)."""
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "cpu_bench.py"


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
    assert elapsed < 90, f"--quick took {elapsed:.0f} s"  # a minute on an idle machine; CI shares its 2 cores


@pytest.mark.skipif(not shutil.which("valgrind"), reason="valgrind not installed (scripts/install-deps.sh installs it)")
def test_instructions_per_call_lingprobe_against_the_floor(build_dir, tmp_path):
    if not (build_dir / "bench" / "libcallgrind_control.so").exists():
        pytest.skip("built without valgrind's headers")
    out = tmp_path / "cg.json"
    p = run_bench(build_dir, "--no-wall", "--workloads", "add", "--configs",
                  "floor,lingprobe,lingprobe-sampling-idle,profiler", "--json", str(out), timeout=1800)
    assert p.returncode == 0, p.stderr[-3000:]
    numbers = json.loads(out.read_text())["instructions"]
    none, floor = numbers["add/none"], numbers["add/floor"]
    lingprobe, profiler = numbers["add/lingprobe"], numbers["add/profiler"]
    assert abs(none["added"]) < 200, none                 # switching nothing costs ~nothing (noise seen: up to 110)
    assert 500 < floor["added"] < 3000, floor             # the dispatcher boxing inputs and outputs
    # lingprobe's own work on the calling thread, on top of the floor's boxing
    # (docs/PERFORMANCE.md explains it instruction by instruction: ~760); the
    # bound leaves room for the method's noise and catches a hot-path regression.
    assert lingprobe["added"] - floor["added"] < 1000, (lingprobe, floor)
    assert lingprobe["added"] < profiler["added"], (lingprobe, profiler)
    # call records cost the writer thread (not the caller) ~800 instructions each; snprintf cost ~5,000
    assert lingprobe["other"] < 1100, lingprobe
    # sampling on, nothing left to sample: one relaxed load more per call, within the method's noise (issue 12).
    # Each figure carries the method's noise (±110 seen), so their difference up to twice that (222 seen in CI
    # on 2026-12-01 with +15 measured the day before); a real hot-path cost (a lookup, a format) is thousands.
    idle = numbers["add/lingprobe-sampling-idle"]
    assert abs(idle["added"] - lingprobe["added"]) < 350, (idle, lingprobe)
    print(f"\ninstructions per torch.add: lingprobe {lingprobe['added']:.0f}, sampling idle {idle['added']:.0f}")
