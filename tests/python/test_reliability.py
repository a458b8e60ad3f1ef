"""Reliability (issue 15) as a host process meets it: killed at any instant,
ended by each signal, its disk full. Every test runs a real torch process
under LD_PRELOAD and then checks what it left on disk. Figures behind
docs/RELIABILITY.md are printed (pytest -s shows them). (Concurrency and load:
test_reliability_load.py.)"""
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
import zipfile

import pytest

import metadata

FLUSH_MS = 100

# A recording rank that never stops: steady calls, and a new signature (so a
# new snapshot) every 16 iterations, until it is killed.
FOREVER_JOB = textwrap.dedent("""
    import sys, torch
    xs = [torch.randn(n, 8) for n in range(1, 33)]
    print("ready", flush=True)
    i = 0
    while True:
        x = xs[i % 32]
        torch.add(x, x); torch.mul(x, 2.0); x.sum(1)
        if i % 16 == 0:
            torch.randn(i // 16 % 4000 + 1, 3).relu()
        i += 1
""")

# A fixed number of calls, then waiting for the end the test chooses.
COUNTED_JOB = textwrap.dedent("""
    import os, signal, sys, time
    if os.environ.get("JOB_USER_SIGTERM"):
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))  # the program's own handler, set before lingprobe's init
    import torch
    x = torch.ones(4, 4)
    for _ in range(1000):
        torch.add(x, x)
    end = sys.argv[1]
    print("done", flush=True)
    if end == "exit":
        sys.exit(3)
    if end == "wait":
        time.sleep(120)
""")


def base_env(tmp_path, build_dir, preload=True, **extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k not in ("PYTHONPATH", "LD_PRELOAD")}
    # SAMPLE_DEVICES=any: the jobs' CPU calls are snapshotted on a machine with a GPU too (the default leaves them to
    # GPU calls that never come)
    e.update(OMP_NUM_THREADS="1", LINGPROBE_OUT=str(tmp_path / "out"), LINGPROBE_FLUSH_INTERVAL_MS=str(FLUSH_MS),
             LINGPROBE_SAMPLE_DEVICES="any")
    e.update(extra)
    if preload:
        e["LD_PRELOAD"] = str(build_dir / "liblingprobe_preload.so")
    return e


def write_job(tmp_path, code, name):
    script = tmp_path / name
    script.write_text(code)
    return script


def wait_for_line(proc, word, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"the job ended before '{word}': {proc.stderr.read()}")
        if line.strip() == word:
            return
    raise AssertionError(f"no '{word}' within {timeout} s")


def check_run_left_whole(cli, run_dir):
    """What a killed run must satisfy; returns (files, records, named evidence, last call t1 per file)."""
    files = metadata.files(run_dir)
    assert files, f"no metadata under {run_dir}"
    named = 0
    named_paths = set()
    last_t1 = {}
    n_records = 0
    for f in files:
        sigs = set()
        for i, r in enumerate(metadata.stream(f)):  # every line but a truncated last one parses
            n_records += 1
            if i == 0:
                assert r["kind"] == "header", f"{f}: no header first"
                continue
            if r["kind"] == "signature":
                sigs.add(r["id"])
            elif r["kind"] == "call":
                assert r["id"] in sigs, f"{f}: a call record before its signature"
                last_t1[f.name] = max(last_t1.get(f.name, 0), r["t1_ns"])
            elif r["kind"] == "snapshot":
                path = run_dir / r["path"]
                assert path.is_file(), f"{f}: names {r['path']}, which is not there"
                data = path.read_bytes()
                assert len(data) == r["bytes"] and hashlib.sha256(data).hexdigest() == r["sha256"], r["path"]
                named_paths.add(path.resolve())
                named += 1
    # Complete files may exist that no record names yet (killed between the rename and the flush);
    # none is ever half-written: a half-written one keeps its hidden temporary name.
    unnamed = 0
    for snap in (run_dir / "snapshots").glob("*.pt") if (run_dir / "snapshots").is_dir() else []:
        if not snap.name.startswith("."):
            with zipfile.ZipFile(snap) as z:
                assert z.testzip() is None, snap
            unnamed += snap.resolve() not in named_paths
    p = subprocess.run([cli, "audit", "--quiet", str(run_dir)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    # A rank killed between creating its file and its first write leaves it empty; one killed during its first
    # cycle's write, call records without a counts record (test_a_write_cut_before_the_first_counts_record_...).
    allowed = {"no_final_counts", "no_counts_record", "truncated_last_line", "empty_file"}
    assert set(metadata.warning_codes(p.stderr)) <= allowed, p.stderr
    # The complete files no record names are the killed ranks' unrecorded evidence, none foreign: a CI run of
    # 2026-12-04 met 7 listed as foreign, from a rank killed before its metadata file existed.
    audit = json.loads((run_dir / "reports" / "coverage_audit.json").read_text())
    assert not audit["foreign_evidence"], audit["foreign_evidence"]
    unrecorded = [u["path"] for u in audit.get("unrecorded_evidence", []) if u["path"].startswith("snapshots/")]
    assert len(unrecorded) == unnamed, (unrecorded, unnamed)
    return len(files), n_records, named, last_t1


def test_sigkill_at_random_instants_leaves_whole_lines_and_whole_evidence(cli, build_dir, tmp_path):
    script = write_job(tmp_path, FOREVER_JOB, "forever.py")
    rng = random.Random(15)
    trials, worst_loss_ms, totals = 20, 0.0, [0, 0, 0]
    for trial in range(trials):
        out = tmp_path / f"out{trial}"
        procs = []
        for rank in range(4):
            env = base_env(tmp_path, build_dir, LINGPROBE_OUT=str(out), LINGPROBE_RUN_ID=f"kill{trial}",
                           LINGPROBE_RANK=str(rank), LINGPROBE_WORLD_SIZE="4", LINGPROBE_SNAPSHOTS="1")
            procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        for p in procs:
            wait_for_line(p, "ready")
        time.sleep(rng.uniform(0.05, 1.5))
        killed_ns = time.monotonic_ns()
        for p in procs:
            p.kill()
        for p in procs:
            p.wait(timeout=60)
            p.stdout.close()
            p.stderr.close()
            assert p.returncode == -signal.SIGKILL
        (run_dir,) = metadata.run_dirs(out)
        n_files, n_records, named, last_t1 = check_run_left_whole(cli, run_dir)
        assert 1 <= n_files <= 4  # a rank killed before its first flush has no file yet
        totals[0] += n_records
        totals[1] += named
        # The records lost: calls made after the last one on disk (the ranks ran calls until the kill).
        for name, t1 in last_t1.items():
            worst_loss_ms = max(worst_loss_ms, (killed_ns - t1) / 1e6)
        totals[2] += len(last_t1)
    print(f"\nreliability: sigkill trials={trials} ranks=4 records_parsed={totals[0]} snapshots_named_and_verified="
          f"{totals[1]} worst_unwritten_ms={worst_loss_ms:.1f} (flush interval {FLUSH_MS} ms)")
    # A file with call records loses at most the calls of the last flush interval (and the cycle's write).
    assert totals[2] > 0 and totals[1] > 0
    assert worst_loss_ms <= FLUSH_MS + 400, worst_loss_ms


@pytest.mark.parametrize("cut", ["at_a_line", "mid_line"])
def test_a_write_cut_before_the_first_counts_record_still_audits(cli, build_dir, tmp_path, cut):
    """The writer's cycle writes its call records and then the counts record in one write(), but Linux ends a
    regular file's write at a page boundary when a fatal signal comes (SIGKILL), so a rank killed during its first
    cycle's write can leave call records and no counts record, the last line whole or cut. The audit counts the
    call records instead, with its warning. A fresh-clone CI of 2026-12-06 met it in the random kills above (trial 1
    of 20), where only a final counts record missing was allowed. Here the cut is made by hand: the file of a
    killed rank truncated where its first counts record begins, or inside that record."""
    script = write_job(tmp_path, FOREVER_JOB, "forever.py")
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, str(script)], env=base_env(tmp_path, build_dir, LINGPROBE_OUT=str(out)),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_line(p, "ready")
        deadline = time.monotonic() + 60  # a counts record on disk, with call records before it
        while time.monotonic() < deadline and not any(
                '"kind":"counts"' in line for f in out.glob("*/metadata/*.jsonl") for line in open(f)):
            time.sleep(0.02)
    finally:
        p.kill()
        p.wait(timeout=60)
        p.stdout.close()
        p.stderr.close()
    (run_dir,) = metadata.run_dirs(out)
    (f,) = metadata.files(run_dir)
    data = f.read_bytes()
    first_counts = data.rindex(b"\n", 0, data.index(b'"kind":"counts"')) + 1  # where its line begins
    f.write_bytes(data[:first_counts + (0 if cut == "at_a_line" else 20)])
    kinds = [r["kind"] for r in metadata.stream(f)]
    assert "call" in kinds and "counts" not in kinds, set(kinds)
    check_run_left_whole(cli, run_dir)
    audit = json.loads((run_dir / "reports" / "coverage_audit.json").read_text())
    assert sum(r["calls"] for r in audit["rows"]) == kinds.count("call")  # the call records, counted


def final_counts(out):
    (f,) = metadata.files(out)
    records = metadata.read(f)
    counts = [r for r in records if r["kind"] == "counts"]
    calls = sum(1 for r in records if r["kind"] == "call")
    return counts[-1] if counts else None, calls


def default_exit_signals():
    """The job's exit signals as a terminal's child has them: pytest started under `nohup` or in a background job
    inherits SIGHUP and SIGINT ignored, and a launcher may leave them blocked (the job then outlives the signal, with
    lingprobe as without it: its handler goes only where the disposition is the default), and the test would wait
    for an end that never comes."""
    exits = (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)
    for s in exits:
        signal.signal(s, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, exits)


@pytest.mark.parametrize("end,sig", [("return", None), ("exit", None), ("wait", signal.SIGINT),
                                      ("wait", signal.SIGTERM), ("wait", signal.SIGHUP),
                                      ("user-sigterm", signal.SIGTERM)])
def test_every_ordinary_end_flushes_everything_and_keeps_the_exit_status(build_dir, tmp_path, end, sig):
    script = write_job(tmp_path, COUNTED_JOB, "counted.py")
    extra = {"JOB_USER_SIGTERM": "1"} if end == "user-sigterm" else {}
    arg = "wait" if end == "user-sigterm" else end
    statuses = []
    for preload in (False, True):
        env = base_env(tmp_path, build_dir, preload=preload, LINGPROBE_OPS="aten::add", **extra)
        p = subprocess.Popen([sys.executable, str(script), arg], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=default_exit_signals)
        wait_for_line(p, "done")
        if sig:
            time.sleep(0.2)
            p.send_signal(sig)
        p.wait(timeout=60)
        stderr = p.stderr.read()
        p.stdout.close()
        p.stderr.close()
        statuses.append(p.returncode)
        if preload:
            counts, calls = final_counts(tmp_path / "out")
            assert counts is not None and counts["final"] is True, stderr
            assert sum(counts["calls"].values()) == 1000 and calls == 1000
            # how it ended: a signal's name where the job was cut short (Python's KeyboardInterrupt too), which the
            # audit reports; a program's own handler that exits is an exit
            ended_by = sig.name if sig and end == "wait" else "exit"
            assert counts.get("ended_by") == ended_by, counts
            (run_dir,) = metadata.run_dirs(tmp_path / "out")
            a = subprocess.run([str(build_dir / "lingprobe"), "audit", "--quiet", str(run_dir)], capture_output=True,
                               text=True, timeout=120)
            assert a.returncode == 0, a.stderr
            assert (f"ended by {ended_by} (the job was interrupted)" in a.stderr) == (ended_by != "exit"), a.stderr
    assert statuses[0] == statuses[1], f"exit status without lingprobe {statuses[0]}, with it {statuses[1]}"
    expected = {"return": 0, "exit": 3, "user-sigterm": 7}.get(end, -sig if sig else None)
    if sig == signal.SIGINT:
        expected = statuses[0]  # Python's KeyboardInterrupt: its own status
    assert statuses[1] == expected


def test_an_interrupted_statement_of_an_interactive_session_is_not_its_end(build_dir, tmp_path):
    """An interactive interpreter (python -i, a REPL, IPython and Jupyter kernels) keeps the last exception it showed
    in sys.last_value and goes on: a Ctrl-C'd cell long before a normal exit is not how the session ended."""
    for last in ("torch.add(torch.ones(3), 1)\n", ""):  # the interrupted statement the last: the REPL ends by SIGINT
        session = "import torch\ntorch.add(torch.ones(2), 1)\nraise KeyboardInterrupt\n" + last
        out = tmp_path / ("out-" + str(len(last)))
        p = subprocess.run([sys.executable, "-i", "-q"], input=session, env=base_env(tmp_path, build_dir,
                           LINGPROBE_OUT=str(out)), text=True, capture_output=True, timeout=120,
                           preexec_fn=default_exit_signals)
        assert "KeyboardInterrupt" in p.stderr, p.stderr
        counts, _ = final_counts(out)  # final: nothing left in the buffers
        assert counts is not None and counts["final"] and counts.get("ended_by") in ("exit", "finalize"), counts


def test_sigterm_to_a_forked_child_kills_it_as_before(build_dir, tmp_path):
    """The child has no thread to finalize: the dispositions go back to the defaults at fork."""
    script = write_job(tmp_path, textwrap.dedent("""
        import os, signal, time, torch
        torch.add(torch.ones(2), 1)
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        time.sleep(0.3)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        print("child", os.WIFSIGNALED(status) and os.WTERMSIG(status), flush=True)
    """), "fork.py")
    p = subprocess.run([sys.executable, str(script)], env=base_env(tmp_path, build_dir), capture_output=True,
                       text=True, timeout=120, preexec_fn=default_exit_signals)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"child {int(signal.SIGTERM)}"


def can_mount_tmpfs(where):
    where.mkdir(parents=True, exist_ok=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], capture_output=True, text=True)
    return p.returncode == 0, p.stderr.strip()


DISK_JOB = textwrap.dedent("""
    import os, sys, time, torch
    import lingprobe
    filler = sys.argv[1]
    for n in range(40):                       # 40 signatures, 256 KiB inputs each: 10 MiB of snapshots
        x = torch.randn(64 * 1024 + n)
        torch.neg(x)
        lingprobe.flush()
    for _ in range(3000):
        torch.add(torch.ones(2), 1)           # call records while the disk stays full
    lingprobe.flush()
    os.remove(filler)                         # space comes back
    for _ in range(10):
        torch.add(torch.ones(2), 1)
    print("survived", flush=True)
""")


def test_a_full_disk_stops_evidence_counts_go_on_and_the_final_counts_land(cli, build_dir, tmp_path):
    mnt = tmp_path / "small"
    ok, why = can_mount_tmpfs(mnt)
    if not ok:
        pytest.skip(f"cannot mount a 4 MiB tmpfs here ({why}); the writer's short-write path is tested in "
                    f"unit_tests through RLIMIT_FSIZE")
    try:
        script = write_job(tmp_path, DISK_JOB, "disk.py")
        filler = mnt / "filler"
        with open(filler, "wb") as f:  # leave ~1.5 MiB: a few snapshots fit, then the disk is full
            f.write(b"\0" * (int(2.5 * 1024 * 1024)))
        env = base_env(tmp_path, build_dir, LINGPROBE_OUT=str(mnt / "out"), LINGPROBE_SNAPSHOTS="1",
                       LINGPROBE_OPS="aten::neg,aten::add")
        p = subprocess.run([sys.executable, str(script), str(filler)], env=env, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0 and p.stdout.strip() == "survived", p.stderr
        assert "failed: No space left on device" in p.stderr or "disk" in p.stderr.lower(), p.stderr
        (run_dir,) = metadata.run_dirs(mnt / "out")
        check_run_left_whole(cli, run_dir)
        counts, calls = final_counts(mnt / "out")
        assert counts["final"] is True
        snaps = counts["dropped"].get("snapshots", {})
        kept = len(list((run_dir / "snapshots").glob("*.pt")))
        # Each of the 41 keys is kept or refused for the full disk (a refusal record, once per key); a refused key
        # is tried again at later calls (calls 1, 2, 4, ...: the add key's 3010 calls make at most 13 attempts).
        refused = {r["input_sha256"] for f in metadata.files(run_dir) for r in metadata.read(f)
                   if r["kind"] == "refusal" and r["reason"] == "disk_full"}
        assert snaps.get("disk_full", 0) > 0 and kept + len(refused) == 40 + 1, (kept, len(refused), counts)
        assert len(refused) <= snaps["disk_full"] <= len(refused) + 13, (len(refused), counts)
        # The records the full disk refused are counted, not silently gone: calls on disk + lost = calls made.
        lost = counts["dropped"].get("lines", {}).get("write_error", 0)
        assert sum(counts["calls"].values()) == 3050 and calls + lost == 3050, (calls, lost)
        audit = subprocess.run([cli, "audit", str(run_dir)], capture_output=True, text=True, timeout=300)
        assert audit.returncode == 0, audit.stderr
        assert "disk_full" in (run_dir / "reports" / "summary.md").read_text() or \
            "disk_full" in (run_dir / "reports" / "coverage_audit.json").read_text()
        print(f"\nreliability: disk full: snapshots kept {kept}, dropped disk_full {snaps['disk_full']}, "
              f"call records lost {lost} of 3050, final counts written")
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


SAFETY_JOB = textwrap.dedent("""
    import torch
    torch.neg(torch.randn(8))
    print("ok", flush=True)
""")


def run_safety_job(tmp_path, build_dir, out, run_id, umask=None):
    script = write_job(tmp_path, SAFETY_JOB, "safety.py")
    env = base_env(tmp_path, build_dir, LINGPROBE_OUT=str(out), LINGPROBE_RUN_ID=run_id, LINGPROBE_SNAPSHOTS="1")
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180,
                          preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


def test_nothing_it_creates_is_world_writable_even_under_umask_0(build_dir, tmp_path):
    p = run_safety_job(tmp_path, build_dir, tmp_path / "out", "perm", umask=0)
    assert p.returncode == 0, p.stderr
    made = [q for q in (tmp_path / "out").rglob("*") if not q.is_symlink()]
    assert any(q.suffix == ".pt" for q in made) and any(q.suffix == ".jsonl" for q in made)
    loose = [f"{q} {oct(q.stat().st_mode & 0o777)}" for q in made if q.stat().st_mode & 0o002]
    assert not loose, loose


def test_no_symlink_below_the_run_directory_is_followed(build_dir, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    # A run directory that is itself a symlink: allowed, written through.
    real = tmp_path / "real-run"
    real.mkdir()
    out.mkdir()
    (out / "linked").symlink_to(real)
    p = run_safety_job(tmp_path, build_dir, out, "linked")
    assert p.returncode == 0, p.stderr
    assert list((real / "metadata").glob("*.jsonl")) and list((real / "snapshots").glob("*.pt"))
    # Symlinks planted below it (metadata/, snapshots/, claims/): never followed, nothing lands outside.
    for planted in ("metadata", "snapshots", "claims"):
        run = out / f"planted-{planted}"
        run.mkdir()
        (run / planted).symlink_to(outside)
        p = run_safety_job(tmp_path, build_dir, out, run.name)
        assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
        assert not any(outside.iterdir()), f"{planted}: wrote {list(outside.iterdir())} through a symlink"
        if planted == "metadata":
            assert "metadata is not written" in p.stderr or "Too many levels of symbolic links" in p.stderr, p.stderr
        else:
            assert list((run / "metadata").glob("*.jsonl")), p.stderr  # recording went on without the evidence


def test_an_ignored_hangup_stays_ignored_under_nohup(build_dir, tmp_path):
    # A job started under nohup (SIGHUP ignored) must outlive a hangup with lingprobe as without it: lingprobe's
    # flush-and-die handler goes only where the disposition at init is the default.
    script = write_job(tmp_path, COUNTED_JOB, "counted.py")

    def ignore_hangup():
        default_exit_signals()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    env = base_env(tmp_path, build_dir, LINGPROBE_OPS="aten::add")
    p = subprocess.Popen([sys.executable, str(script), "wait"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, preexec_fn=ignore_hangup)
    wait_for_line(p, "done")
    p.send_signal(signal.SIGHUP)
    time.sleep(1.0)
    assert p.poll() is None, "the hangup ended a job that ignores SIGHUP"
    p.send_signal(signal.SIGTERM)  # the default disposition: flushed, then ended by the signal
    p.wait(timeout=60)
    p.stdout.close()
    p.stderr.close()
    assert p.returncode == -signal.SIGTERM
    counts, calls = final_counts(tmp_path / "out")
    assert counts is not None and counts["final"] is True and calls == 1000
    assert counts.get("ended_by") == "SIGTERM", counts  # finalized on the SIGTERM, not at once as a second signal
