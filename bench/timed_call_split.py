#!/usr/bin/env python3
"""Where a timed call's host time goes on the op's thread (issue 26's fidelity gate).

    python3 bench/timed_call_split.py METADATA.jsonl TRACE.json[.gz]

METADATA.jsonl: a run under lingprobe with LINGPROBE_PROFILE=1 (the gate's program, tests/python/
test_third_party_gpu.py keeps it with LPTEST_KEEP); TRACE: the same program unprofiled under torch.profiler. The
top-level calls are matched by order as `lingprobe validate --against-trace` matches them. For each timed call
(a passed kernel_timing record) it prints the op thread's split of the call (open: claiming the window and
CUPTI's begin, joined or started a session; stop: the launches taken and the event recorded; window: open to
stop), the call's own host time (its call record's t1 - t0, which excludes open and stop), and the host time from
the previous top-level call's start to this one's, beside the same figures of the same call in the trace.
"""
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_shim"))
from lingprobe.against_trace import align, aten_name, load_json, pair_threads, trace_calls  # noqa: E402


def run_top_calls(metadata):
    """The busiest thread's top-level calls [(op, seq, t0_ns, t1_ns)], and the kernel_timing records by seq."""
    names, calls, timings = {}, {}, {}
    for line in Path(metadata).read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        kind = r.get("kind")
        if kind == "signature":
            names[r["id"]] = json.loads(r["signature_json"])["op"]
        elif kind == "call" and r["depth"] == 0:
            calls.setdefault(r["tid"], []).append((r["id"], r["seq"], r["t0_ns"], r["t1_ns"]))
        elif kind == "kernel_timing" and r.get("status") == "passed" and r.get("kernels"):
            timings.setdefault(r["seq"], r)
    busiest = max(calls.values(), key=len)
    return [(aten_name(names.get(i, "?")), seq, t0, t1) for i, seq, t0, t1 in busiest], timings


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x):
    return "-" if x is None else f"{x:.1f}"


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    calls, timings = run_top_calls(argv[0])
    threads, _ = trace_calls(load_json(argv[1]))
    ((_, top),) = pair_threads([calls], threads)
    match = dict(align([c[0] for c in calls], [c["name"] for c in top]))
    rows = []
    for i, (op, seq, t0, t1) in enumerate(calls):
        t = timings.get(seq)
        if t is None or i == 0:
            continue
        j = match.get(i)
        traced = top[j] if j is not None else None
        before = top[match[i - 1]] if traced is not None and match.get(i - 1) is not None else None
        rows.append({"op": op, "seq": seq, "joined": t.get("joined_session"), "open_us": t.get("open_us"),
                     "stop_us": t.get("stop_us"), "window_us": t["window_s"] * 1e6, "call_us": (t1 - t0) / 1e3,
                     "trace_call_us": traced["end"] - traced["ts"] if traced else None,
                     "start_to_start_us": (t0 - calls[i - 1][2]) / 1e3,
                     "trace_start_to_start_us": traced["ts"] - before["ts"] if before else None,
                     "records_wait_us": t.get("records_wait_us"), "flushes": t.get("flushes"),
                     "forced": t.get("forced_flush")})
    print("| op | seq | session | open us | stop us | window us | call us (trace) | previous call's start to this "
          "one's, us (trace) | writer: records' wait us (flushes, forced) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['op']} | {r['seq']} | {'joined' if r['joined'] else 'started'} | {fmt(r['open_us'])} | "
              f"{fmt(r['stop_us'])} | {fmt(r['window_us'])} | {fmt(r['call_us'])} ({fmt(r['trace_call_us'])}) | "
              f"{fmt(r['start_to_start_us'])} ({fmt(r['trace_start_to_start_us'])}) | {fmt(r['records_wait_us'])} "
              f"({r['flushes'] if r['flushes'] is not None else '-'}{', forced' if r['forced'] else ''}) |")
    for label, pick in (("started a session", lambda r: not r["joined"]), ("joined one", lambda r: r["joined"])):
        sel = [r for r in rows if pick(r)]
        print(f"\n{label}: {len(sel)} calls; median open {fmt(median(r['open_us'] for r in sel))} us, stop "
              f"{fmt(median(r['stop_us'] for r in sel))} us, window {fmt(median(r['window_us'] for r in sel))} us, "
              f"call {fmt(median(r['call_us'] for r in sel))} us (trace {fmt(median(r['trace_call_us'] for r in sel))}"
              f"), start to start {fmt(median(r['start_to_start_us'] for r in sel))} us (trace "
              f"{fmt(median(r['trace_start_to_start_us'] for r in sel))})")
    waits = [r for r in rows if r["records_wait_us"] is not None]
    if waits:
        print(f"\nthe writer: median records' wait {fmt(median(r['records_wait_us'] for r in waits))} us, "
              f"{sum(r['flushes'] for r in waits)} flushes in all, {sum(1 for r in waits if r['forced'])} of "
              f"{len(waits)} calls forced")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
