"""Issue 16: reading a run without scripts. `lingprobe trace` (a Perfetto /
Chrome JSON trace) and the audit's rank view, on a real 4-rank reference run
and on malformed input (`lingprobe diff`: test_diff.py). Files only: none of
these commands loads torch."""
import collections
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

from conftest import free_port

import metadata
from test_reference_workload import reference_run

ROOT = pathlib.Path(__file__).resolve().parents[2]
STRAGGLER_JOB = ROOT / "tests" / "integration" / "straggler_job.py"


def strict_json(text):
    """JSON as the trace-event readers take it: NaN and Infinity are not JSON."""
    def refuse(name):
        raise ValueError(f"bare {name} in the trace")
    return json.loads(text, parse_constant=refuse)


def trace(cli, run_dir, *args, expect_rc=0):
    out = pathlib.Path(run_dir) / "reports" / f"trace{abs(hash(args))}.json"
    p = subprocess.run([cli, "trace", str(run_dir), "-o", str(out), *args], capture_output=True, text=True, timeout=300)
    assert p.returncode == expect_rc, p.stderr
    return (strict_json(out.read_text()) if expect_rc == 0 else None), p.stderr


def check_trace_format(doc):
    """Every rule of the trace-event format the trace relies on; returns the call slices by (pid, tid)."""
    assert set(doc) >= {"traceEvents", "displayTimeUnit"}
    events = doc["traceEvents"]
    process_names, thread_names = {}, set()
    slices = collections.defaultdict(list)
    for i, e in enumerate(events):
        assert e["ph"] in ("X", "M", "i"), e
        assert isinstance(e["pid"], int) and e["pid"] > 0
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name"), e
            if e["name"] == "process_name":
                process_names[e["pid"]] = e["args"]["name"]
            if e["name"] == "thread_name":
                assert isinstance(e["tid"], int) and 0 < e["tid"] < 2**31
                thread_names.add((e["pid"], e["tid"]))
            continue
        assert isinstance(e["tid"], int) and 0 < e["tid"] < 2**31
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e  # microseconds
        assert isinstance(e["name"], str) and isinstance(e["cat"], str) and isinstance(e["args"], dict)
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
            slices[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"], i, e))
        else:
            assert e["s"] == "t"
    used = {(e["pid"], e["tid"]) for e in events if e["ph"] != "M"}
    assert {pid for pid, _ in used} <= set(process_names), "a process without its process_name"
    assert used <= thread_names, "a thread without its thread_name"
    # Complete slices on one thread nest: each lies inside the one open around it, or after it.
    for key, group in slices.items():
        stack = []
        for start, end, _, e in sorted(group, key=lambda s: (s[0], -s[1], s[2])):
            while stack and stack[-1][1] <= start:
                stack.pop()
            if stack:
                assert end <= stack[-1][1], f"{key}: {e['name']} [{start}, {end}] overlaps {stack[-1][3]['name']} " \
                                            f"[{stack[-1][0]}, {stack[-1][1]}] without nesting"
            stack.append((start, end, _, e))
    return slices


@pytest.fixture(scope="module")
def nested_run(build_dir, tmp_path_factory):
    """The reduced-width CPU reference run, 4 ranks, every op and every nested call recorded, with snapshots."""
    out = tmp_path_factory.mktemp("reading") / "nested"
    reference_run(build_dir, out, "--device", "cpu", "--scale", "small", "--select", "all", port=free_port(),
                  LINGPROBE_NESTED="1")
    return out


def test_trace_of_a_four_rank_run_keeps_every_format_rule(cli, nested_run):
    doc, err = trace(cli, nested_run)
    slices = check_trace_format(doc)
    files = metadata.files(nested_run)
    headers = [metadata.read(f)[0] for f in files]
    names = sorted(e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "process_name")
    assert names == sorted(f"rank {h['rank']} (pid {h['pid']})" for h in headers)
    # Every call record became one slice, at its own time on the shared clock, in microseconds.
    base = min(h["start_unix_ns"] for h in headers)
    by_seq = {}
    for (pid, tid), group in slices.items():
        for start, end, _, e in group:
            by_seq[(pid, e["args"]["seq"])] = e
    n_calls = n_nested = n_snapshots = 0
    for f, h in zip(files, headers):
        sigs = {}
        for r in metadata.stream(f):
            if r["kind"] == "signature":
                sigs[r["id"]] = json.loads(r["signature_json"], parse_constant=lambda c: c)
            elif r["kind"] == "snapshot":
                n_snapshots += 1
            elif r["kind"] == "call":
                n_calls += 1
                n_nested += r["depth"] > 0
                e = by_seq[(h["pid"], r["seq"])]
                ns = r["t0_ns"] - h["start_mono_ns"] + h["start_unix_ns"] - base
                assert e["ts"] == pytest.approx(ns / 1000, abs=5e-4) and e["tid"] == r["tid"]
                assert e["dur"] == pytest.approx((r["t1_ns"] - r["t0_ns"]) / 1000, abs=5e-4)
                assert e["name"] == sigs[r["id"]]["op"] and e["cat"] == sigs[r["id"]]["stage"]
                assert e["args"]["depth"] == r["depth"] and len(e["args"]["sha256"]) == 64
    assert sum(len(g) for g in slices.values()) == n_calls and n_nested > 1000
    assert doc["otherData"]["slices"] == n_calls
    # Nested records are written end-first; in the trace each follows the call it ran inside.
    for group in slices.values():
        order = sorted(group, key=lambda s: s[2])
        open_at = []
        for start, end, _, e in order:
            depth = e["args"]["depth"]
            if depth:
                parents = [p for p in open_at if p[3]["args"]["depth"] == depth - 1 and p[0] <= start and end <= p[1]]
                assert parents, f"{e['name']} (depth {depth}, seq {e['args']['seq']}) comes before its parent"
            open_at.append((start, end, _, e))
            if len(open_at) > 64:
                open_at = [p for p in open_at if p[1] >= start]
    # Snapshots are marked where their call ran; the ranks' clocks line up (they start together).
    snaps = [e for e in doc["traceEvents"] if e["ph"] == "i"]
    assert len(snaps) == n_snapshots > 0
    for s in snaps:
        call = by_seq[(s["pid"], s["args"]["seq"])]
        assert s["ts"] == call["ts"] and s["tid"] == call["tid"] and call["args"]["snapshot"] == s["args"]["path"]
        assert (nested_run / s["args"]["path"]).exists()
    first_dit = {}
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["cat"] == "dit":
            first_dit[e["pid"]] = min(first_dit.get(e["pid"], e["ts"]), e["ts"])
    # On one clock: ranks placed on another origin (unix against monotonic time) would stand decades apart; 4 ranks
    # sharing 2 cores start their first DiT call seconds apart at most.
    assert len(first_dit) == 4 and max(first_dit.values()) - min(first_dit.values()) < 10e6
    assert "4 process(es)" in err and "ui.perfetto.dev" in err


def test_trace_filters_by_rank_time_and_count(cli, nested_run):
    full, _ = trace(cli, nested_run)
    xs = [e for e in full["traceEvents"] if e["ph"] == "X"]
    t0, t1 = min(e["ts"] for e in xs), max(e["ts"] + e["dur"] for e in xs)
    one, _ = trace(cli, nested_run, "--ranks", "1")
    check_trace_format(one)
    # The shared clock starts at the run's first process start whichever ranks are drawn.
    (pid,) = {e["pid"] for e in one["traceEvents"]}
    assert [e["ts"] for e in one["traceEvents"] if e["ph"] == "X"] == [e["ts"] for e in xs if e["pid"] == pid]
    assert [e["args"]["name"] for e in one["traceEvents"] if e["name"] == "process_name"][0].startswith("rank 1 ")
    assert len({e["pid"] for e in one["traceEvents"]}) == 1
    lo, hi = (t0 + (t1 - t0) * 0.4) / 1e6, (t0 + (t1 - t0) * 0.5) / 1e6
    window, err = trace(cli, nested_run, "--from", f"{lo}s", "--to", f"{hi * 1000}ms")
    check_trace_format(window)
    kept = [e for e in window["traceEvents"] if e["ph"] == "X"]
    assert 0 < len(kept) < len(xs)
    assert all(e["ts"] <= hi * 1e6 + 1e-3 and e["ts"] + e["dur"] >= lo * 1e6 - 1e-3 for e in kept)
    assert window["otherData"]["outside_from_to"] == len(xs) - len(kept)
    capped, err = trace(cli, nested_run, "--max-events", "500")
    check_trace_format(capped)
    assert sum(e["ph"] == "X" for e in capped["traceEvents"]) == 500
    assert capped["otherData"]["left_out_by_max_events"] == len(xs) - 500 and "--max-events" in err


def write_run(run_dir, records, *, name="metadata_rank0_pid100.jsonl", raw=None):
    (run_dir / "metadata").mkdir(parents=True, exist_ok=True)
    text = raw if raw is not None else "".join(json.dumps(r, separators=(",", ":"), allow_nan=True) + "\n" for r in records)
    (run_dir / "metadata" / name).write_text(text)


def header(rank=0, world=1, pid=100, run_id="synthetic", **extra):
    h = {"kind": "header", "format": "lingprobe.metadata/1", "run_id": run_id, "role": "rank" if world > 1 else "single",
         "rank": rank, "world_size": world, "pid": pid, "start_unix_ns": 1_700_000_000_000_000_000 + rank * 1000,
         "start_mono_ns": 5_000_000_000}
    h.update(extra)
    return h


def test_trace_writes_non_finite_scalars_as_strings(cli, tmp_path):
    sig = {"args": [{"dtype": "torch.float32", "shape": [4], "stride": [1]}, float("-inf")], "kwargs": {},
           "op": "aten.masked_fill.Scalar", "output": {"dtype": "torch.float32", "shape": [4], "stride": [1]},
           "stage": "dit"}
    sig_nan = dict(sig, args=[sig["args"][0], float("nan")])
    canon = [json.dumps(s, sort_keys=True, separators=(",", ":")) for s in (sig, sig_nan)]
    records = [header(), {"kind": "signature", "id": 0, "sha256": "a" * 64, "signature_json": canon[0]},
               {"kind": "signature", "id": 1, "sha256": "b" * 64, "signature_json": canon[1]},
               {"depth": 0, "id": 0, "kind": "call", "seq": 0, "t0_ns": 5_000_001_000, "t1_ns": 5_000_002_500, "tid": 100},
               {"depth": 0, "id": 1, "kind": "call", "seq": 1, "t0_ns": 5_000_003_000, "t1_ns": 5_000_004_000, "tid": 100},
               {"kind": "counts", "final": True, "calls": {"0": 1, "1": 1}, "dropped": {}}]
    write_run(tmp_path, records)
    assert "-Infinity" in canon[0] and "NaN" in canon[1]
    doc, _ = trace(cli, tmp_path)
    check_trace_format(doc)
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert [e["args"]["scalars"] for e in xs] == [["-Infinity"], ["NaN"]]
    assert [(e["ts"], e["dur"]) for e in xs] == [(1.0, 1.5), (3.0, 1.0)]  # microseconds from the process start


def test_trace_draws_a_timed_call_beside_its_thread(cli, tmp_path):
    """A key's timed call (a kernel_timing record) is a slice on the thread's window track with its kernels, and its
    call slice says so. Before, the trace drew counter windows only: a timed call did not appear."""
    sig = {"args": [{"dtype": "torch.bfloat16", "shape": [64, 64], "stride": [64, 1]}] * 2, "kwargs": {},
           "op": "aten.mm.default", "output": {"dtype": "torch.bfloat16", "shape": [64, 64], "stride": [64, 1]},
           "stage": "dit"}
    canon = json.dumps(sig, sort_keys=True, separators=(",", ":"))
    kernels = [{"name": "gemm", "metrics": {"gpu__time_duration.sum": {"unit": "us", "value": 24.5}}}]
    records = [header(), {"kind": "signature", "id": 0, "sha256": "c" * 64, "signature_json": canon},
               {"depth": 0, "id": 0, "kind": "call", "seq": 0, "t0_ns": 5_000_001_000, "t1_ns": 5_000_002_000, "tid": 100},
               {"depth": 0, "id": 0, "kind": "call", "seq": 1, "t0_ns": 5_000_003_000, "t1_ns": 5_000_053_000, "tid": 100},
               {"kind": "kernel_timing", "id": 0, "seq": 1, "status": "passed", "window_s": 0.00005,
                "kernels": kernels},
               {"kind": "counts", "final": True, "calls": {"0": 2}, "dropped": {}}]
    write_run(tmp_path, records)
    doc, err = trace(cli, tmp_path)
    check_trace_format(doc)
    assert "1 timed call(s)" in err, err
    xs = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    calls = [e for e in xs if e["tid"] == 100]
    assert [e["args"].get("timed_call", False) for e in calls] == [False, True]
    (timed,) = [e for e in xs if e["name"] == "timed call (passed)"]
    assert timed["tid"] != 100 and (timed["ts"], timed["dur"]) == (3.0, 50.0)
    assert timed["args"]["kernels"] == kernels and timed["args"]["seq"] == 1
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert "counter windows and timed calls of thread 100" in names


def test_a_timed_call_without_kernels_settles_a_refused_timing(cli, tmp_path):
    """A key refused its timed call (evidence timing) holds it once a timed call passed, whether or not its op
    launched a kernel. Before, only a timed call with kernel times counted: a kernel-less op stayed 'missing'."""
    import hashlib
    sig = {"args": [{"dtype": "torch.float32", "shape": [4], "stride": [1]}], "kwargs": {}, "op": "aten.view.default",
           "output": {"dtype": "torch.float32", "shape": [4], "stride": [1]}, "stage": "dit"}
    canon = json.dumps(sig, sort_keys=True, separators=(",", ":"))
    inputs = json.dumps({k: v for k, v in sig.items() if k != "output"}, sort_keys=True, separators=(",", ":"))
    key = hashlib.sha256(inputs.encode()).hexdigest()
    records = [header(), {"kind": "signature", "id": 0, "sha256": hashlib.sha256(canon.encode()).hexdigest(),
                          "signature_json": canon},
               {"depth": 0, "id": 0, "kind": "call", "seq": 0, "t0_ns": 5_000_001_000, "t1_ns": 5_000_002_000, "tid": 100},
               {"depth": 0, "id": 0, "kind": "call", "seq": 1, "t0_ns": 5_000_003_000, "t1_ns": 5_000_004_000, "tid": 100},
               {"kind": "refusal", "call": 1, "evidence": "timing", "input_sha256": key, "op": "aten::view",
                "reason": "window_busy", "stage": "dit"},
               {"kind": "kernel_timing", "id": 0, "seq": 1, "status": "passed", "window_s": 0.00001, "kernels": []},
               {"kind": "counts", "final": True, "calls": {"0": 2}, "dropped": {}, "sampling": {"keys": 1}}]
    write_run(tmp_path, records)
    p = subprocess.run([cli, "audit", "--quiet", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert p.returncode in (0, 1), p.stderr
    (row,) = json.loads((tmp_path / "reports" / "coverage_audit.json").read_text())["sampling"]["refusals"]
    assert row["refused"] == {"timing": ["window_busy"]}, row
    assert row["timed_call"] is True and row["complete"] is True, row


def test_a_snapshot_of_a_rank_killed_before_its_first_flush_is_unrecorded_not_foreign(cli, tmp_path):
    """A rank killed after its snapshot writer renamed a file into place but before its metadata writer's first
    flush leaves an empty metadata file beside that snapshot. The audit lists the snapshot as unrecorded (its rank's
    file is empty), not as another run's evidence. Before, the fresh-clone CI's SIGKILL test failed on the warning."""
    write_run(tmp_path, [header(rank=0, world=2, pid=100), {"kind": "counts", "final": True, "calls": {}, "dropped": {}}],
              name="metadata_rank0_pid100.jsonl")
    (tmp_path / "metadata" / "metadata_rank1_pid101.jsonl").write_text("")
    (tmp_path / "snapshots").mkdir()
    (tmp_path / "snapshots" / "dit_rank1_fedcba9876543210.pt").write_bytes(b"PK whole")
    p = subprocess.run([cli, "audit", "--quiet", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "foreign_evidence" not in metadata.warning_codes(p.stderr), p.stderr
    report = json.loads((tmp_path / "reports" / "coverage_audit.json").read_text())
    assert report.get("foreign_evidence", []) == [], report["foreign_evidence"]
    assert [u["path"] for u in report["unrecorded_evidence"]] == ["snapshots/dit_rank1_fedcba9876543210.pt"]


def test_trace_refuses_malformed_input_clearly(cli, tmp_path):
    p = subprocess.run([cli, "trace", str(tmp_path / "nothing")], capture_output=True, text=True)
    assert p.returncode == 1 and "nothing' does not exist" in p.stderr and "nothing was written" in p.stderr
    bad = tmp_path / "bad"
    write_run(bad, None, raw=json.dumps(header()) + "\n{\"kind\":\"call\",\"id\":\n" +
              json.dumps({"kind": "counts", "final": True, "calls": {}, "dropped": {}}) + "\n")
    p = subprocess.run([cli, "trace", str(bad)], capture_output=True, text=True)
    assert p.returncode == 1 and "metadata_rank0_pid100.jsonl:2: malformed JSON" in p.stderr
    assert not (bad / "reports" / "trace.json").exists()
    clockless = tmp_path / "clockless"
    h = header()
    del h["start_mono_ns"]
    write_run(clockless, [h])
    p = subprocess.run([cli, "trace", str(clockless)], capture_output=True, text=True)
    assert p.returncode == 1 and "start_unix_ns/start_mono_ns" in p.stderr
    for args, what in ((["--ranks", "x"], "--ranks"), (["--from", "5parsecs"], "--from"), (["--max-events", "0"], "--max-events"),
                       (["--from", "2", "--to", "1"], "--to comes before --from")):
        p = subprocess.run([cli, "trace", str(clockless), *args], capture_output=True, text=True)
        assert p.returncode == 2 and what in p.stderr, p.stderr
    truncated = tmp_path / "truncated"  # killed mid-line: the last line is skipped with a warning
    write_run(truncated, None, raw=json.dumps(header()) + "\n" + '{"depth":0,"id":0,"kind":"ca')
    doc, err = trace(cli, truncated)
    assert metadata.warning_codes(err) == ["truncated_last_line", "nothing_to_draw"], err
    check_trace_format(doc)


# ---- rank view ---------------------------------------------------------------

def test_rank_view_of_the_four_rank_reference_run(nested_run, cli):
    report = json.loads((nested_run / "reports" / "coverage_audit.json").read_text())
    ranks = report["ranks"]
    assert ranks["expected"] == [0, 1, 2, 3] and ranks["with_files"] == [0, 1, 2, 3] and ranks["missing"] == []
    stages = {s["stage"]: s for s in ranks["stages"]}
    assert stages["output"]["ranks"] == [0] and stages["output"]["rank_local"] is True
    for name in ("dit", "vae"):
        assert stages[name]["ranks"] == [0, 1, 2, 3] and stages[name]["rank_local"] is False
        assert [t["rank"] for t in stages[name]["timing"]] == [0, 1, 2, 3]
        assert all(t["in_recorded_calls_seconds"] > 0 and t["span_seconds"] >= t["in_recorded_calls_seconds"] * 0.5
                   for t in stages[name]["timing"])
    assert ranks["collectives"].startswith("timed by the recorder for every top-level c10d call")
    assert any(t["collective_calls"] > 0 and t["in_collectives_seconds"] > 0 for t in stages["dit"]["timing"])
    summary = (nested_run / "reports" / "summary.md").read_text()
    assert "## Ranks" in summary and "rank-local" in summary and "| dit | 3 |" in summary
    # A rank's file gone: the view says which rank is missing.
    partial = nested_run.parent / "partial"
    shutil.copytree(nested_run / "metadata", partial / "metadata")
    next((partial / "metadata").glob("metadata_rank3_*.jsonl")).unlink()
    p = subprocess.run([cli, "audit", "-q", str(partial)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    view = json.loads((partial / "reports" / "coverage_audit.json").read_text())["ranks"]
    assert view["missing"] == [3] and "**missing: 3**" in (partial / "reports" / "summary.md").read_text()


def straggler_run(cli, tmp_path, ops, extra, sleep_s):
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1", LINGPROBE_RUN_ID="straggler", STRAGGLER_SLEEP_S=str(sleep_s))
    p = subprocess.run([cli, "run", "-o", str(out), "--ops", ops, *extra, "--", sys.executable, "-m",
                        "torch.distributed.run", "--nproc_per_node=2", f"--master_port={free_port()}", "--redirects=2",
                        "--tee=2", str(STRAGGLER_JOB)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    run = out / "straggler"
    p = subprocess.run([cli, "audit", "-q", str(run)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return run, json.loads((run / "reports" / "coverage_audit.json").read_text())


@pytest.mark.parametrize("ops,extra", [("", []), ("aten::mm", []), ("aten::mm", ["--set", "CALL_RECORDS=0"]),
                                       ("aten::mm", ["--set", "CALL_TIMES=0"])],
                         ids=["every-op", "mm-only", "mm-only-no-call-records", "mm-only-no-call-times"])
def test_rank_view_finds_the_straggler_when_calls_are_equal(cli, tmp_path, ops, extra):
    """Collectives are timed whatever the op selection, with or without call records or their host times (the
    counts record)."""
    run, report = straggler_run(cli, tmp_path, ops, extra, 0.08)
    calls = [r for f in metadata.files(run) for r in metadata.read(f) if r["kind"] == "call"]
    assert bool(calls) == ("CALL_RECORDS=0" not in extra)
    # CALL_TIMES=0: the records keep ids, order and depth, without the clock reads; the rank view has no spans
    assert not calls or all(r["t0_ns"] == r["t1_ns"] == 0 for r in calls) == ("CALL_TIMES=0" in extra), calls[:2]
    if "CALL_TIMES=0" in extra:  # the trace says why it has no call slices
        p = subprocess.run([cli, "trace", str(run)], capture_output=True, text=True)
        assert p.returncode == 0 and f"{len(calls)} call record(s) without host times" in p.stderr, p.stderr
    assert report["ranks"]["collectives"].startswith("timed by the recorder for every top-level c10d call")
    for f in metadata.files(run):
        last = [r for r in metadata.read(f) if r["kind"] == "counts"][-1]
        assert last["collectives"]["work"]["calls"] == 6, last  # 6 all_reduce
    (stage,) = [s for s in report["ranks"]["stages"] if s["stage"] == "work"]
    mm = [r for r in report["rows"] if r["signature"]["op"] == "aten.mm.default"]
    assert mm and all(r["calls_by_rank"] == {"0": 6, "1": 6} for r in mm)  # equal by construction
    timing = {t["rank"]: t for t in stage["timing"]}
    assert timing[0]["in_collectives_seconds"] > timing[1]["in_collectives_seconds"] + 0.3  # 6 x 80 ms
    assert stage["straggler"]["rank"] == 1 and stage["straggler"]["by"] == "least time waiting in collectives"
    assert (timing[0]["span_seconds"] is None) == ("CALL_RECORDS=0" in extra or "CALL_TIMES=0" in extra)
    if not ops:
        relu = [d for d in stage["differing"] if d["signature"].startswith("aten.relu.default")]
        assert len(relu) == 1 and relu[0]["missing_on_ranks"] == [0] and relu[0]["calls_by_rank"] == {"0": 0, "1": 1}
    summary = (run / "reports" / "summary.md").read_text()
    assert "rank 1 waits least in collectives" in summary


def test_rank_view_names_no_straggler_when_the_ranks_are_balanced(cli, tmp_path):
    run, report = straggler_run(cli, tmp_path, "", [], 0)
    (stage,) = [s for s in report["ranks"]["stages"] if s["stage"] == "work"]
    waits = [t["in_collectives_seconds"] for t in stage["timing"]]
    print(f"\nbalanced waits in collectives: {waits}, gap {max(waits) - min(waits):.4f} s")
    assert stage["straggler"] is None, stage["timing"]
    assert all(t["in_collectives_seconds"] is not None for t in stage["timing"])
    summary = (run / "reports" / "summary.md").read_text()
    work = summary[summary.index("- stage `work`"):]
    assert "Straggler" not in work[:work.index("\n- stage") if "\n- stage" in work else work.index("Wall time")]
