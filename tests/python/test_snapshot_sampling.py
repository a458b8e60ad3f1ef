"""Which call of a key gets the snapshot (issue 12), as users meet it: budgets that stop sampling and a summary
that says why; one snapshot per signature across four ranks racing for every key; a claimer killed mid-call
re-claimed by the next run of the key; a second launch into the same directory; a call that raised, or a reopened
key, leaving the snapshot to the right later call; an exit while snapshots are still being written.
(Snapshots' contents and their replay: test_snapshots.py.)"""
import json
import signal
import subprocess
import sys
import textwrap

import pytest

from conftest import free_port

import metadata
from test_snapshots import OPS, OPS_JOB, env, replay, run_job, snapshot_records


def test_budgets_stop_sampling_and_the_summary_says_so(build_dir, tmp_path, cli):
    run_job(OPS_JOB, tmp_path, build_dir, LINGPROBE_OPS=OPS, LINGPROBE_SAMPLE_BUDGET_PROCESS="600")
    (run_dir,) = metadata.run_dirs(tmp_path / "out")
    (f,) = metadata.files(run_dir)
    last = [r for r in metadata.read(f) if r["kind"] == "counts"][-1]
    assert last["dropped"]["snapshots"]["budget_process"] >= 1
    written = last["sampling"]["snapshots_written"]
    assert written < 6 and last["sampling"]["snapshot_bytes"] > 0
    a = subprocess.run([cli, "audit", "--quiet", str(run_dir)], capture_output=True, text=True)
    assert a.returncode == 0
    summary = (run_dir / "reports" / "summary.md").read_text()
    assert "budget_process" in summary and f"{6 - written} of 6 signatures have no snapshot" in summary


def test_the_summary_says_why_a_shape_dependent_output_has_no_snapshot(build_dir, tmp_path, cli):
    # a new user's audit listed `signature_never_sampled` for a `where` with another output length, unexplained
    run_job(textwrap.dedent("""
        import torch
        for n in (3, 5):  # the same input key, two outputs: [3,1] then [5,1]
            torch.nonzero(torch.arange(8) < n)
    """), tmp_path, build_dir, LINGPROBE_OPS="aten::nonzero")
    (run_dir,) = metadata.run_dirs(tmp_path / "out")
    a = subprocess.run([cli, "audit", "--quiet", str(run_dir)], capture_output=True, text=True)
    assert a.returncode == 0, a.stderr
    summary = (run_dir / "reports" / "summary.md").read_text()
    assert "1 of 2 signatures have no snapshot; keys not sampled: signature_never_sampled 1" in summary, summary
    assert "- `signature_never_sampled`: keys sampled once whose later calls, with the same inputs, returned " \
           "another output" in summary, summary


def test_four_ranks_store_exactly_one_snapshot_per_signature(build_dir, tmp_path, cli):
    job = tmp_path / "ranks.py"
    job.write_text(textwrap.dedent("""
        import torch, torch.distributed as dist, torch.nn.functional as F
        dist.init_process_group("gloo")
        w = torch.ones(4, 3)
        dist.barrier()                          # released together: they race for every key
        for _ in range(3):
            F.linear(torch.ones(2, 3), w)
            F.linear(torch.ones(5, 3), w)
        if dist.get_rank() == 0:
            torch.ones(2, 2).to(torch.uint8)    # a rank-0-only signature (the output stage's)
        dist.barrier()
    """))
    e = env(tmp_path, build_dir, LINGPROBE_OPS="aten::linear,aten::to")
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=4", f"--master_port={free_port()}",
                        "--redirects=2", "--tee=2", str(job)], env=e, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    (run_dir,) = metadata.run_dirs(tmp_path / "out")
    sigs = {}
    for f in metadata.files(run_dir):
        for r in metadata.read(f):
            if r["kind"] == "signature":
                sigs.setdefault(r["sha256"], set())
    by_sha = {}
    for f in metadata.files(run_dir):
        ids = {r["id"]: r["sha256"] for r in metadata.read(f) if r["kind"] == "signature"}
        for r in metadata.read(f):
            if r["kind"] == "snapshot":
                by_sha.setdefault(ids[r["id"]], []).append(r["path"])
    assert sorted(len(v) for v in by_sha.values()) == [1, 1, 1] and set(by_sha) == set(sigs)
    assert len(list((run_dir / "snapshots").glob("*.pt"))) == 3
    a = subprocess.run([cli, "audit", "--quiet", str(run_dir)], capture_output=True, text=True)
    assert a.returncode == 0, a.stderr
    report = json.loads((run_dir / "reports" / "coverage_audit.json").read_text())
    assert report["coverage"]["snapshots"]["by_signatures"]["fraction"] == 1.0
    assert replay(cli, run_dir).returncode == 0


BLOCKING_OP = textwrap.dedent("""
    import os, sys, time, torch
    lib = torch.library.Library("lptest", "DEF")
    lib.define("slow(Tensor x) -> Tensor")
    def slow(x):
        if os.environ.get("LPTEST_BLOCK") == "1":
            print("blocking", flush=True)
            time.sleep(600)
        return x * 2
    lib.impl("slow", slow, "CPU")
    torch.ops.lptest.slow(torch.ones(3))
    print("done", flush=True)
""")


def test_a_claimer_killed_after_claiming_is_reclaimed_by_the_next_run_of_the_key(build_dir, tmp_path):
    script = tmp_path / "slow.py"
    script.write_text(BLOCKING_OP)
    e = env(tmp_path, build_dir, LINGPROBE_OPS="lptest::*", LINGPROBE_RUN_ID="launch-1")
    first = subprocess.Popen([sys.executable, str(script)], env=dict(e, LPTEST_BLOCK="1"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert first.stdout.readline().strip() == "blocking"  # inside the sampled op: its key is claimed
    claims = tmp_path / "out" / "launch-1" / "claims"
    (claim,) = claims.glob("key-*.0")
    assert json.loads(claim.read_text())["state"] == "claimed"
    first.send_signal(signal.SIGKILL)
    first.wait()
    second = subprocess.run([sys.executable, str(script)], env=e, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0 and "done" in second.stdout, second.stderr
    taken = claims / claim.name.replace(".0", ".1")
    assert json.loads(taken.read_text())["state"] == "done"
    assert json.loads(taken.read_text())["pid"] != json.loads(claim.read_text())["pid"]
    assert len(list((tmp_path / "out" / "launch-1" / "snapshots").glob("*.pt"))) == 1


def test_a_second_launch_into_the_same_directory_samples_into_its_own_run(build_dir, tmp_path):
    for _ in range(2):
        run_job(OPS_JOB, tmp_path, build_dir, LINGPROBE_OPS="aten::linear")
    runs = metadata.run_dirs(tmp_path / "out")
    assert len(runs) == 2
    for r in runs:  # each launch claims for itself: neither is starved by the other's claims
        assert len(list((r / "snapshots").glob("*.pt"))) == 1 and (r / "claims").is_dir()


def test_a_call_that_raised_leaves_its_key_to_a_later_call(build_dir, tmp_path, cli):
    # A call that raises (torchvision's convnext and swin under CPU bf16 autocast on torch 1.13: layer_norm's
    # "expected scalar type BFloat16 but found Float") ends while its exception unwinds, without outputs. Its
    # snapshot was kept, and its replay "FAILED" with the run's own error. It is now dropped as "raised", and
    # the key's next call, the same signature of inputs with valid values, gives the snapshot.
    run_job(textwrap.dedent("""
        import torch
        x = torch.randn(4, 3)
        try:
            torch.index_select(x, 0, torch.tensor([7]))   # out of range: raises
        except (IndexError, RuntimeError):
            pass
        torch.index_select(x, 0, torch.tensor([1]))       # the same input key
    """), tmp_path, build_dir, LINGPROBE_OPS="aten::index_select")
    (run,) = metadata.run_dirs(tmp_path / "out")
    (f,) = metadata.files(run)
    records = metadata.read(f)
    last = [r for r in records if r["kind"] == "counts"][-1]
    assert last["dropped"]["snapshots"] == {"raised": 1}, last["dropped"]
    (snap,) = [r for r in records if r["kind"] == "snapshot"]
    outputs = {r["id"]: json.loads(r["signature_json"])["output"] for r in records if r["kind"] == "signature"}
    (ok,) = [i for i, out in outputs.items() if out != {"raised": True}]
    assert {"raised": True} in outputs.values()  # the call that raised: a signature of its own
    assert snap["id"] == ok  # the call that returned, not the one that raised
    r = replay(cli, run)
    assert r.returncode == 0 and "replayed 1 snapshot(s): 1 exact" in r.stdout, r.stdout + r.stderr


def test_exit_while_the_writer_cycles_does_not_hang(tmp_path, build_dir):
    """Finalize (atexit) held the session lock while it drained the sampling
    session and joined the writer thread, whose cycle takes that lock to poll
    the control file: a process that exited mid-cycle hung forever (seen in CI
    on a 4-rank CPU reference run). A 1 ms writer cycle and snapshots still
    being written at exit make that moment near certain."""
    code = textwrap.dedent("""
        import torch
        for i in range(40):
            torch.add(torch.randn(i + 1, 256), 1.0)   # 40 input keys: 40 snapshots pending at exit
    """)
    script = tmp_path / "exit_job.py"
    script.write_text(code)
    for attempt in range(10):
        e = env(tmp_path / str(attempt), build_dir, LINGPROBE_OPS="aten::add", LINGPROBE_FLUSH_INTERVAL_MS="1",
                LINGPROBE_CONTROL_FILE=str(tmp_path / "control"))
        try:
            p = subprocess.run([sys.executable, str(script)], env=e, capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"attempt {attempt}: the process hung at exit")
        assert p.returncode == 0, p.stderr
        (run_dir,) = metadata.run_dirs(tmp_path / str(attempt) / "out")
        assert len(snapshot_records(run_dir)) == 40


def test_a_reopened_key_takes_its_new_signature_once_and_never_repeats_a_sampled_one(tmp_path, build_dir):
    """nonzero's key (its inputs) has one signature per output shape. Its first call is sampled; a later call with
    another output shape reopens the key; the next call repeating the first shape would repeat the first sample.
    It was written again as `..._s{seq}.pt` (60 such files in a torchvision detection run with SAMPLE_FIRST=1):
    now it is not, and the call with the second shape takes its snapshot."""
    run_job(textwrap.dedent("""
        import time, torch
        a = torch.tensor([1., 0., 1., 0.])   # 2 nonzero
        b = torch.tensor([1., 1., 1., 0.])   # 3 nonzero: the same key, another signature
        for x in (a, b, a, a, b, a):
            torch.nonzero(x)
            time.sleep(0.3)                  # the writer settles the sample before the next call
    """), tmp_path, build_dir, LINGPROBE_OPS="aten::nonzero")
    (run_dir,) = metadata.run_dirs(tmp_path / "out")
    files = sorted(p.name for p in (run_dir / "snapshots").glob("*.pt"))
    recs = snapshot_records(run_dir)
    assert len(files) == len(recs) == 2, files
    assert not any("_s" in f.rsplit("_", 1)[-1] for f in files), files
    assert len({r["id"] for r in recs}) == 2, recs  # one per signature
