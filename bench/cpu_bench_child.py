"""One measuring process of bench/cpu_bench.py (run by it, not by hand):

    cpu_bench_child.py GROUP MODE WORKLOAD=CALLS,... CONFIGS PAIRS

GROUP 'main' builds every configuration that can be switched on and off inside
one process (the floor, lingprobe, torch.profiler, the execution-trace
observer, the TorchDispatchMode logger, the stage map's module hooks) and
measures each against the switched-off state right next to it; 'nested' does
the same for lingprobe initialised with nested calls; 'loaded' measures a
process before and after lingprobe is loaded and initialised with recording
off (this one cannot be switched back, so its blocks are sequential).

MODE 'wall': per configuration, PAIRS pairs of blocks (off, then on) of CALLS
calls each (per workload), configurations rotating; reports the median of the off blocks, of
the on blocks and of the paired differences. MODE 'callgrind' (run under
valgrind --instr-atstart=no): per configuration, states off, on, on, off; in
each a loop of n and one of 2n calls between ZERO and DUMP client requests,
labelled 'workload/config/state/a|b/1|2'; the parent reads the dumps.

Prints one JSON line: {"results": {workload: {config: {...}}}, "dropped": n}."""
import ctypes
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

group, mode = sys.argv[1], sys.argv[2]
calls_of = {w: int(n) for w, n in (item.split("=") for item in sys.argv[3].split(","))}
workloads = list(calls_of)
wanted, pairs = sys.argv[4].split(","), int(sys.argv[5])
torch.set_num_threads(1)
out = tempfile.mkdtemp(prefix="lpbench-")
lingprobe = None


class Toggle:
    """A configuration: on() and off() switch it; settle() runs after a measured
    loop (lingprobe: let the writer catch up, so its work lands in the loop's
    instruction count and not in the next one's)."""

    def __init__(self, name, on=lambda: None, off=lambda: None, settle=lambda: None, workloads=None, recorded=None):
        self.name, self.on, self.off, self.settle = name, on, off, settle
        self.workloads = workloads  # None: the ATen workloads
        self.recorded = recorded  # for a tool that records: how many ATen calls its last on() .. off() recorded


def floor_toggle():
    lib = ctypes.CDLL(os.environ["LPBENCH_FLOOR"])
    lib.floor_install.restype = ctypes.c_uint64
    lib.floor_remove.argtypes = [ctypes.c_uint64]
    handle = []
    return Toggle("floor", on=lambda: handle.append(lib.floor_install()), off=lambda: lib.floor_remove(handle.pop()))


def start_lingprobe(nested, snapshots=False, **options):
    global lingprobe
    import lingprobe as lp
    lingprobe = lp
    lp.start(out_dir=out, nested=nested, call_records=options.pop("call_records", True), snapshots=snapshots, **options)
    lp.stop()


def lingprobe_toggle(name):
    return Toggle(name, on=lingprobe.start, off=lingprobe.stop, settle=lingprobe.flush)


def profiler_toggle():
    """torch.profiler's sessions; each session's recorded ATen calls are counted (outside the timed block), so that
    a session that records nothing is not reported as a cheap profiler."""
    current, last = [], []

    def on():
        current.append(torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True))
        current[-1].__enter__()

    def off():
        prof = current.pop()
        prof.__exit__(None, None, None)
        last[:] = [sum(1 for e in prof.events() if e.name.startswith("aten::"))]

    return Toggle("profiler", on=on, off=off, recorded=lambda: last[0] if last else 0)


def execution_trace_toggle():
    observer_class = getattr(torch.profiler, "ExecutionTraceObserver", None) or torch.profiler.ExecutionGraphObserver
    observer = observer_class()
    observer.register_callback(os.path.join(out, "execution_trace.json"))
    return Toggle("execution-trace", on=observer.start, off=observer.stop)


def dispatch_mode_toggle():
    from torch.utils._python_dispatch import TorchDispatchMode

    class ShapeLogger(TorchDispatchMode):
        """One log line per call (a string: not traversed by Python's cyclic GC,
        which made a logger keeping tuples cost 2-5x more as its list grew)."""
        lines = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            meta = lambda a: f"{a.dtype}{tuple(a.shape)}{a.stride()}" if isinstance(a, torch.Tensor) else repr(a)
            self.lines.append(f"{func} {' '.join(meta(a) for a in args)} "
                              f"{' '.join(f'{k}={meta(v)}' for k, v in kwargs.items())}")
            return func(*args, **kwargs)

    current = []

    def on():
        current.append(ShapeLogger())
        current[-1].__enter__()

    return Toggle("dispatch-mode", on=on, off=lambda: current.pop().__exit__(None, None, None))


def stage_map_toggle(name, spec):
    from lingprobe import _stage_map
    rules = _stage_map._Rules(spec)
    handles = []
    return Toggle(name, on=lambda: handles.extend(_stage_map._install_module_hooks(rules)),
                  off=lambda: [handles.pop().remove() for _ in range(len(handles))], workloads=["module"])


def loaded_toggle():
    state = {"started": False}

    def on():
        if not state["started"]:
            start_lingprobe(nested=False)
            state["started"] = True

    return Toggle("lingprobe-off", on=on)


def build_toggles():
    if group == "loaded":
        return [loaded_toggle()]
    if group == "nested":
        start_lingprobe(nested=True)
        return [lingprobe_toggle("lingprobe-nested")]
    if group == "never":  # nested calls boxed and seen below top-level calls, as before issue 14
        start_lingprobe(nested=False, suppress_nested="never")
        return [lingprobe_toggle("lingprobe-never")]
    if group == "counts":  # signatures and counts only: no timestamps, sequence numbers or call records
        start_lingprobe(nested=False, call_records=False)
        return [lingprobe_toggle("lingprobe-counts-only")]
    if group == "untimed":  # call records without host times: no clock read per call
        start_lingprobe(nested=False, call_times=False)
        return [lingprobe_toggle("lingprobe-untimed")]
    if group == "sampling":  # the warm-up samples every key once; measured: sampling on with nothing left to sample
        start_lingprobe(nested=False, snapshots=True)
        return [lingprobe_toggle("lingprobe-sampling-idle")]
    start_lingprobe(nested=False)
    makers = {
        "none": lambda: Toggle("none", workloads=["add", "dit", "module", "new-shapes"]),
        "floor": floor_toggle,
        "lingprobe": lambda: lingprobe_toggle("lingprobe"),
        "profiler": profiler_toggle,
        "execution-trace": execution_trace_toggle,
        "dispatch-mode": dispatch_mode_toggle,
        "stage-map-unmatched": lambda: stage_map_toggle("stage-map-unmatched", "blocks=SomethingElse"),
        "stage-map-matched": lambda: stage_map_toggle("stage-map-matched", "blocks=Leaf"),
    }
    toggles = [makers[name]() for name in makers if name in wanted]
    if any(t.name.startswith("stage-map") for t in toggles):
        lingprobe.start()  # stage pushes and pops go to a recording lingprobe, as in a real run
    return toggles


def workload_step(name):
    """(step function, calls per step: top-level ATen calls, or module calls)"""
    if name == "add":
        x = torch.ones(4)
        return (lambda: torch.add(x, x)), 1
    if name == "dit":
        d, n, heads = 64, 32, 4
        x = torch.randn(1, n, d)
        wqkv, wo, w1, w2 = torch.randn(3 * d, d), torch.randn(d, d), torch.randn(4 * d, d), torch.randn(d, 4 * d)

        def step():  # 19 top-level ATen calls
            h = F.layer_norm(x, (d,))                                                   # layer_norm
            q, k, v = F.linear(h, wqkv).view(1, n, 3, heads, d // heads).unbind(2)     # linear, view, unbind
            a = torch.softmax(torch.matmul(q.transpose(1, 2), k.permute(0, 2, 3, 1)), -1)  # transpose, permute,
            o = torch.matmul(a, v.transpose(1, 2)).transpose(1, 2).reshape(1, n, d)    # matmul, softmax; transpose,
            y = x + F.linear(o, wo)                                                     # matmul, transpose, reshape;
            return y + F.linear(F.gelu(F.linear(F.layer_norm(y, (d,)), w1)), w2)       # linear, add; layer_norm,
        return step, 19                                                                 # linear, gelu, linear, add

    if name == "new-shapes":  # each call a first sighting: a view whose length never repeats in the process
        big, length = torch.empty(10 ** 7), itertools.count(1)
        return (lambda: big.narrow(0, 0, next(length))), 1
    if name == "module":
        class Leaf(torch.nn.Module):
            def forward(self, x):
                return x

        leaf, x = Leaf(), torch.ones(4)
        return (lambda: leaf(x)), 1
    raise SystemExit(f"unknown workload {name}")


def loop(step, n):
    for _ in range(n):
        step()


def check_call_count(step, per_step):
    """The per-call division is only right if lingprobe sees per_step top-level calls per step."""
    lingprobe.start()
    before = lingprobe.stats()["calls_seen"]
    loop(step, 10)
    seen = lingprobe.stats()["calls_seen"] - before
    lingprobe.stop()
    if seen != 10 * per_step:
        raise SystemExit(f"{seen / 10} top-level calls per step seen, the benchmark assumes {per_step}")


def check_recorded(t, calls):
    """A recording tool's block must have recorded its calls: else the row measures a tool that was not on."""
    if t.recorded and t.recorded() < calls:
        raise SystemExit(f"{t.name} recorded {t.recorded()} ATen calls of a block of {calls}: it was not recording, "
                         "so its row would not measure it")


def measure_wall(step, steps, toggles, per_step):
    samples = {t.name: {"off": [], "on": [], "added": []} for t in toggles}
    sequential = group == "loaded"

    def block():
        t0 = time.perf_counter_ns()
        loop(step, steps)
        return (time.perf_counter_ns() - t0) / (steps * per_step)

    if sequential:
        t = toggles[0]
        samples[t.name]["off"] = [block() for _ in range(pairs)]
        t.on()
        loop(step, steps)
        samples[t.name]["on"] = [block() for _ in range(pairs)]
        samples[t.name]["added"] = [statistics.median(samples[t.name]["on"]) -
                                    statistics.median(samples[t.name]["off"])]
    else:
        for k in range(pairs):
            for t in toggles[k % len(toggles):] + toggles[:k % len(toggles)]:
                off = block()
                t.on()
                on = block()
                t.off()
                t.settle()
                check_recorded(t, steps * per_step)
                s = samples[t.name]
                s["off"].append(off)
                s["on"].append(on)
                s["added"].append(on - off)
    return {name: {key: statistics.median(v) for key, v in s.items()} for name, s in samples.items()}


def measure_instructions(name, step, steps, toggles, per_step, cg):
    """Dumps labelled workload/config/state/pass/1|2 in the order off, on, on,
    off (pass a, b), so that a drift of the process's own cost over time
    cancels in the average; the parent turns them into instructions per call."""
    # 'loaded' cannot switch back: off, off, on, on (its drift does not cancel)
    order = ((("off", "a"), ("off", "b"), ("on", "a"), ("on", "b")) if group == "loaded" else
             (("off", "a"), ("on", "a"), ("on", "b"), ("off", "b")))
    for t in toggles:
        for state, label in order:
            if state == "on" and label == "a":
                t.on()
            loop(step, 2)
            for k, n in (("1", steps), ("2", 2 * steps)):
                cg.lpbench_zero()
                loop(step, n)
                t.settle()
                cg.lpbench_dump(f"{name}/{t.name}/{state}/{label}/{k}".encode())
            if state == "on" and label == "b" and group != "loaded":
                t.off()
    return {t.name: {"calls": steps * per_step} for t in toggles}


def main():
    toggles = build_toggles()
    cg = None
    if mode == "callgrind":
        cg = ctypes.CDLL(os.environ["LPBENCH_CALLGRIND"])
        if not cg.lpbench_under_valgrind():
            raise SystemExit("callgrind mode outside valgrind")
    results = {}
    instrumenting = False
    for name in workloads:
        active = [t for t in toggles if name in (t.workloads or ["add", "dit", "new-shapes"])]
        if not active:
            continue
        step, per_step = workload_step(name)
        steps = max(1, calls_of[name] // per_step)
        if group == "main" and lingprobe and name != "module":
            check_call_count(step, per_step)
        for t in active:  # warm-up of every state: first sightings, allocator, profiler set-up
            if group != "loaded":
                t.on()
                loop(step, max(20, steps // 4))
                t.off()
                t.settle()
        loop(step, max(20, steps // 4))
        if mode == "wall":
            results[name] = measure_wall(step, steps, active, per_step)
        else:
            if not instrumenting:
                cg.lpbench_start_instrumentation()
                instrumenting = True
            results[name] = measure_instructions(name, step, steps, active, per_step, cg)
    dropped = lingprobe.stats()["dropped"] if lingprobe else 0
    if lingprobe:
        lingprobe.finalize()
    shutil.rmtree(out, ignore_errors=True)
    print(json.dumps({"results": results, "dropped": dropped}))


main()
