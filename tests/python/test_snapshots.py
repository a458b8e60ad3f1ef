"""Snapshots and replay (issue 12) as users meet them: sampled calls' real
tensors on disk, torch.load-able with weights_only=True, replayed exactly by
`lingprobe replay` (CPU and CUDA) and by the docs' standalone script; evidence
that belongs to its run; bad snapshots refused with one clear error. (Which
call of a key is sampled, budgets and claims: test_snapshot_sampling.py.)"""
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap
import zipfile

import pytest

import metadata

ROOT = pathlib.Path(__file__).resolve().parents[2]

OPS_JOB = textwrap.dedent("""
    import torch, torch.nn.functional as F
    torch.manual_seed(0)
    big = torch.randn(1, 8, 6)
    view = big.chunk(4, dim=1)[1]                     # a non-contiguous view: strides (48, 6, 1), offset 12
    w, b = torch.randn(5, 6), torch.randn(5)
    F.linear(view, w, b)                              # linear on a view (the seed's DiT case)
    x = torch.randn(1, 2, 4, 6, 6)
    F.conv3d(x, torch.randn(3, 2, 3, 3, 3), torch.randn(3))
    (torch.rand(2, 3, 4) * 255).to(torch.uint8)       # the output stage's to(uint8)
    y = torch.arange(6, dtype=torch.float32)
    y.mul_(3.0)                                       # in-place: captured before it ran
    torch.sum(torch.randn(3, 4), 1, dtype=torch.float64)   # a kwarg-only argument
    torch.max(torch.randn(3, 4), 1)                   # a tuple output
    print("ok")
""")

OPS = "aten::linear,aten::conv3d,aten::to,aten::mul_,aten::sum,aten::max"


def env(tmp_path, build_dir, **extra):
    """The jobs here run their ops on the CPU: LINGPROBE_SAMPLE_DEVICES=any samples them on a machine with a GPU too,
    where the default (auto) leaves CPU calls to later GPU calls that never come (all 21 of these tests found no
    snapshot on the H200 on 2026-12-04, docs/gpu/pytest-counters-snapshots-first-sightings-h200.log)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k not in ("PYTHONPATH", "LD_PRELOAD")}
    e.update(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(tmp_path / "out"),
             LINGPROBE_SNAPSHOTS="1", LINGPROBE_SAMPLE_DEVICES="any", OMP_NUM_THREADS="1")
    e.update(extra)
    return e


def run_job(code, tmp_path, build_dir, **extra):
    script = tmp_path / f"job{len(list(tmp_path.glob('job*.py')))}.py"
    script.write_text(code)
    p = subprocess.run([sys.executable, str(script)], env=env(tmp_path, build_dir, **extra), capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return p


def replay(cli, target, *args):
    return subprocess.run([cli, "replay", str(target), *args], capture_output=True, text=True, timeout=300)


def snapshot_records(run_dir):
    recs = []
    for f in metadata.files(run_dir):
        recs += [r for r in metadata.read(f) if r["kind"] == "snapshot"]
    return recs


@pytest.fixture(scope="module")
def ops_run(build_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ops")
    run_job(OPS_JOB, tmp, build_dir, LINGPROBE_OPS=OPS)
    (run_dir,) = metadata.run_dirs(tmp / "out")
    return run_dir


def test_every_sampled_op_loads_with_weights_only_and_replays_exactly(ops_run, cli):
    recs = snapshot_records(ops_run)
    files = sorted((ops_run / "snapshots").glob("*.pt"))
    assert len(recs) == len(files) == 6, [f.name for f in files]
    code = textwrap.dedent(f"""
        import glob, json, torch
        ops = [torch.load(p, weights_only=True)["op"] for p in glob.glob({str(ops_run / 'snapshots' / '*.pt')!r})]
        print(json.dumps(sorted(ops)))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == sorted(["aten.linear.default", "aten.conv3d.default", "aten.to.dtype",
                                           "aten.mul_.Tensor", "aten.sum.dim_IntList", "aten.max.dim"])
    r = replay(cli, ops_run)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replayed 6 snapshot(s): 6 exact, 0 inexact" in r.stdout
    for d in (ops_run / "replays").iterdir():
        c = json.loads((d / "replay_comparison.json").read_text())
        assert c["exact"] is True and c["signature_matches"] and c["layout_exact"], c
        manifest = json.loads((d / "manifest.json").read_text())
        for name, sha in manifest["sha256"].items():
            assert hashlib.sha256((d / name).read_bytes()).hexdigest() == sha
        assert set(os.listdir(d)) == {"replay_comparison.json", "identity.json", "run.log", "replay_operator.py",
                                      "manifest.json"}


def test_the_view_keeps_its_layout_and_inputs_are_captured_before_an_in_place_op(ops_run):
    code = textwrap.dedent(f"""
        import glob, torch
        for p in glob.glob({str(ops_run / 'snapshots' / '*.pt')!r}):
            d = torch.load(p, weights_only=True)
            if d["op"] == "aten.linear.default":
                v = d["args"][0]
                print("view", v["shape"], v["stride"], v["storage_offset"], v["layout"], list(v["data"].shape))
            if d["op"] == "aten.mul_.Tensor":
                print("before", d["args"][0]["data"].tolist(), "after", d["output"]["data"].tolist(), d["written_args"])
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = dict(l.split(" ", 1) for l in p.stdout.strip().splitlines())
    assert lines["view"] == "[1, 2, 6] [48, 6, 1] 12 compact [1, 2, 6]"
    assert lines["before"] == ("[0.0, 1.0, 2.0, 3.0, 4.0, 5.0] after [0.0, 3.0, 6.0, 9.0, 12.0, 15.0] [0]")


def test_the_standalone_replay_script_replays_exactly(ops_run, cli):
    if not (ops_run / "replays").exists():
        assert replay(cli, ops_run).returncode == 0
    for d in sorted((ops_run / "replays").iterdir()):
        p = subprocess.run([sys.executable, str(d / "replay_operator.py")], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout.strip().splitlines()[-1])["exact"] is True, (d.name, p.stdout)


def test_the_standalone_replay_script_runs_from_its_own_directory(ops_run, cli, tmp_path):
    """A run and replay directory given relative and through a `latest` symlink, as a user types them: the script
    finds its snapshot from wherever it is run (it was written with the path as typed, relative to the replay's
    working directory, and failed from its own)."""
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "latest").symlink_to(ops_run)
    r = subprocess.run([cli, "replay", "out/latest", "-o", "mine"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    d = sorted((tmp_path / "mine" / "replays").iterdir())[0]
    p = subprocess.run([sys.executable, "replay_operator.py"], cwd=d, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1])["exact"] is True, p.stdout


def test_audit_counts_only_this_runs_evidence(ops_run, cli, tmp_path):
    import shutil
    run = tmp_path / "copy"
    shutil.copytree(ops_run, run, symlinks=True)
    # a stray file (another run's sample copied in by hand) and an altered one
    files = sorted((run / "snapshots").glob("*.pt"))
    shutil.copy(files[0], run / "snapshots" / "dit_rank0_0123456789abcdef.pt")
    with open(files[1], "r+b") as f:
        f.seek(100)
        f.write(b"\xff")
    a = subprocess.run([cli, "audit", "--quiet", str(run)], capture_output=True, text=True)
    assert a.returncode == 0, a.stderr
    report = json.loads((run / "reports" / "coverage_audit.json").read_text())
    assert [e["path"] for e in report["foreign_evidence"]] == ["snapshots/dit_rank0_0123456789abcdef.pt"]
    assert [e["path"] for e in report["rejected_evidence"]] == [f"snapshots/{files[1].name}"]
    cov = report["coverage"]["snapshots"]["by_signatures"]
    assert (cov["covered"], cov["total"]) == (5, 6)
    assert "foreign_evidence" in metadata.warning_codes(a.stderr), a.stderr
    assert "foreign_evidence" in metadata.report_warning_codes(report)


def rewrite_snapshot(src, dst, change):
    """A copy of a snapshot with `change(name, bytes) -> bytes` applied to its entries (CRCs recomputed)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, change(info.filename, zin.read(info.filename)))


def snapshot_of(run_dir, op):
    code = textwrap.dedent(f"""
        import glob, torch
        for p in sorted(glob.glob({str(run_dir / 'snapshots' / '*.pt')!r})):
            if torch.load(p, weights_only=True)["op"] == {op!r}:
                print(p)
    """)
    return pathlib.Path(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.split()[0])


def test_an_altered_input_element_replays_inexact(ops_run, cli, tmp_path):
    src = snapshot_of(ops_run, "aten.linear.default")
    bad = tmp_path / "snapshots" / src.name
    bad.parent.mkdir()
    first = []

    def flip_first_input_element(name, data):
        if name.startswith("archive/data/") and not first:
            first.append(name)
            return bytes([data[0] ^ 0x40]) + data[1:]
        return data
    rewrite_snapshot(src, bad, flip_first_input_element)
    r = replay(cli, bad)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "INEXACT" in r.stdout and "1 inexact" in r.stdout
    c = json.loads((tmp_path / "replays" / src.stem / "replay_comparison.json").read_text())
    assert c["exact"] is False and c["max_abs"] > 0 and c["signature_matches"]


@pytest.mark.parametrize("case", ["truncated", "text", "foreign_zip", "torch_save", "crc", "unknown_op",
                                  "unknown_dtype", "device"])
def test_bad_snapshots_get_one_clear_error(ops_run, cli, tmp_path, case):
    src = snapshot_of(ops_run, "aten.linear.default")
    bad = tmp_path / "bad.pt"
    raw = src.read_bytes()
    if case == "truncated":
        bad.write_bytes(raw[: len(raw) // 2])
    elif case == "text":
        bad.write_text("hello\n")
    elif case == "foreign_zip":
        with zipfile.ZipFile(bad, "w") as z:
            z.writestr("archive/readme.txt", "not a snapshot")
    elif case == "torch_save":
        subprocess.run([sys.executable, "-c", f"import torch; torch.save({{'a': torch.ones(2)}}, {str(bad)!r})"], check=True)
    elif case == "crc":  # one byte of a tensor changed in place, its CRC left as it was
        info = zipfile.ZipFile(src).getinfo("archive/data/0")
        header = raw[info.header_offset:info.header_offset + 30]
        i = info.header_offset + 30 + int.from_bytes(header[26:28], "little") + int.from_bytes(header[28:30], "little")
        bad.write_bytes(raw[:i] + bytes([raw[i] ^ 1]) + raw[i + 1:])
    else:
        old, new = {"unknown_op": ("aten::linear", "aten::no_such_op"), "unknown_dtype": ("torch.float32", "torch.float99"),
                    "device": ("cpu", "cuda:0")}[case]

        def edit(name, data):
            if name != "archive/data.pkl":
                return data
            enc = lambda s: b"X" + len(s).to_bytes(4, "little") + s.encode()  # noqa: E731 (BINUNICODE)
            return data.replace(enc(old), enc(new))
        rewrite_snapshot(src, bad, edit)
    if case == "device" and has_cuda():
        pytest.skip("this torch has a CUDA device: a snapshot claiming cuda:0 replays there (not an error)")
    r = replay(cli, bad)
    assert r.returncode == 1, r.stdout + r.stderr
    failed = [l for l in r.stdout.splitlines() if l.startswith("FAILED")]
    assert len(failed) == 1, r.stdout
    expected = {"truncated": "not a snapshot", "text": "not a snapshot", "foreign_zip": "no data.pkl",
                "torch_save": "not a lingprobe snapshot", "crc": "CRC mismatch", "unknown_op": "unknown op aten::no_such_op",
                "unknown_dtype": "torch.float99", "device": "no CUDA device"}[case]
    assert expected in failed[0], failed[0]


def has_cuda():
    # In a child: importing torch in pytest itself would inflate later children's peak RSS.
    return subprocess.run([sys.executable, "-c", "import torch, sys; sys.exit(not torch.cuda.is_available())"]).returncode == 0


CUDA_JOB = textwrap.dedent("""
    import torch, torch.nn.functional as F
    torch.manual_seed(0)
    dev = torch.device("cuda")
    x = torch.randn(1, 4 * 264, 512, device=dev, dtype=torch.bfloat16)
    view = torch.chunk(x, 4, dim=1)[1]                                   # the seed's DiT input layout
    w = torch.randn(512, 512, device=dev, dtype=torch.bfloat16)
    b = torch.randn(512, device=dev, dtype=torch.bfloat16)
    out = F.linear(view, w, b)
    c = F.conv3d(torch.randn(1, 16, 4, 18, 10, device=dev), torch.randn(16, 16, 3, 3, 3, device=dev),
                 torch.randn(16, device=dev))                              # fp32 conv3d (cuDNN)
    u = (torch.rand(3, 9, 32, 32, device=dev) * 255).to(torch.uint8)     # float -> uint8
    # a CUDA graph: nothing is sampled while its stream captures; the graph's result stays right
    static = torch.randn(64, 64, device=dev)
    wg = torch.randn(48, 64, device=dev)
    F.linear(torch.randn(8, 8, device=dev), torch.randn(8, 8, device=dev))  # warm-up on the side stream's key
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        F.linear(static, wg)                      # warm-up outside capture (this one may be sampled)
        with torch.cuda.graph(g):
            captured = F.linear(static * 1, wg[:32])
    torch.cuda.current_stream().wait_stream(s)
    g.replay()
    torch.cuda.synchronize()
    assert torch.allclose(captured, F.linear(static, wg[:32]), atol=1e-4), "graph result wrong"
    print("ok")
""")


def test_cuda_snapshots_replay_exactly_on_cuda_and_never_inside_capture(build_dir, tmp_path, cli):
    if not has_cuda():
        pytest.skip("no CUDA device here (CI has none): runs on the GPU machine through scripts/gpu-check.sh")
    p = run_job(CUDA_JOB, tmp_path, build_dir, LINGPROBE_OPS="aten::linear,aten::conv3d,aten::to",
                LINGPROBE_SAMPLE_DEVICES="auto")  # the default: its GPU calls
    assert "ok" in p.stdout
    (run_dir,) = metadata.run_dirs(tmp_path / "out")
    (f,) = metadata.files(run_dir)
    last = [r for r in metadata.read(f) if r["kind"] == "counts"][-1]
    assert last["dropped"]["snapshots"]["stream_capturing"] == 1, last  # the captured linear: not sampled
    r = replay(cli, run_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    comparisons = [json.loads(p.read_text()) for p in (run_dir / "replays").glob("*/replay_comparison.json")]
    ops = sorted(c["op"] for c in comparisons)
    assert ops.count("aten.linear.default") >= 2 and "aten.conv3d.default" in ops and "aten.to.dtype" in ops, ops
    assert all(c["exact"] is True and c["device"].startswith("cuda") and c["signature_matches"] for c in comparisons)
    print("\n" + r.stdout)


def test_the_30_line_script_of_the_docs_replays_snapshots(ops_run, tmp_path):
    doc = (ROOT / "docs" / "SNAPSHOTS.md").read_text()
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    assert len([l for l in code.splitlines() if l.strip()]) <= 30
    script = tmp_path / "replay30.py"
    script.write_text(code)
    results = {}
    for snap in sorted((ops_run / "snapshots").glob("*.pt")):
        p = subprocess.run([sys.executable, str(script), str(snap)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        op, verdict = p.stdout.split(" ", 1)
        results[op] = verdict.strip()
    assert len(results) == 6 and set(results.values()) == {"True"}, results


def test_a_wrapped_python_number_replays_as_a_number(build_dir, tmp_path, cli):
    # `torch.arange(16) * 27.89` (torchvision's regnet, building its widths): the dispatcher wraps the Python float
    # into a 0-dim float64 tensor that promotes as a number, so the product is float32. Rebuilt as a plain 0-dim
    # tensor it promoted as a tensor: float64, "signature differs!" in `lingprobe replay`, and "exact" in the
    # Python scripts, whose comparison ignored the dtype.
    # remainder.Scalar calls remainder.Tensor with one (recorded with NESTED=1), whose Python binding takes no number.
    run_job("import torch\ntorch.arange(16) * 27.89\ntorch.remainder(torch.arange(6), 2.5)\n", tmp_path, build_dir,
            LINGPROBE_OPS="aten::mul,aten::remainder", LINGPROBE_NESTED="1")
    (run,) = metadata.run_dirs(tmp_path / "out")
    r = replay(cli, run)
    assert r.returncode == 0 and "replayed 3 snapshot(s): 3 exact" in r.stdout, r.stdout + r.stderr
    for d in (run / "replays").iterdir():
        assert json.loads((d / "replay_comparison.json").read_text())["signature_matches"] is True, d.name
        p = subprocess.run([sys.executable, str(d / "replay_operator.py")], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0 and json.loads(p.stdout.strip().splitlines()[-1])["exact"] is True, p.stdout + p.stderr
    (snap,) = [s for s in (run / "snapshots").glob("*.pt") if
               json.loads((run / "replays" / s.stem / "replay_comparison.json").read_text())["op"] == "aten.mul.Tensor"]
    script = tmp_path / "replay30.py"
    script.write_text((ROOT / "docs" / "SNAPSHOTS.md").read_text().split("```python\n", 1)[1].split("```", 1)[0])
    p = subprocess.run([sys.executable, str(script), str(snap)], capture_output=True, text=True, timeout=120)
    assert p.stdout.strip() == "aten.mul.Tensor True", p.stdout + p.stderr


def test_an_undefined_output_replays_exactly(build_dir, tmp_path, cli):
    # torchvision's vit_b_16 in eval: MultiheadAttention's fast path calls _native_multi_head_attention, whose
    # weights output is undefined without need_weights. The snapshot stores it as None; the replay counted 1
    # recorded output against 2 replayed and called the call inexact.
    run_job(textwrap.dedent("""
        import torch
        mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
        x = torch.randn(2, 5, 8)
        with torch.no_grad():
            mha(x, x, x, need_weights=False)
    """), tmp_path, build_dir, LINGPROBE_OPS="aten::_native_multi_head_attention")
    (run,) = metadata.run_dirs(tmp_path / "out")
    r = replay(cli, run)
    assert r.returncode == 0 and "replayed 1 snapshot(s): 1 exact" in r.stdout, r.stdout + r.stderr


FIXTURE_SNAPSHOTS = ROOT / "tests" / "data" / "snapshots-torch1.13"


def test_snapshots_written_by_another_torch_load_and_replay(cli, tmp_path):
    """Six snapshots of OPS_JOB written by the torch 1.13 build (committed):
    torch.load(weights_only=True) and `lingprobe replay` take them on whichever
    torch runs the tests (1.13 in CI, 2.11 on the GPU machine)."""
    files = sorted(FIXTURE_SNAPSHOTS.glob("*.pt"))
    assert len(files) == 6
    code = textwrap.dedent(f"""
        import glob, json, torch
        docs = [torch.load(p, weights_only=True) for p in sorted(glob.glob({str(FIXTURE_SNAPSHOTS / '*.pt')!r}))]
        print(json.dumps(sorted({{d["torch_version"] for d in docs}})), json.dumps(sorted(d["op"] for d in docs)))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    versions, ops = (json.loads(x) for x in p.stdout.split(" ", 1))
    assert versions == ["1.13.0"]
    assert ops == sorted(["aten.linear.default", "aten.conv3d.default", "aten.to.dtype", "aten.mul_.Tensor",
                          "aten.sum.dim_IntList", "aten.max.dim"])
    here = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                          text=True).stdout.strip()
    for f in files:
        r = replay(cli, f, "-o", str(tmp_path / f.stem))
        print(r.stdout.splitlines()[0] if r.stdout else r.stderr[-500:])
        if here.startswith("1.13"):
            assert r.returncode == 0 and "1 exact, 0 inexact" in r.stdout, r.stdout + r.stderr
            continue
        # Another torch: every snapshot loads and runs; elementwise ops stay exact, while GEMMs,
        # convolutions and reductions may round differently (another BLAS, another reduction order).
        assert "0 failed" in r.stdout, r.stdout + r.stderr
        if "INEXACT" in r.stdout:
            assert any(op in r.stdout for op in ("aten.linear", "aten.conv3d", "aten.sum")), r.stdout
            max_abs = float(r.stdout.split("max_abs")[1].split()[0])
            assert max_abs < 1e-4, r.stdout


def test_replay_profile_without_a_gpu_says_why_and_replays_anyway(ops_run, cli, tmp_path):
    # `lingprobe replay --profile` on CPU snapshots: the replays run and compare as without it. A call the run
    # has no profile of is skipped (nothing to compare); one it has (faked here: CPU runs have none) is replayed
    # again under lingprobe's own counters, alone (not its inputs' rebuilding), and opens no window on CPU tensors.
    r = replay(cli, ops_run, "-o", str(tmp_path / "a"), "--profile")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "replayed 6 snapshot(s): 6 exact, 0 inexact" in r.stdout
    skipped = [l for l in r.stdout.splitlines() if l.startswith("skipped --profile")]
    assert len(skipped) == 6 and all("the run has no profile of this call" in l for l in skipped), r.stdout
    assert not (tmp_path / "a" / "replay_profiles").exists()
    run = tmp_path / "run"
    shutil.copytree(ops_run, run, ignore=shutil.ignore_patterns("replays", "reports"))
    stem = sorted(p.stem for p in (run / "snapshots").glob("*.pt"))[0]
    (run / "profiles" / stem).mkdir(parents=True)
    (run / "profiles" / stem / "kernels.json").write_text("[]")
    r = replay(cli, run, "--profile")
    assert r.returncode == 1, r.stdout + r.stderr
    (failed,) = [l for l in r.stdout.splitlines() if l.startswith("FAILED  --profile")]
    assert stem in failed and "opened no counter window" in failed and "lingprobe audit" in failed, r.stdout
    assert sorted(p.name for p in (run / "replays").iterdir()) == sorted(
        p.stem for p in (run / "snapshots").glob("*.pt"))  # the profiled replays' run is not among them
    (meta,) = (run / "replay_profiles" / "latest" / "metadata").glob("*.jsonl")
    records = list(metadata.read(meta))
    assert records[0]["role"] == "single" and records[0]["rank"] == 0
    counts = [r for r in records if r["kind"] == "counts"][-1]
    assert len(counts["calls"]) == 1, counts  # the one call alone, not the rebuilding of its inputs
    assert counts["dropped"]["profiles"] == {"no_cuda_tensor": 1}, counts


def test_a_dropout_outside_training_replays_exactly_and_one_in_training_is_random(build_dir, tmp_path, cli):
    # A new user's eval-mode model: `dropout_` with train=False (the identity) was marked "nondeterministic (random
    # op)" beside max_abs 0; the corpus's models in eval listed `dropout` among their nondeterministic ops.
    run_job("import torch\nx = torch.ones(64)\n"
            "torch.nn.functional.dropout(x, 0.5, training=False)\n"
            "torch.nn.functional.dropout(x, 0.5, training=True)\n", tmp_path, build_dir, LINGPROBE_OPS="aten::dropout")
    (run,) = metadata.run_dirs(tmp_path / "out")
    r = replay(cli, run)
    assert r.returncode == 0, r.stdout + r.stderr
    by_train = {}
    for d in (run / "replays").iterdir():
        c = json.loads((d / "replay_comparison.json").read_text())
        by_train[c["exact"] is None] = c
    assert set(by_train) == {True, False}, by_train
    assert by_train[False]["exact"] is True and "nondeterministic" not in by_train[False]
    assert by_train[True]["nondeterministic"] == "random op"


def test_an_op_given_a_generator_replays_with_its_own_signature(build_dir, tmp_path, cli):
    # A new user's randn(..., generator=g) replayed with the generator as None: "signature differs!" beside the
    # random op's "nondeterministic". The replay now passes a generator of the recorded device (its state is not
    # kept: the values stay random by definition), by `lingprobe replay` and by the standalone script.
    run_job("import torch\ng = torch.Generator().manual_seed(3)\ntorch.randn(2, 3, generator=g)\n", tmp_path,
            build_dir, LINGPROBE_OPS="aten::randn")
    (run,) = metadata.run_dirs(tmp_path / "out")
    r = replay(cli, run)
    assert r.returncode == 0 and "signature differs" not in r.stdout, r.stdout + r.stderr
    (d,) = (run / "replays").iterdir()
    c = json.loads((d / "replay_comparison.json").read_text())
    assert c["signature_matches"] is True and c["exact"] is None and c["nondeterministic"], c
    s = subprocess.run([sys.executable, str(d / "replay_operator.py")], capture_output=True, text=True, timeout=300)
    assert s.returncode == 0, s.stdout + s.stderr  # the generator rebuilt by the script's own code
