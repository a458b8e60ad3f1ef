"""CPU overhead of lingprobe against what users would use instead, side by
side in one run (issue 6, SPEC section 7). One command, one table:

    /usr/bin/python3 bench/cpu_bench.py            # every configuration and workload, wall clock + instructions
    /usr/bin/python3 bench/cpu_bench.py --quick    # torch.add, floor/lingprobe/profiler: under a minute

Method (bench/cpu_bench_child.py does the measuring). The configurations that
can be switched on and off inside a process (the floor, lingprobe, torch.profiler,
the execution-trace observer, the TorchDispatchMode logger, the stage map's
module hooks) live in one process and are each measured against the
switched-off state right next to them, so that the machine's drift and the
process's memory layout cancel:
- wall clock: pairs of blocks (off, on), configurations rotating; a process
  reports the median of the paired differences; the table gives the median
  and min-max over --reps processes, interleaved with the other groups;
- instructions: one process under valgrind's callgrind, instrumentation on
  after the warm-up; per configuration and state the count per call is the
  difference between a loop of 2n calls and one of n (fixed costs cancel),
  states measured off, on, on, off and averaged (a drift cancels);
  all threads count, lingprobe's writer thread included (each measured loop
  ends with a flush).
'none' switches nothing: its added cost is the method's noise. The cost of
lingprobe loaded with recording off is measured in a process before and after
loading. "added / floor's" divides a configuration's added cost by the floor's
(SPEC section 7: lingprobe's gate is 1.25 on instructions).

Workloads: 'add' (torch.add on 4-element tensors: the dispatcher-bound worst
case), 'dit' (a DiT block at width 64, 32 tokens: 19 top-level calls of
layer_norm, linear, attention by matmul/softmax, MLP, residual adds) and
'module' (an nn.Module whose forward does no ATen work: the stage map's
global module hooks, per module call); on request only, 'new-shapes' (a view
whose length never repeats: every call a first sighting, as where a decode
loop's attention meets a longer cache each token)."""
import argparse
import functools
import glob
import json
import os
import pathlib
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import typing

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHILD = str(ROOT / "bench" / "cpu_bench_child.py")
ALL_CONFIGS = ["none", "floor", "lingprobe-off", "lingprobe", "lingprobe-never", "lingprobe-counts-only",
               "lingprobe-untimed", "lingprobe-nested", "lingprobe-sampling-idle",
               "profiler", "execution-trace", "dispatch-mode", "stage-map-unmatched", "stage-map-matched"]
QUICK_CONFIGS = ["none", "floor", "lingprobe", "profiler"]
GROUP_OF = {"lingprobe-off": "loaded", "lingprobe-nested": "nested", "lingprobe-never": "never",
            "lingprobe-counts-only": "counts", "lingprobe-untimed": "untimed",
            "lingprobe-sampling-idle": "sampling"}  # everything else: "main"
DESCRIPTIONS = {
    "none": "nothing switched (the method's noise)",
    "floor": "empty global RecordFunction callback asking for inputs and outputs",
    "lingprobe-off": "lingprobe loaded and initialised, recording off (vs. not loaded)",
    "lingprobe": "lingprobe recording every top-level call, call records on (SUPPRESS_NESTED=auto)",
    "lingprobe-never": "as 'lingprobe' with SUPPRESS_NESTED=never: nested calls boxed and seen",
    "lingprobe-counts-only": "as 'lingprobe' with CALL_RECORDS=0: signatures and counts, no per-call records",
    "lingprobe-untimed": "as 'lingprobe' with CALL_TIMES=0: call records without their two clock reads",
    "lingprobe-nested": "lingprobe recording nested calls too, call records on",
    "lingprobe-sampling-idle": "as 'lingprobe', with LINGPROBE_SNAPSHOTS=1 and every key already sampled",
    "profiler": "torch.profiler, CPU activity, record_shapes=True",
    "execution-trace": "PyTorch execution-trace observer",
    "dispatch-mode": "Python TorchDispatchMode logging shapes, strides, dtypes",
    "stage-map-unmatched": "stage-map module hooks, rule naming another class (every module pays this)",
    "stage-map-matched": "stage-map module hooks, rule matching the module (stage push and pop)",
}


# glibc's heap grows and trims its top in big steps: otherwise each state's allocation history decides how often
# torch's own tensor allocations consolidate the heap (seen: +214 instructions per torch.add call in one state, none
# in the next, from malloc_consolidate under _int_memalign). bench/decode_bench.py uses it too.
HEAP_TUNABLES = "glibc.malloc.top_pad=67108864:glibc.malloc.trim_threshold=268435456"


def child_env(build):
    return dict(os.environ, PYTHONPATH=str(ROOT / "python_shim"), LINGPROBE_LIBRARY=str(build / "liblingprobe.so"),
                LPBENCH_FLOOR=str(build / "bench" / "libfloor_callback.so"),
                LPBENCH_CALLGRIND=str(build / "bench" / "libcallgrind_control.so"),
                OMP_NUM_THREADS="1", LINGPROBE_LOG_LEVEL="warn", PYTHONHASHSEED="0",
                GLIBC_TUNABLES=HEAP_TUNABLES)


# ATen (or module) calls per measured block (wall clock) and per n (callgrind), by
# workload: the DiT block is ~100x the cost of torch.add per call on this CPU.
WALL_CALLS = {"add": 2000, "dit": 190, "module": 2000, "new-shapes": 500}
CALLGRIND_CALLS = {"add": 3000, "dit": 190, "module": 3000, "new-shapes": 300}


def run_child(prefix, group, mode, workloads, configs, calls, pairs, env):
    argv = prefix + [sys.executable, CHILD, group, mode, ",".join(f"{w}={calls[w]}" for w in workloads),
                     ",".join(configs), str(pairs)]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600)
    if p.returncode != 0:
        raise SystemExit(f"{mode} {group} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    reply = json.loads(p.stdout.strip().splitlines()[-1])
    if reply["dropped"]:
        raise SystemExit(f"{mode} {group}: lingprobe dropped {reply['dropped']} calls; the measurement is void")
    return reply["results"]


def callgrind_events(directory):
    """{label: {event: count}} from the dumps of one callgrind run (Ir, and with --cache-sim=yes the cache
    events: I1mr, D1mr, D1mw, ILmr, DLmr, DLmw among them). With --separate-threads=yes a client request dumps
    the requesting thread only (files cg.out.N-01): the calling thread's counts."""
    totals = {}
    for path in glob.glob(os.path.join(directory, "cg.out.*")):
        label, events = None, None
        with open(path) as f:
            for line in f:
                if line.startswith("events:"):
                    events = line.split()[1:]
                elif line.startswith("desc: Trigger: Client Request: "):
                    label = line.split("Client Request: ", 1)[1].strip()
                elif line.startswith(("totals:", "summary:")):
                    if label is not None and events:
                        totals[label] = dict(zip(events, map(int, line.split()[1:])))
                    break
    return totals


def callgrind_totals(directory):
    """{label: instructions} from the dumps of one callgrind run (callgrind_events' Ir)."""
    return {label: events["Ir"] for label, events in callgrind_events(directory).items()}


class ValgrindCannotRun(typing.NamedTuple):
    """Why valgrind cannot run a program here. `host_limit`: an instruction this processor's valgrind does not
    decode (SIGILL on valgrind's own report): a fact of the host, where instruction counts are skipped; anything
    else (a timeout, a crash, torch failing to import) is a failure to report."""
    reason: str
    host_limit: bool


def valgrind_preload(build):
    """The library preloaded under valgrind (bench/hwy_timer_for_valgrind.c): libhwy's RDTSCP timer replaced, so
    that valgrind runs torch on hosts whose CPUID hides RDTSCP. None when the build lacks it."""
    shim = pathlib.Path(build) / "bench" / "libhwy_timer_for_valgrind.so"
    return str(shim) if shim.exists() else None


def under_valgrind(env, build):
    """`env` for a process run under valgrind: valgrind_preload's library in front of its LD_PRELOAD."""
    shim = valgrind_preload(build)
    if not shim:
        return env
    return dict(env, LD_PRELOAD=":".join(p for p in (shim, env.get("LD_PRELOAD", "")) if p))


@functools.lru_cache(maxsize=None)
def valgrind_cannot_run_torch(python=sys.executable, code="import torch", timeout=600, path=None, preload=None):
    """None when the PATH's valgrind runs `code` (`import torch`) under `python`, with `preload` (valgrind_preload)
    preloaded when given; else a ValgrindCannotRun whose reason is one line. Valgrind only decodes the instructions
    the processor's CPUID advertises: on a host whose CPUID hides RDTSCP (seen on an AMD EPYC virtual machine),
    valgrind 3.19 raises SIGILL in libhwy's TimerResolution(), which Debian's libtorch loads through OpenCV, before
    torch is imported (issue 25); valgrind_preload's library replaces that function. Cached per arguments (`path`:
    the PATH it was asked under, so that a changed PATH asks again)."""
    valgrind = shutil.which("valgrind", path=path)
    if not valgrind:
        return ValgrindCannotRun("valgrind is not installed (scripts/install-deps.sh installs it)", True)
    env = dict(os.environ, LD_PRELOAD=preload) if preload else None
    try:
        p = subprocess.run([valgrind, "--tool=none", python, "-c", code], capture_output=True, text=True,
                           timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return ValgrindCannotRun(f"valgrind did not finish `{code}` within {timeout} s", False)
    if p.returncode == 0:
        return None
    version = re.search(r"Using (Valgrind-[\w.]+)", p.stderr)
    version = version.group(1) if version else "valgrind"
    try:
        what = f"exit {p.returncode}" if p.returncode > 0 else signal.Signals(-p.returncode).name
    except ValueError:
        what = f"signal {-p.returncode}"
    unhandled = re.search(r"unhandled instruction bytes: (0x[0-9A-Fa-f]+(?: 0x[0-9A-Fa-f]+){0,2})", p.stderr)
    where = re.search(r"Unrecognised instruction at address \S+\n==\d+==\s+at \S+: (.+)", p.stderr)
    if unhandled and p.returncode == -signal.SIGILL:
        detail = f": it does not decode the instruction starting {unhandled.group(1)}"
        detail += f" in {where.group(1).strip()}" if where else ""
        detail += " (valgrind decodes only what this processor's CPUID advertises)"
        return ValgrindCannotRun(f"{version} cannot run `{code}` on this host ({what}){detail}", True)
    tail = [line for line in p.stderr.splitlines() if line.strip() and not line.startswith("==")]
    detail = f": {tail[-1].strip()}" if tail else ""
    return ValgrindCannotRun(f"{version} failed on `{code}` ({what}){detail}", False)


def callgrind_run(group, workloads, configs, env, separate, keep):
    directory = tempfile.mkdtemp(prefix=f"lpbench-cg-{group}-")
    prefix = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-line=no",
              f"--separate-threads={'yes' if separate else 'no'}", f"--callgrind-out-file={directory}/cg.out"]
    results = run_child(prefix, group, "callgrind", workloads, configs, CALLGRIND_CALLS, 0, env)
    totals = callgrind_totals(directory)
    per_call = {}
    for w, per_config in results.items():
        for c, r in per_config.items():
            for state in ("off", "on"):
                passes = []
                for label in ("a", "b"):
                    a, b = totals.get(f"{w}/{c}/{state}/{label}/1"), totals.get(f"{w}/{c}/{state}/{label}/2")
                    if a is None or b is None:
                        raise SystemExit(f"callgrind {group}: no dumps for {w}/{c}/{state}/{label} in {directory}")
                    passes.append((b - a) / r["calls"])
                per_call[(w, c, state)] = sum(passes) / 2
    if keep:
        os.makedirs(keep, exist_ok=True)
        for path in glob.glob(os.path.join(directory, "cg.out*")):
            shutil.copy(path, os.path.join(keep, f"{group}.{'thread' if separate else 'all'}.{os.path.basename(path)}"))
    shutil.rmtree(directory, ignore_errors=True)
    return per_call


def instructions(group, workloads, configs, env, keep):
    """{(workload, config): {"off", "on", "added": the calling thread's instructions per call;
    "other": other threads' (lingprobe's writer) added instructions per call}}. Two runs: one counting
    the calling thread alone, one counting every thread."""
    thread = callgrind_run(group, workloads, configs, env, True, keep)
    every = callgrind_run(group, workloads, configs, env, False, keep)
    out = {}
    for (w, c, state) in thread:
        if state == "on":
            on, off = thread[(w, c, "on")], thread[(w, c, "off")]
            all_added = every[(w, c, "on")] - every[(w, c, "off")]
            out[(w, c)] = {"on": on, "off": off, "added": on - off, "other": all_added - (on - off)}
    return out


def groups_for(configs):
    groups = {}
    for c in configs:
        groups.setdefault(GROUP_OF.get(c, "main"), []).append(c)
    return groups


def ratio(x, floor):
    return x / floor if floor and floor > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="wall clock only: torch.add; none, floor, lingprobe, profiler; 3 processes")
    ap.add_argument("--reps", type=int, default=None, help="wall-clock processes per group (default 5; --quick 3)")
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--workloads", default=None, help="comma-separated: add,dit,module,new-shapes (default add,dit,module; --quick add)")
    ap.add_argument("--configs", default=None, help="comma-separated subset of: " + ",".join(ALL_CONFIGS))
    ap.add_argument("--no-callgrind", action="store_true", help="wall clock only")
    ap.add_argument("--no-wall", action="store_true", help="instructions only")
    ap.add_argument("--keep-dumps", default=None, help="copy the callgrind dumps here (for callgrind_annotate)")
    ap.add_argument("--json", default=None, help="also write the raw numbers here")
    args = ap.parse_args()
    workloads = (args.workloads or ("add" if args.quick else "add,dit,module")).split(",")
    configs = (args.configs.split(",") if args.configs else QUICK_CONFIGS if args.quick else ALL_CONFIGS)
    if "none" not in configs:
        configs = ["none"] + configs
    build = pathlib.Path(args.build)
    env = child_env(build)
    reps = args.reps or (3 if args.quick else 5)
    do_wall, do_cg = not args.no_wall, not (args.quick or args.no_callgrind)
    if do_cg and not (build / "bench" / "libcallgrind_control.so").exists():
        raise SystemExit("instruction counts need build/bench/libcallgrind_control.so (built with valgrind's "
                         "headers: scripts/install-deps.sh, scripts/build.sh); or pass --no-callgrind")
    preload = valgrind_preload(build)
    cannot = valgrind_cannot_run_torch(path=os.environ.get("PATH"), preload=preload) if do_cg else None
    if cannot and not (cannot.host_limit and do_wall):
        raise SystemExit(f"instruction counts: {cannot.reason}" +
                         ("; measure wall clock instead (leave out --no-wall)" if cannot.host_limit else ""))
    if cannot:
        print(f"instruction counts left out: {cannot.reason}", file=sys.stderr)
        do_cg = False
    groups = groups_for(configs)
    pairs = 10 if args.quick else 20
    started = time.time()
    wall = {}
    for rep in range(reps if do_wall else 0):
        order = list(groups) if rep % 2 == 0 else list(groups)[::-1]
        for g in order:
            for w, per_config in run_child([], g, "wall", workloads, groups[g], WALL_CALLS, pairs, env).items():
                for c, r in per_config.items():
                    wall.setdefault((w, c), []).append(r)
    instr = {}
    for g in (groups if do_cg else []):
        instr.update(instructions(g, workloads, groups[g], under_valgrind(env, build), args.keep_dumps))
    elapsed = time.time() - started

    import torch
    print(f"# {time.strftime('%Y-%m-%d')}, torch {torch.__version__}, {os.cpu_count()} CPUs; "
          f"wall clock: {reps if do_wall else 0} processes per group x {pairs} block pairs "
          f"({', '.join(f'{w} {WALL_CALLS[w]}' for w in workloads)} calls per block); "
          f"{'callgrind instructions; ' if do_cg else ''}{elapsed:.0f} s")
    summary = {}
    for w in workloads:
        unit = "module call" if w == "module" else "ATen call"
        rows = [c for c in configs if (w, c) in wall or (w, c) in instr]
        if not rows:
            continue
        floor_wall = statistics.median(r["added"] for r in wall[(w, "floor")]) if (w, "floor") in wall else None
        floor_instr = instr[(w, "floor")]["added"] if (w, "floor") in instr else None
        print(f"\n## '{w}', per {unit}\n")
        print("| configuration | ns on | added ns (median) | added ns (min-max) | added / floor's | "
              "instructions on | added instructions | added / floor's | other threads' added instructions |")
        print("|---|---|---|---|---|---|---|---|---|")
        for c in rows:
            cells = [c]
            if (w, c) in wall:
                runs = wall[(w, c)]
                added = [r["added"] for r in runs]
                med = statistics.median(added)
                cells += [f"{statistics.median(r['on'] for r in runs):.0f}", f"{med:+.0f}",
                          f"{min(added):+.0f} to {max(added):+.0f}",
                          f"{ratio(med, floor_wall):.2f}" if c not in ("none", "floor") else "-"]
                summary[(w, c, "wall")] = ratio(med, floor_wall)
            else:
                cells += ["-"] * 4
            if (w, c) in instr:
                i = instr[(w, c)]
                cells += [f"{i['on']:.0f}", f"{i['added']:+.0f}",
                          f"{ratio(i['added'], floor_instr):.2f}" if c not in ("none", "floor") else "-",
                          f"{i['other']:+.0f}"]
                summary[(w, c, "instr")] = ratio(i["added"], floor_instr)
            else:
                cells += ["-"] * 4
            print("| " + " | ".join(cells) + " |")
    print("\n" + "\n".join(f"- {c}: {DESCRIPTIONS[c]}" for c in configs))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"wall": {f"{w}/{c}": v for (w, c), v in wall.items()},
                       "instructions": {f"{w}/{c}": v for (w, c), v in instr.items()}}, f, indent=1)
    last = []
    for c in configs:
        for kind, label in (("instr", "instructions"), ("wall", "wall")):
            if ("add", c, kind) in summary and c not in ("none", "floor"):
                last.append(f"{c}/floor {label} {summary[('add', c, kind)]:.2f}")
    print("add, added cost over the floor's: " + "; ".join(last))


if __name__ == "__main__":
    main()
