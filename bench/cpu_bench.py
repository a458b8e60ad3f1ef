"""CPU overhead of lingprobe against what users would use instead, side by
side in one run (issue 6, SPEC section 7). Each configuration runs in its own
process (an observer cannot be unloaded); configurations are interleaved and
repeated; per-call time is the best-of-blocks median of each process, reported
as median and spread over the repetitions, and as the cost added on top of
no instrumentation, relative to the floor's added cost.

    /usr/bin/python3 bench/cpu_bench.py [--quick] [--build build] [--reps N]

Workloads: 'add' (torch.add on 4-element tensors: the dispatcher-bound worst
case) and 'dit' (a DiT block at reduced width, F.linear and friends)."""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = ["none", "floor", "lingprobe-off", "lingprobe", "lingprobe-nested", "profiler", "execution-trace",
           "dispatch-mode"]

CHILD = r'''
import json, os, sys, time, tempfile
import torch
import torch.nn.functional as F
config, workload, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = tempfile.mkdtemp(prefix="lpbench-")
cleanup = lambda: None
if config == "floor":
    import ctypes
    ctypes.CDLL(os.environ["LPBENCH_FLOOR"]).floor_install()
elif config.startswith("lingprobe"):
    import lingprobe
    lingprobe.start(out_dir=out, nested=(config == "lingprobe-nested"), call_records=True)
    if config == "lingprobe-off":
        lingprobe.stop()
    cleanup = lingprobe.finalize
elif config == "profiler":
    prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True)
    prof.__enter__()
    cleanup = lambda: prof.__exit__(None, None, None)
elif config == "execution-trace":
    Obs = getattr(torch.profiler, "ExecutionTraceObserver", None) or torch.profiler.ExecutionGraphObserver
    obs = Obs()
    obs.register_callback(os.path.join(out, "et.json"))
    obs.start()
    cleanup = lambda: (obs.stop(), obs.unregister_callback())
elif config == "dispatch-mode":
    from torch.utils._python_dispatch import TorchDispatchMode
    class Logger(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.records = []
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            meta = lambda a: (str(a.dtype), tuple(a.shape), a.stride()) if isinstance(a, torch.Tensor) else a
            self.records.append((str(func), [meta(a) for a in args], {k: meta(v) for k, v in kwargs.items()}))
            return func(*args, **kwargs)
    mode = Logger()
    mode.__enter__()
    cleanup = lambda: mode.__exit__(None, None, None)

if workload == "add":
    x = torch.ones(4)
    def step():
        torch.add(x, x)
    per_step = 1
else:
    d = 64
    x, w1, w2 = torch.randn(1, 32, d), torch.randn(4 * d, d), torch.randn(d, 4 * d)
    def step():
        h = F.layer_norm(x, (d,))
        h = F.linear(F.gelu(F.linear(h, w1)), w2)
        return x + h
    per_step = 6  # top-level ATen calls per step (layer_norm, linear, gelu, linear, add, + the add's alias)
for _ in range(max(100, calls // 20)):
    step()
blocks = []
n = max(1, calls // per_step // 5)
for _ in range(5):
    t0 = time.perf_counter_ns()
    for _ in range(n):
        step()
    blocks.append((time.perf_counter_ns() - t0) / (n * per_step))
cleanup()
print(json.dumps({"config": config, "workload": workload, "ns_per_call": sorted(blocks)[len(blocks) // 2]}))
'''


def run_one(python, config, workload, calls, env):
    p = subprocess.run([python, "-c", CHILD, config, workload, str(calls)], env=env, capture_output=True, text=True,
                       timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"{config}/{workload} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])["ns_per_call"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer calls and repetitions: under a minute")
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--workloads", default=None, help="comma-separated: add,dit (default both; --quick: add)")
    args = ap.parse_args()
    args.workloads = args.workloads or ("add" if args.quick else "add,dit")
    build = pathlib.Path(args.build)
    reps = args.reps or (3 if args.quick else 7)
    calls = 20000 if args.quick else 200000
    configs = CONFIGS if not args.quick else ["none", "floor", "lingprobe", "profiler"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python_shim"), LINGPROBE_LIBRARY=str(build / "liblingprobe.so"),
               LPBENCH_FLOOR=str(build / "bench" / "libfloor_callback.so"), OMP_NUM_THREADS="1",
               LINGPROBE_LOG_LEVEL="warn")
    results = {}
    start = time.time()
    for workload in args.workloads.split(","):
        for rep in range(reps):
            for config in (configs if rep % 2 == 0 else list(reversed(configs))):  # interleaved
                results.setdefault((workload, config), []).append(run_one(sys.executable, config, workload, calls, env))
    print(f"# {time.strftime('%Y-%m-%d')} torch {__import__('torch').__version__}, {reps} interleaved repetitions, "
          f"{calls} calls each, {time.time() - start:.0f} s")
    print("| workload | configuration | ns/call (median) | spread (min-max) | added ns/call | added / floor's added |")
    print("|---|---|---|---|---|---|")
    last = []
    for workload in args.workloads.split(","):
        base = statistics.median(results[(workload, "none")])
        floor = statistics.median(results[(workload, "floor")]) - base
        for config in configs:
            v = results[(workload, config)]
            med, added = statistics.median(v), statistics.median(v) - base
            ratio = added / floor if floor > 0 else float("nan")
            print(f"| {workload} | {config} | {med:.0f} | {min(v):.0f}-{max(v):.0f} | {added:+.0f} | "
                  f"{ratio:.2f} |" if config != "none" else f"| {workload} | none | {med:.0f} | {min(v):.0f}-{max(v):.0f} | - | - |")
            if config in ("lingprobe", "profiler") and workload == "add":
                last.append(f"{config}/floor={ratio:.2f}")
    print("ratios (add, added cost over the floor's): " + " ".join(last))


if __name__ == "__main__":
    main()
