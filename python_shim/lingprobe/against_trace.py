"""Inline kernel time against the real execution, call by call.

    lingprobe validate RUN_DIR --against-trace TRACE.json[.gz] [--min-kernel-us 20] [--tolerance 0.03]
                       [--rank R] [--noise-trace TRACE2.json[.gz]] [--min-share 0.01] [--json OUT]

RUN_DIR is a run recorded with LINGPROBE_PROFILE=1 (call records on, the
default). TRACE is torch.profiler's Chrome trace (`prof.export_chrome_trace`)
of the same program in a separate run without lingprobe. Top-level ATen calls
of one process (--rank, default 0, or the single process) are matched per
thread by order (each run thread paired with the trace thread whose calls
align best; difflib's matching blocks of the op names, so that calls only one
side has shift nothing), and each profiled call's inline kernels (kernels.json,
gpu__time_duration.sum) are set against the kernels that the same call
launched in the trace (CUPTI Activity: correlation id -> its launch -> the
top-level op around it), in launch order (by name where one run launched
a kernel the other did not). A key's timed call (kernel_timing records,
LINGPROBE_PROFILE_TIMING: its next call after the counters, timed by CUPTI
Activity alone) is set against the trace the same way. The gate: at least
90% of the kernels of at least --min-kernel-us in the trace are within
--tolerance, counting for each signature the call whose time the capability
report shows (its timed call where it has one, else its profiled call).
Each row also says how long the GPU idled before the kernel on each side
(a kernel started on an idle GPU can run several % longer): in the trace,
since the device's previous kernel ended; inline, from timed calls' GPU
clock times (gpu_start_ns, gpu_end_ns), when the calls before it back to
the previous kernel were timed too, else unknown.
Exit status 0 when the gate holds, 1 when it does not or nothing could be
compared, 2 on bad input. The difference between the two is the first call's
history (cold caches, autotuning, clocks), not only the measurement: both
sides are a key's first call in its process where the profiled call was, and
its second where the timed call was. --noise-trace, a second trace of the
same program without lingprobe, shows the method's own noise: the same
gated kernels in the two traces, and how many are within the tolerance of
each other (a gate the program's own spread cannot meet is no gate).
The signatures whose matched calls hold at least --min-share (default 1%) of
the trace's kernel time are listed with whether any process of the run has
their counters (`heavy_keys`, `heavy_keys_without_counters`): what dominates,
measured without lingprobe, and whether the capability report can place it."""
import argparse
import bisect
import difflib
import gzip
import json
import pathlib
import sys

TIME = "gpu__time_duration.sum"


class BadInput(Exception):
    pass


def load_json(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def run_calls(run_dir, rank=0):
    """The chosen rank's (or the single process's) top-level calls per thread, in order, as [op name, seq]; per seq
    its profile record; per seq the kernel_timing record whose time the report shows; and per seq every passed
    kernel_timing record (for the GPU's idle time before a kernel); and the signatures (sha256) with passed counters in
    any process of the run (claims give each key to one rank). A trace is one process: other ranks' and children's
    files are not paired with it."""
    if not run_dir.exists():
        from lingprobe._errors import missing_run_directory
        raise BadInput("error: " + missing_run_directory(run_dir))
    files = sorted((run_dir / "metadata").glob("*.jsonl"))
    if not files:
        raise BadInput(f"{run_dir} is not a run directory (no metadata/*.jsonl)")
    threads, profiles, timings, passed, first_seq, chosen, counter_shas = {}, {}, {}, {}, {}, None, set()
    for f in files:
        names, shas, header, calls, file_profiles, file_timings, timed_ids, file_passed = {}, {}, None, {}, {}, {}, \
            set(), {}
        with_counters = set()  # signature ids of this file's passed profiles
        for line in f.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a torn last line
            kind = r.get("kind")
            if kind == "header":
                header = r
            elif kind == "signature":
                names[r["id"]] = json.loads(r["signature_json"])["op"]
                shas[r["id"]] = r["sha256"]
            elif kind == "call" and r["depth"] == 0:
                calls.setdefault(r["tid"], []).append((r["id"], r["seq"]))
            elif kind == "profile":
                file_profiles[r["seq"]] = r
                if r.get("status") == "passed":
                    with_counters.add(r["id"])
            elif kind == "kernel_timing" and r.get("status") == "passed":
                file_passed[r["seq"]] = r
                if r.get("kernels") and r["id"] not in timed_ids:
                    file_timings[r["seq"]] = r  # the report's time: a signature's first timed call with kernels
                    timed_ids.add(r["id"])
        counter_shas |= {shas[i] for i in with_counters if i in shas}
        role = (header or {}).get("role", "single")
        if chosen is not None or role not in ("rank", "single") or (header or {}).get("rank", 0) != rank:
            continue
        chosen, profiles, timings, passed = f.name, file_profiles, file_timings, file_passed
        for tid, cs in calls.items():
            threads[tid] = [[aten_name(names.get(i, "?")), seq, shas.get(i)] for i, seq in cs]
            first_seq[tid] = cs[0][1]  # the process-wide sequence: in order also without host times (CALL_TIMES=0)
    if chosen is None:
        raise BadInput(f"{run_dir} has no metadata file of rank {rank} (--rank picks another)")
    if not any(threads.values()):
        raise BadInput(f"{run_dir} has no call records (LINGPROBE_CALL_RECORDS=0?): calls cannot be matched by order")
    return (chosen, [threads[t] for t in sorted(threads, key=lambda t: first_seq[t])], profiles, timings, passed,
            counter_shas)


def heavy_keys(matched_calls, trace, min_share, with_counters):
    """Each signature whose matched calls' kernels hold at least `min_share` of the trace's kernel time, and whether
    the run has its counters: the time of what dominates, measured without lingprobe."""
    total = sum(float(k["dur"]) for top in trace for c in top for k in c["kernels"])
    by_sha = {}
    for (op, _, sha), traced in matched_calls:
        if sha is not None:
            entry = by_sha.setdefault(sha, {"op": op, "signature_sha256": sha, "trace_us": 0.0})
            entry["trace_us"] += sum(float(k["dur"]) for k in traced["kernels"])
    heavy = [dict(e, share=e["trace_us"] / total, counters=e["signature_sha256"] in with_counters)
             for e in by_sha.values() if total > 0 and e["trace_us"] >= min_share * total]
    return sorted(heavy, key=lambda e: -e["trace_us"])


def aten_name(op):
    """aten.linear.default -> aten::linear (torch.profiler's name)."""
    parts = op.split(".")
    return parts[0] + "::" + parts[1] if len(parts) >= 2 else op


def trace_calls(trace):
    """Per thread: the top-level cpu_op events in order, each with the kernels it launched (launch order)."""
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    ops, launches, kernels = {}, {}, {}
    for e in events:
        if e.get("ph") != "X":
            continue
        cat = e.get("cat", "")
        # Kineto's traces tag ATen ops cpu_op; torch built without Kineto (Debian's 1.13) writes them untagged
        if cat == "cpu_op" or (not cat and e.get("pid") == "CPU functions"):
            ops.setdefault(e["tid"], []).append(e)
        elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            launches[e["args"]["correlation"]] = e
        elif cat == "kernel" and "correlation" in e.get("args", {}):
            kernels.setdefault(e["args"]["correlation"], []).append(e)
    threads = []
    for tid, evs in ops.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        top, end = [], -1.0
        for e in evs:
            # Whole-microsecond traces (torch without Kineto) round a parent's end onto its child's start: a call
            # starting exactly at the previous top-level call's end may be its child or the next call (an "edge"
            # call: validate reads it as nested when the run's sequence has no such call there).
            touching = top and e["ts"] == end and isinstance(e["ts"], int)
            if e["ts"] >= end:
                top.append({"name": e["name"], "ts": e["ts"], "end": e["ts"] + e["dur"], "kernels": [],
                            "edge": bool(touching)})
                end = e["ts"] + e["dur"]
        threads.append((tid, top))
    starts = {tid: [c["ts"] for c in top] for tid, top in threads}
    by_tid = dict(threads)
    for corr, ks in sorted(kernels.items()):
        launch = launches.get(corr)
        if launch is None or launch["tid"] not in by_tid:
            continue
        top = by_tid[launch["tid"]]
        i = bisect.bisect_right(starts[launch["tid"]], launch["ts"]) - 1
        if i >= 0 and launch["ts"] <= top[i]["end"]:
            top[i]["kernels"].extend(sorted(ks, key=lambda k: k["ts"]))
    threads.sort(key=lambda t: t[1][0]["ts"] if t[1] else float("inf"))
    note_idle_before([k for ks in kernels.values() for k in ks])
    return [top for _, top in threads if top], bool(kernels)


def note_idle_before(kernel_events):
    """Each kernel event's "idle_before_us": how long its device had no kernel running before it started (0 when
    another kernel still ran; absent for the device's first)."""
    by_device = {}
    for k in kernel_events:
        by_device.setdefault(k.get("args", {}).get("device"), []).append(k)
    for ks in by_device.values():
        ks.sort(key=lambda k: k["ts"])
        busy_until = None
        for k in ks:
            if busy_until is not None:
                k["idle_before_us"] = max(0.0, k["ts"] - busy_until)
            busy_until = max(busy_until or k["ts"], k["ts"] + float(k["dur"]))


def inline_idle_before(calls, i, n, inline, passed):
    """How long the GPU idled before kernel n of call i (us) by timed calls' GPU clock times: since the kernel
    before it in the call, or since the last kernel of the calls before it when each of them back to one that
    launched a kernel was timed; None when unknown."""
    start = inline[n].get("gpu_start_ns")
    if start is None:
        return None
    if n > 0:
        before = inline[n - 1].get("gpu_end_ns")
    else:
        before, j = None, i - 1
        while j >= 0 and before is None:
            timed = passed.get(calls[j][1])
            if timed is None:
                return None  # a call whose kernels are unknown came between
            ends = [k.get("gpu_end_ns") for k in timed.get("kernels", [])]
            if any(e is None for e in ends):
                return None
            before = max(ends) if ends else None
            j -= 1
    return None if before is None else max(0.0, (start - before) / 1e3)


def align(run_names, trace_names):
    """Pairs (i, j) of equal names, in order: difflib's matching blocks (the longest matching run, then recursively
    on either side of it), so that calls only one side has (the construction a trace did not cover, ops of a
    selective run) shift nothing. Not a true LCS; near it on programs that repeat the same call sequence."""
    matcher = difflib.SequenceMatcher(None, run_names, trace_names, autojunk=False)
    return [(blk.a + k, blk.b + k) for blk in matcher.get_matching_blocks() for k in range(blk.size)]


def kernel_pairs(inline, traced):
    """Index pairs: by launch order when both launched as many kernels, else kernels of equal names in order (a cast
    or a workspace kernel only one run launched is left out, the others still compared)."""
    if len(inline) == len(traced):
        return list(zip(range(len(inline)), range(len(traced))))
    return align([k["name"] for k in inline], [t["name"] for t in traced])


def compare_kernels(inline, traced, min_us, tolerance, idle_before=lambda n: None):
    """Rows for one call: inline kernels (kernels.json entries) against the trace's (events); `idle_before(n)`: the
    GPU's idle time before inline kernel n, where known."""
    rows = []
    for n, m in kernel_pairs(inline, traced):
        k, t = inline[n], traced[m]
        ours, real = kernel_us(k), float(t["dur"])
        if ours is None or real <= 0:
            continue  # no time on one side: nothing to set against
        rel = (ours - real) / real
        rows.append({"index": n, "kernel": k["name"][:80], "trace_kernel": t["name"][:80],
                     "inline_us": ours, "trace_us": real, "relative": rel,
                     "gated": real >= min_us, "within": abs(rel) <= tolerance,
                     "inline_idle_before_us": idle_before(n), "trace_idle_before_us": t.get("idle_before_us"),
                     "trace_index": m})
    return rows


def pair_threads(run_threads, trace_threads, probe=2000):
    """Each run thread (the busiest first) with the trace thread whose first calls align best with its own."""
    pairs, free = [], list(range(len(trace_threads)))
    for calls in sorted(run_threads, key=len, reverse=True):
        if not free:
            break
        names = [c[0] for c in calls[:probe]]
        best = max(free, key=lambda j: len(align(names, [c["name"] for c in trace_threads[j][:probe]])))
        free.remove(best)
        pairs.append((calls, trace_threads[best]))
    return pairs


def kernel_us(kernel):
    """A kernels.json entry's gpu__time_duration.sum in us, whatever its time unit; None when absent."""
    m = kernel.get("metrics", {}).get(TIME)
    if not m or m.get("value") is None:
        return None
    return m["value"] * {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
                         "s": 1e6, "second": 1e6}.get(m.get("unit", "us"), 1.0)


def inline_kernels(run_dir, seq, profiles, timings, timed_ids):
    """The call's inline kernels, where they came from, and whether the report shows that time: (None, ..) when
    the call was neither profiled (passed) nor timed."""
    if seq in timings:
        return timings[seq]["kernels"], "activity", True
    prof = profiles.get(seq)
    if not prof or prof.get("status") != "passed":
        return None, None, False
    kernels = load_json(run_dir / prof["path"] / "kernels.json")
    return (kernels["kernels"] if isinstance(kernels, dict) else kernels), "counters", prof["id"] not in timed_ids


def same_calls_in(first_threads, second_threads):
    """Each top-level call of the first trace's threads -> the same call in a second trace of the same program: the
    threads paired as a run's are with a trace's (pair_threads), then the calls by order. {id(call): call}."""
    tagged = [[(c["name"], c) for c in top] for top in first_threads]
    same = {}
    for calls, other in pair_threads(tagged, second_threads):
        same.update({id(calls[i][1]): other[j] for i, j in align([c[0] for c in calls], [c["name"] for c in other])})
    return same


def add_method_noise(report, row_calls, noise_path, tolerance):
    """The method's own noise: each row's trace kernel against the same kernel in NOISE, a trace of a second run of
    the same program without lingprobe (row["noise_relative"], None where the second trace has no such kernel),
    and report["noise"] over the gated rows. Where two runs without lingprobe differ by more than the tolerance,
    the gate cannot tell lingprobe's error from the program's own spread."""
    noise_threads, has_kernels = trace_calls(load_json(noise_path))
    if not noise_threads or (report["calls"] and not has_kernels):
        raise BadInput(f"{noise_path}: no cpu_op or no kernel events; record it as the first trace, with "
                       "activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]")
    same = same_calls_in({id(top): top for top, _ in row_calls}.values(), noise_threads)
    compared = within = 0
    for row, (top, j) in zip(report["calls"], row_calls):
        row["noise_relative"] = None
        other = same.get(id(top[j]))
        m = dict(kernel_pairs(top[j]["kernels"], other["kernels"])).get(row["trace_index"]) if other else None
        if m is None or float(other["kernels"][m]["dur"]) <= 0:
            continue
        first, second = float(top[j]["kernels"][row["trace_index"]]["dur"]), float(other["kernels"][m]["dur"])
        row["noise_relative"] = (first - second) / second
        if row["gated"]:
            compared += 1
            within += abs(row["noise_relative"]) <= tolerance
    report["noise"] = {"trace": str(noise_path), "gated_kernels": report["gated_kernels"], "found": compared,
                       "within": within, "fraction_within": within / compared if compared else None}


def validate(run_dir, trace_path, min_us=20.0, tolerance=0.03, rank=0, noise_path=None, min_share=0.01):
    fname, run_threads, profiles, timings, passed, counter_shas = run_calls(run_dir, rank)
    timed_ids = {t["id"] for t in timings.values()}
    trace, has_kernels = trace_calls(load_json(trace_path))
    if not trace:
        raise BadInput(f"{trace_path}: no cpu_op events (a torch.profiler Chrome trace with CPU and CUDA activities?)")
    if not has_kernels and any(p.get("status") == "passed" for p in profiles.values()):
        raise BadInput(f"{trace_path}: no kernel events; record it with activities=[ProfilerActivity.CPU, "
                       "ProfilerActivity.CUDA]")
    report = {"run": str(run_dir), "trace": str(trace_path), "file": fname, "min_kernel_us": min_us,
              "tolerance": tolerance, "threads": [], "calls": [], "kernel_count_mismatches": []}
    row_calls = []  # per row of report["calls"]: its trace thread and call index (for the method's noise)
    matched_calls = []  # (run call, trace call) of every matched pair
    for calls, top in pair_threads(run_threads, trace):
        pairs = align([c[0] for c in calls], [c["name"] for c in top])
        matched = {j for _, j in pairs}
        edges = {j for j, c in enumerate(top) if c["edge"] and j not in matched}  # children after all (trace_calls)
        if edges:
            top = [c for j, c in enumerate(top) if j not in edges]
            pairs = align([c[0] for c in calls], [c["name"] for c in top])
        report["threads"].append({"file": fname, "run_calls": len(calls), "trace_calls": len(top),
                                  "matched": len(pairs), "edge_calls_read_as_nested": len(edges)})
        for i, j in pairs:
            matched_calls.append((calls[i], top[j]))
            inline, source, reported = inline_kernels(run_dir, calls[i][1], profiles, timings, timed_ids)
            if inline is None:
                continue
            traced = top[j]["kernels"]
            if len(inline) != len(traced):
                report["kernel_count_mismatches"].append({"op": calls[i][0], "seq": calls[i][1], "inline": len(inline),
                                                          "trace": len(traced),
                                                          "compared": len(kernel_pairs(inline, traced))})
            idle = lambda n, i=i, inline=inline: inline_idle_before(calls, i, n, inline, passed)
            for row in compare_kernels(inline, traced, min_us, tolerance, idle):
                row["gated"] = row["gated"] and reported
                report["calls"].append({"op": calls[i][0], "seq": calls[i][1], "source": source,
                                        "reported": reported, **row})
                row_calls.append((top, j))
    gated = [r for r in report["calls"] if r["gated"]]
    report["gated_kernels"] = len(gated)
    report["within"] = sum(r["within"] for r in gated)
    report["fraction_within"] = report["within"] / len(gated) if gated else None
    report["gate"] = bool(gated) and report["within"] >= 0.9 * len(gated)
    report["min_share"] = min_share
    report["heavy_keys"] = heavy_keys(matched_calls, trace, min_share, counter_shas)
    report["heavy_keys_without_counters"] = sum(not k["counters"] for k in report["heavy_keys"])
    if noise_path is not None:
        add_method_noise(report, row_calls, noise_path, tolerance)
    return report


def print_report(rep, out=sys.stdout):
    for t in rep["threads"]:
        print(f"{t['file']}: {t['matched']} of {t['run_calls']} top-level calls matched by order "
              f"(the trace has {t['trace_calls']})", file=out)
    noise = "noise" in rep
    second = " trace against a 2nd trace |" if noise else ""
    print(f"\n| op | seq | time from | kernel | inline us | trace us | diff | gated (>= {rep['min_kernel_us']:g} us, "
          f"the report's time) | GPU idle before, us: inline / trace |{second}", file=out)
    print("|---|---|---|---|---|---|---|---|---|" + ("---|" if noise else ""), file=out)
    idle = lambda v: "?" if v is None else f"{v:.1f}"
    for r in rep["calls"]:
        print(f"| {r['op']} | {r['seq']} | {r['source']} | {r['kernel'][:48]} | {r['inline_us']:.2f} | "
              f"{r['trace_us']:.2f} | {100 * r['relative']:+.1f}% | {'yes' if r['gated'] else 'no'}"
              f"{' (within)' if r['within'] else ''} | {idle(r.get('inline_idle_before_us'))} / "
              f"{idle(r.get('trace_idle_before_us'))} |" + (f" {percent(r['noise_relative'])} |" if noise else ""),
              file=out)
    for m in rep["kernel_count_mismatches"]:
        print(f"{m['op']} (seq {m['seq']}) launched {m['inline']} kernel(s) inline, {m['trace']} in the trace: "
              f"{m['compared']} of the same names compared", file=out)
    if rep["fraction_within"] is None:
        print(f"\nno kernel of at least {rep['min_kernel_us']:g} us to compare", file=out)
    else:
        print(f"\n{rep['within']} of {rep['gated_kernels']} kernels >= {rep['min_kernel_us']:g} us within "
              f"{100 * rep['tolerance']:g}% ({100 * rep['fraction_within']:.1f}%): gate "
              f"{'passed' if rep['gate'] else 'failed'} (90%)", file=out)
    heavy = rep["heavy_keys"]
    print(f"{len(heavy) - rep['heavy_keys_without_counters']} of the {len(heavy)} signatures with at least "
          f"{100 * rep['min_share']:g}% of the trace's kernel time have counters", file=out)
    for k in heavy:
        if not k["counters"]:
            print(f"  without counters: {k['op']} {k['signature_sha256'][:16]} ({100 * k['share']:.1f}%)", file=out)
    if noise:
        n = rep["noise"]
        share = "-" if n["fraction_within"] is None else f"{100 * n['fraction_within']:.1f}%"
        print(f"the method's own noise: {n['found']} of the {n['gated_kernels']} gated kernels found in the second "
              f"run without lingprobe, {n['within']} of them within {100 * rep['tolerance']:g}% of the first's "
              f"({share}; {n['trace']})", file=out)


def percent(fraction):
    return "-" if fraction is None else f"{100 * fraction:+.1f}%"


def main(argv=None):
    ap = argparse.ArgumentParser(prog="lingprobe validate RUN_DIR --against-trace")
    ap.add_argument("run_dir", type=pathlib.Path)
    ap.add_argument("--against-trace", required=True, type=pathlib.Path)
    ap.add_argument("--min-kernel-us", type=float, default=20.0)
    ap.add_argument("--tolerance", type=float, default=0.03)
    ap.add_argument("--rank", type=int, default=0, help="the rank whose calls the trace's process made (default 0)")
    ap.add_argument("--noise-trace", type=pathlib.Path,
                    help="a second trace of the same program without lingprobe: shows the method's own noise")
    ap.add_argument("--min-share", type=float, default=0.01,
                    help="list the signatures with at least this share of the trace's kernel time (default 0.01)")
    ap.add_argument("--json", type=pathlib.Path)
    a = ap.parse_args(argv)
    try:
        rep = validate(a.run_dir, a.against_trace, a.min_kernel_us, a.tolerance, a.rank, a.noise_trace, a.min_share)
    except (BadInput, OSError, ValueError, KeyError) as e:
        print(f"lingprobe validate: {e}", file=sys.stderr)
        return 2
    print_report(rep)
    if a.json:
        a.json.write_text(json.dumps(rep, indent=1) + "\n")
    return 0 if rep["gate"] else 1


if __name__ == "__main__":
    sys.exit(main())
