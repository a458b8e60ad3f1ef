"""`lingprobe audit` as users run it, on metadata files in lingprobe's own
format: the seed audit reproduced from files, robustness, and a 1 GB input."""
import hashlib
import json
import os
import subprocess
import sys
import time

import pytest

import metadata


def header(rank, pid, world_size=4, run_id="run-seed", fmt="lingprobe.metadata/1"):
    return {"kind": "header", "format": fmt, "run_id": run_id, "role": "rank", "rank": rank,
            "world_size": world_size, "local_rank": rank, "pid": pid, "host": "h", "torch_version": "2.11.0",
            "lingprobe_version": "0.1.0", "start_unix_ns": 0, "start_mono_ns": 0, "config": {}}


def canonical(sig):
    return json.dumps(sig, sort_keys=True, separators=(",", ":"))


def write_file(path, lines, tail=""):
    with open(path, "w") as f:
        for rec in lines:
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
        f.write(tail)


def audit(cli, *args):
    return subprocess.run([cli, "audit", *map(str, args)], capture_output=True, text=True, timeout=600)


@pytest.fixture
def seed_run(tmp_path, seed_audit):
    """For every seed row, that row's calls_by_rank, each rank split over two
    pids' files (as in the seed's own sources), file-local ids differing."""
    meta = tmp_path / "metadata"
    meta.mkdir()
    for rank in range(4):
        for part, pid in enumerate((1000 + rank, 2000 + rank)):
            rows = [r for r in seed_audit["rows"] if str(rank) in r["calls_by_rank"]]
            if part == 1:
                rows = list(reversed(rows))
            lines = [header(rank, pid)]
            counts = {}
            for i, row in enumerate(rows):
                n = row["calls_by_rank"][str(rank)]
                share = n // 2 if part == 0 else n - n // 2
                lines.append({"kind": "signature", "id": i, "sha256": row["signature_sha256"],
                              "signature_json": canonical(row["signature"])})
                if share:
                    counts[str(i)] = share
                lines.append({"kind": "call", "id": i, "seq": i, "tid": pid, "depth": 0, "t0_ns": 1, "t1_ns": 2})
            lines.append({"kind": "counts", "final": False, "calls": {k: 1 for k in counts}, "dropped": {}})
            lines.append({"kind": "counts", "final": True, "calls": counts, "dropped": {}})
            write_file(meta / f"metadata_rank{rank}_pid{pid}.jsonl", lines)
    return tmp_path


def test_seed_audit_reproduced_from_lingprobe_files(cli, seed_run, seed_audit):
    p = audit(cli, seed_run)
    assert p.returncode == 0, p.stderr
    report = json.loads((seed_run / "reports" / "coverage_audit.json").read_text())
    assert list(report)[:5] == ["status", "scope", "stages", "rows", "sources"]
    assert report["status"] == seed_audit["status"]
    strip = lambda st: {k: st[k] for k in ("stage", "distinct_signatures", "recorded_calls")}
    assert [strip(s) for s in report["stages"]] == [strip(s) for s in seed_audit["stages"]]
    assert [s["recorded_calls"] for s in report["stages"]] == [163200, 20, 7984]
    keys = ("signature", "signature_sha256", "calls", "calls_by_rank")
    assert [{k: r[k] for k in keys} for r in report["rows"]] == [{k: r[k] for k in keys} for r in seed_audit["rows"]]
    assert list(report["rows"][0])[:5] == list(seed_audit["rows"][0])
    assert len(report["sources"]) == 8 and all(s["path"].startswith("metadata/") for s in report["sources"])
    assert (seed_run / "reports" / "summary.md").read_text() in p.stdout
    # FLOPs: every seed op has a formula; to() is data movement
    assert all(r["flops_per_call"] is not None for r in report["rows"])
    assert {r["flops_per_call"] for r in report["rows"] if r["signature"]["op"] == "aten.to.dtype"} == {0}
    cov = report["coverage"]["counters"]
    assert cov["by_calls"] == {"covered": 0, "total": 171204, "fraction": 0.0}
    assert cov["by_measured_time_us"]["fraction"] is None  # nothing measured yet


def test_counters_evidence_is_what_the_run_names(cli, seed_run, seed_audit):
    row = seed_audit["rows"][0]
    prof = seed_run / "profiles" / f"dit_rank0_{row['signature_sha256'][:16]}"
    prof.mkdir(parents=True)
    (prof / "kernels.json").write_text(json.dumps(
        [{"id": "0", "name": "k", "metrics": {"gpu__time_duration.sum": {"value": 292.448, "unit": "us"}}}]))
    (prof / "manifest.json").write_text(json.dumps({"kernels.json": "..."}))
    manifest_sha = hashlib.sha256((prof / "manifest.json").read_bytes()).hexdigest()
    # not named by any record: foreign, not counted
    p = audit(cli, seed_run, "--quiet")
    report = json.loads((seed_run / "reports" / "coverage_audit.json").read_text())
    assert p.returncode == 0 and report["coverage"]["counters"]["by_calls"]["covered"] == 0
    assert [e["path"] for e in report["foreign_evidence"]] == [f"profiles/{prof.name}"]
    # named by rank 0's record with the manifest's SHA-256: counted
    f = seed_run / "metadata" / "metadata_rank0_pid1000.jsonl"
    sid = next(r["id"] for r in map(json.loads, f.read_text().splitlines())
               if r["kind"] == "signature" and r["sha256"] == row["signature_sha256"])
    with open(f, "a") as fh:
        fh.write(json.dumps({"kind": "profile", "id": sid, "seq": 7, "path": f"profiles/{prof.name}",
                             "sha256": manifest_sha, "status": "passed", "window_s": 1.5,
                             "lock_wait_s": 0.25}) + "\n")
    p = audit(cli, seed_run, "--quiet")
    assert p.returncode == 0, p.stderr
    report = json.loads((seed_run / "reports" / "coverage_audit.json").read_text())
    r0 = report["rows"][0]
    assert r0["same_structural_signature_ncu_inputs"][0]["input"] == f"profiles/{prof.name}"
    assert r0["kernel_time_us_per_call"] == 292.448 and report["foreign_evidence"] == []
    # the window's stall, per rank, in the report and the summary
    assert report["counter_windows"]["by_rank"] == [
        {"rank": 0, "windows": 1, "by_status": {"passed": 1}, "window_seconds_total": 1.5,
         "lock_wait_seconds_total": 0.25, "max_window_seconds": 1.5, "timing_windows": 0,
         "timing_seconds_total": 0.0, "stall_seconds_total": 1.5}]
    summary = (seed_run / "reports" / "summary.md").read_text()
    assert "## Counter windows: each rank's stall" in summary and "| 0 | 1 | 1.50 | 1.50 | 0.25 | 1.50 | passed 1 |" in summary
    dit = report["stages"][0]
    assert dit["signatures_with_prior_ncu_input"] == 1 and dit["calls_with_structurally_matching_prior_input"] == 96000
    assert dit["coverage"]["counters"]["by_calls"]["covered"] == 96000
    # altered afterwards: rejected
    (prof / "manifest.json").write_text("{}")
    p = audit(cli, seed_run, "--quiet")
    report = json.loads((seed_run / "reports" / "coverage_audit.json").read_text())
    assert report["coverage"]["counters"]["by_calls"]["covered"] == 0
    assert report["rejected_evidence"][0]["path"] == f"profiles/{prof.name}"


def test_truncated_last_line_is_a_warning(cli, seed_run):
    f = sorted((seed_run / "metadata").glob("*.jsonl"))[0]
    with open(f, "a") as fh:
        fh.write('{"kind":"call","id":0,"se')
    p = audit(cli, seed_run, "--quiet")
    assert p.returncode == 0, p.stderr
    (line,) = [l for l in p.stderr.splitlines() if "warning" in l]
    assert metadata.warning_codes(line) == ["truncated_last_line"] and f.name in line, p.stderr
    report = json.loads((seed_run / "reports" / "coverage_audit.json").read_text())
    assert metadata.report_warning_codes(report) == ["truncated_last_line"]


def test_malformed_line_is_an_error_and_writes_nothing(cli, seed_run):
    f = sorted((seed_run / "metadata").glob("*.jsonl"))[1]
    lines = f.read_text().splitlines(True)
    lines[2] = '{"kind":"call","id":\n'
    f.write_text("".join(lines))
    p = audit(cli, seed_run)
    assert p.returncode == 1
    assert f"{f.name}:3:" in p.stderr and "nothing was written" in p.stderr
    assert not (seed_run / "reports").exists()


def test_empty_file_is_skipped_with_a_warning(cli, seed_run):
    (seed_run / "metadata" / "metadata_rank0_pid9.jsonl").write_text("")
    p = audit(cli, seed_run, "--quiet")
    assert p.returncode == 0 and metadata.warning_codes(p.stderr) == ["empty_file"], p.stderr


def test_mixed_runs(cli, seed_run):
    write_file(seed_run / "metadata" / "metadata_rank0_pid7.jsonl", [header(0, 7, run_id="other")])
    p = audit(cli, seed_run, "--quiet")
    assert p.returncode == 1 and "2 launches (run_id 'other', 'run-seed')" in p.stderr and "--allow-mixed-runs" in p.stderr
    p = audit(cli, seed_run, "--quiet", "--allow-mixed-runs")
    assert p.returncode == 0 and "mixed_runs" in metadata.warning_codes(p.stderr), p.stderr
    assert "summing 2 launches" in p.stderr  # the message says how many
    write_file(seed_run / "metadata" / "metadata_rank0_pid8.jsonl", [header(0, 8, world_size=2)])
    p = audit(cli, seed_run, "--quiet", "--allow-mixed-runs")
    assert p.returncode == 1 and "world_size 2 disagrees" in p.stderr
    os.remove(seed_run / "metadata" / "metadata_rank0_pid8.jsonl")
    write_file(seed_run / "metadata" / "metadata_rank0_pid8.jsonl", [header(0, 8, fmt="other/2")])
    p = audit(cli, seed_run, "--quiet")
    assert p.returncode == 1 and "not lingprobe.metadata/1" in p.stderr


def test_one_gigabyte_in_bounded_memory(cli, tmp_path, seed_audit):
    """4 ranks x 256 MiB of call records; prints peak RSS and MB/s (the closing note quotes them)."""
    meta = tmp_path / "metadata"
    meta.mkdir()
    rows = seed_audit["rows"][:12]
    call = b'{"depth":0,"id":%d,"kind":"call","seq":123456789,"t0_ns":1795969433127297434,"t1_ns":1795969433127299434,"tid":4242}\n'
    block = b"".join(call % (i % len(rows)) for i in range(150000))
    per_file = 256 << 20
    reps = per_file // len(block) + 1
    for rank in range(4):
        with open(meta / f"metadata_rank{rank}_pid{rank + 1}.jsonl", "wb") as f:
            f.write((json.dumps(header(rank, rank + 1)) + "\n").encode())
            for i, row in enumerate(rows):
                f.write((json.dumps({"kind": "signature", "id": i, "sha256": row["signature_sha256"],
                                     "signature_json": canonical(row["signature"])}) + "\n").encode())
            for _ in range(reps):
                f.write(block)
            counts = {str(i): reps * 150000 // len(rows) for i in range(len(rows))}
            f.write((json.dumps({"kind": "counts", "final": True, "calls": counts, "dropped": {}}) + "\n").encode())
    total = sum(f.stat().st_size for f in meta.iterdir())
    assert total >= 1 << 30
    # The audit's own peak, through a small parent of its own: RUSAGE_CHILDREN here is the maximum over every
    # child this pytest ever had (an earlier test's 500 MB job failed this test when it ran first).
    t0 = time.monotonic()
    probe = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(p.returncode)")
    p = subprocess.run([sys.executable, "-c", probe, cli, "audit", str(tmp_path), "--quiet"], capture_output=True,
                       text=True, timeout=600)
    secs = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    peak_kib = int(p.stdout.split()[-1])
    print(f"\naudit of {total / 1e6:.0f} MB: {secs:.2f} s, {total / 1e6 / secs:.0f} MB/s, peak RSS {peak_kib / 1024:.0f} MiB")
    assert peak_kib < 256 * 1024, f"peak RSS {peak_kib} KiB"


@pytest.mark.parametrize("bad", [
    '{"depth":01,"id":0,"kind":"call","seq":1,"t0_ns":1,"t1_ns":2,"tid":3}',   # leading zero
    '{"depth":0,"id":0,"kind":"call","seq":1,"t0_ns":1,"t1_ns":2,"tid":3}x',   # trailing garbage
    '{"depth":0,"id":0,"kind":"call","seq":1,"t0_ns":1,"t1_ns":2,"tid":3',     # unclosed
    '{"depth":0,"id":-1,"kind":"call","seq":1,"t0_ns":1,"t1_ns":2,"tid":3}',  # negative id
    '[1,2,3]',
])
def test_malformed_call_lines_are_caught(cli, seed_run, bad):
    f = sorted((seed_run / "metadata").glob("*.jsonl"))[0]
    lines = f.read_text().splitlines(True)
    lines.insert(1, bad + "\n")
    f.write_text("".join(lines))
    p = audit(cli, seed_run, "--quiet")
    assert p.returncode == 1 and f"{f.name}:2:" in p.stderr, p.stderr


def test_a_record_missing_a_field_is_an_error_not_a_crash(cli, tmp_path):
    """Found by fuzz/fuzz_metadata_reader: a header without "rank" made simdjson throw through the reader
    and the audit died with std::terminate (SIGABRT)."""
    meta = tmp_path / "metadata"
    meta.mkdir()
    (meta / "metadata_rank0_pid1.jsonl").write_text(
        json.dumps({"kind": "header", "format": "lingprobe.metadata/1", "run_id": "r", "role": "rank",
                    "world_size": 1, "pid": 1}) + "\n")
    p = audit(cli, tmp_path)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "a record without a field it needs" in p.stderr and ":1:" in p.stderr


def test_a_nested_run_without_call_times_counts_its_top_level_flops(cli, tmp_path):
    """With NESTED=1 the audit counts the FLOPs of top-level calls only, told apart by their call records' depth.
    LINGPROBE_CALL_TIMES=0 writes those records without times, and they must count all the same: before, only timed
    records counted, and such a run had 0 FLOPs."""
    job = tmp_path / "job.py"
    job.write_text("import torch\nx = torch.randn(32, 32)\nfor _ in range(5):\n    torch.nn.functional.linear(x, x)\n")
    totals = {}
    for times in ("1", "0"):
        out = tmp_path / f"out-{times}"
        p = subprocess.run([cli, "run", "-o", str(out), "--set", "NESTED=1", "--set", f"CALL_TIMES={times}", "--",
                            sys.executable, str(job)], capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        (run,) = [d for d in out.iterdir() if d.is_dir() and not d.is_symlink()]
        assert audit(cli, "-q", run).returncode == 0
        report = json.loads((run / "reports" / "coverage_audit.json").read_text())
        (linear,) = [r for r in report["rows"] if r["signature"]["op"] == "aten.linear.default"]
        (stage,) = report["stages"]
        totals[times] = (stage["coverage"]["counters"]["by_flops"]["total"], 5 * linear["flops_per_call"])
    assert totals["0"] == totals["1"] and totals["0"][0] == totals["0"][1] > 0, totals
