"""Evidence by default on code nobody here wrote (issue 26), on the CPU: a
third-party model built in the process under test (on the meta device, then
materialised and initialised), run under CPU autocast, with nothing but
LINGPROBE_SNAPSHOTS=1 and a small byte budget. Construction must not spend
the budget before the compute runs; every refusal leaves its key to a later
call and is recorded once; the autocast calls replay exactly."""
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import metadata

torchvision = pytest.importorskip("torchvision")

# torchvision's resnet18, built and initialised by its own code in this process
# (kaiming normal_, constant fills: set-up calls that write parameters), and a
# copy moved to the meta device and traced there first (its calls have no
# storage: the same keys as the real forwards, refused and left to them);
# then two forwards under CPU autocast (bf16).
RESNET_JOB = textwrap.dedent("""
    import torch, torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval()
    meta = torchvision.models.resnet18(num_classes=10).eval().to("meta")
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        meta(x.to("meta"))
        for _ in range(2):
            y = model(x)
    print("ok", y.dtype)
""")
BUDGET = 64 * 2**20


def env(tmp_path, build_dir, **extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k not in ("PYTHONPATH", "LD_PRELOAD")}
    # CUDA_VISIBLE_DEVICES="": the defaults of a CPU machine on a GPU machine too (there, by default, a CPU call leaves
    # its key to a GPU call)
    e.update(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(tmp_path / "out"),
             LINGPROBE_SNAPSHOTS="1", OMP_NUM_THREADS="2", CUDA_VISIBLE_DEVICES="", **extra)
    return e


@pytest.fixture(scope="module")
def resnet_run(build_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resnet")
    script = tmp / "job.py"
    script.write_text(RESNET_JOB)
    # Construction writes 2 x 47 MB of parameters (each written tensor copied before and after): alone it would
    # take the budget one and a half times over. The compute's snapshots need about 45 MB (measured).
    p = subprocess.run([sys.executable, str(script)], env=env(tmp, build_dir, LINGPROBE_SAMPLE_BUDGET_PROCESS=str(BUDGET)),
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "ok torch.bfloat16" in p.stdout, p.stderr
    (run,) = metadata.run_dirs(tmp / "out")
    return run


def records(run, kind):
    return [r for f in metadata.files(run) for r in metadata.read(f) if r["kind"] == kind]


def load(path):
    import torch
    return torch.load(path, weights_only=True)


def snapshot_ops(run):
    ops = {}
    for f in (run / "snapshots").glob("*.pt"):
        import torch
        d = torch.load(f, weights_only=True)
        ops.setdefault(d["op"], []).append(d)
    return ops


def test_construction_does_not_spend_the_budget_before_the_compute(resnet_run):
    ops = snapshot_ops(resnet_run)
    for op in ("aten.conv2d.default", "aten.linear.default", "aten.batch_norm.default", "aten.relu_.default",
               "aten.max_pool2d.default", "aten.adaptive_avg_pool2d.default"):
        assert op in ops, sorted(ops)
    setup = [d for docs in ops.values() for d in docs if d["setup_call"]]
    setup_bytes = sum(t.numel() * t.element_size() for d in setup for t in tensors(d))
    assert setup_bytes <= BUDGET // 8, setup_bytes  # set-up calls kept to their share of the budget
    refusals = records(resnet_run, "refusal")
    assert any(r["reason"] == "setup_share" and r["op"] == "aten::normal_" for r in refusals), refusals
    assert any(r["reason"] == "no_storage" for r in refusals), refusals  # the meta copy's calls
    seen = [(r["input_sha256"], r["evidence"], r["reason"]) for r in refusals]
    assert len(seen) == len(set(seen)), "a refusal is recorded once per key, evidence and reason"


def tensors(v):
    import torch
    if isinstance(v, torch.Tensor):
        return [v]
    if isinstance(v, dict):
        return [t for x in v.values() for t in tensors(x)]
    if isinstance(v, (list, tuple)):
        return [t for x in v for t in tensors(x)]
    return []


def test_autocast_snapshots_keep_the_region_and_replay_exactly(resnet_run, cli):
    ops = snapshot_ops(resnet_run)
    (conv,) = [d for d in ops["aten.conv2d.default"] if d["args"][0]["shape"] == [2, 3, 64, 64]]
    assert conv["math_policy"]["autocast_cpu"] == "true" and conv["math_policy"]["autocast_cpu_dtype"] == "torch.bfloat16"
    assert conv["args"][0]["dtype"] == "torch.float32"   # the pre-cast view: what the dispatcher saw
    assert conv["output"]["dtype"] == "torch.bfloat16"   # what ran
    r = subprocess.run([cli, "replay", str(resnet_run)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    n = len(list((resnet_run / "snapshots").glob("*.pt")))
    assert f"replayed {n} snapshot(s):" in r.stdout and " 0 inexact, " in r.stdout and " 0 failed" in r.stdout, r.stdout
    logs = [p.read_text() for p in (resnet_run / "replays").glob("*/run.log")]
    # the autocast state is entered around the call, and said so once: it was first called "not settable" (a new
    # user's run.log: "autocast_cpu=true is not settable in torch 1.13.0", then "autocast: cpu torch.bfloat16")
    assert not any("autocast_cpu=true is not settable" in t for t in logs), logs[0]
    assert any("autocast: cpu torch.bfloat16" in t for t in logs)
    # torchvision's own op (torchvision::_cuda_version, called when it loads) replays too: its snapshot names the
    # library the run had loaded (torchvision's _C), which the replay loads (a new user pasted the hint's python3
    # command where python3 had no torchvision)
    (tv,) = [d for d in ops["torchvision._cuda_version.default"]]
    library = pathlib.Path(tv["library"])
    assert library.exists() and library.parent.name == "torchvision" and library.name.startswith("_C"), library
    if b"libtorch_python" in library.read_bytes():  # torch 2.x wheels: it needs Python, which the replay binary lacks
        (skipped,) = [line for line in r.stdout.splitlines() if line.startswith("skipped ")]
        assert f"the recorded library {library} does not load in this process (" in skipped, skipped
        return
    assert "skipped" not in r.stdout, r.stdout
    (log,) = [t for t in logs if "op torchvision::_cuda_version" in t]
    assert f"loaded {library}, which the recorded process had loaded" in log, log
    assert "library" not in ops["aten.conv2d.default"][0]  # torch's own ops name none
    # where that library is not there (another machine), the snapshot is skipped by name, and --load-library loads it
    import shutil, tempfile, zipfile
    (src,) = [f for f in (resnet_run / "snapshots").glob("*.pt") if "_cuda_version" in str(load(f)["op"])]
    moved = pathlib.Path(tempfile.mkdtemp()) / src.name
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(moved, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            zout.writestr(info.filename, data.replace(b"/torchvision/", b"/torchvisioX/") if info.filename.endswith(
                "data.pkl") else data)
    r = subprocess.run([cli, "replay", str(moved), "-o", str(moved.parent)], capture_output=True, text=True,
                       timeout=600)
    (skipped,) = [line for line in r.stdout.splitlines() if line.startswith("skipped ")]
    assert "torchvision::_cuda_version not registered in this process" in skipped, skipped
    assert "load its library with --load-library" in skipped, skipped
    r = subprocess.run([cli, "replay", str(moved), "-o", str(moved.parent), "--load-library", str(library), "-q"],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0 and "skipped" not in r.stdout and " 0 failed" in r.stdout, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr and "frame #" not in r.stdout + r.stderr
    # where the recorded library is there but does not load in this process (torch 2.11's torchvision _C links
    # libtorch_python, whose Python symbols the replay binary lacks), the skip line says why, and what to run
    junk = moved.parent / ("j" * (len(str(library)) - len(str(moved.parent)) - 1))  # the pickled path's length
    junk.write_text("not a shared library")
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(moved, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            zout.writestr(info.filename, data.replace(str(library).encode(), str(junk).encode()) if
                          info.filename.endswith("data.pkl") else data)
    r = subprocess.run([cli, "replay", str(moved), "-o", str(moved.parent)], capture_output=True, text=True,
                       timeout=600)
    (skipped,) = [line for line in r.stdout.splitlines() if line.startswith("skipped ")]
    assert f"the recorded library {junk} does not load in this process (" in skipped, skipped
    assert "replay it in python3" in skipped, skipped
    shutil.rmtree(moved.parent)
    (tv_dir,) = [p.parent for p in (resnet_run / "replays").glob("*/run.log") if "op torchvision::" in p.read_text()]
    p = subprocess.run([sys.executable, str(tv_dir / "replay_operator.py")], capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": ""})  # plain torch: the script loads the library
    assert p.returncode == 0 and json.loads(p.stdout.splitlines()[-1])["exact"], p.stdout + p.stderr
    script = next((resnet_run / "replays").glob("*conv2d*/replay_operator.py"), None) or next(
        (resnet_run / "replays").glob("*/replay_operator.py"))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "PYTHONPATH": ""})
    assert p.returncode == 0 and json.loads(p.stdout.splitlines()[-1])["exact"], p.stdout + p.stderr


def test_the_audit_says_what_each_refused_key_holds(resnet_run, cli):
    r = subprocess.run([cli, "audit", str(resnet_run)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    report = json.loads((resnet_run / "reports" / "coverage_audit.json").read_text())
    keys = report["sampling"]["refusals"]
    normal = [k for k in keys if k["op"] == "aten::normal_"]
    assert normal and all("setup_share" in k["refused"]["snapshot"] for k in normal), normal
    # The meta trace's first conv2d has the real one's key (fp32 input, fp32 weight) and gets its snapshot from it;
    # its later convs take the previous layer's fp32 output where the real run, under autocast, passes bf16: other
    # keys, never called on real memory, listed as still missing evidence (no_storage).
    conv = [k for k in keys if k["op"] == "aten::conv2d"]
    assert [k["complete"] for k in conv].count(True) == 1, conv
    assert all(k["refused"] == {"snapshot": ["no_storage"]} for k in conv), conv
    assert not [k for k in keys if "budget_process" in json.dumps(k["refused"]) and not k["op"].startswith(
        ("aten::normal_", "aten::uniform_", "aten::fill_", "aten::zero_", "aten::empty"))], keys
    summary = (resnet_run / "reports" / "summary.md").read_text()
    assert "### Evidence refused" in summary


def input_key(signature):
    import hashlib
    inputs = {k: v for k, v in signature.items() if k != "output"}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def audited(cli, run):
    if not (run / "reports" / "coverage_audit.json").exists():
        r = subprocess.run([cli, "audit", "--quiet", str(run)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((run / "reports" / "coverage_audit.json").read_text())


def test_a_plan_from_the_earlier_run_samples_only_what_dominated_it(resnet_run, cli, build_dir, tmp_path):
    """LINGPROBE_SAMPLE_PLAN=RUN_DIR: the keys with FLOPs, biggest first, while the budget lasts; set-up and views
    are not planned; a plan key the run never meets is reported by the audit."""
    earlier = audited(cli, resnet_run)
    with_flops = {input_key(r["signature"]) for r in earlier["rows"] if r["flops_per_call"]}
    top = max(earlier["rows"], key=lambda r: (r["flops_per_call"] or 0) * r["calls"])
    script = tmp_path / "job.py"
    script.write_text(RESNET_JOB)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                       env=env(tmp_path, build_dir, LINGPROBE_SAMPLE_PLAN=str(resnet_run),
                               LINGPROBE_SAMPLE_BUDGET_PROCESS=str(BUDGET)))
    assert p.returncode == 0, p.stderr
    assert "sample plan from " + str(resnet_run / "reports" / "coverage_audit.json") in p.stderr, p.stderr
    (run,) = metadata.run_dirs(tmp_path / "out")
    (plan,) = records(run, "plan")
    assert plan["error"] is None and plan["basis"] == "flops" and plan["unmet"] == [], plan
    assert plan["ranked"] == len(with_flops) and plan["keys"] + plan["over_budget"] == plan["ranked"], plan
    report = audited(cli, run)
    sampled = {input_key(r["signature"]) for r in report["rows"] if r["snapshot"]}
    assert sampled and sampled <= with_flops, sampled - with_flops
    assert input_key(top["signature"]) in sampled
    assert not [r for r in report["rows"] if r["snapshot"] and r["signature"]["op"].startswith("aten.normal_")]
    assert report["sampling"]["plan"]["unmet"] == []
    # Another program under the same plan meets none of its keys: each is reported, the largest first.
    other = tmp_path / "other"
    script.write_text("import torch\nprint(torch.mm(torch.ones(3, 5), torch.ones(5, 7)).sum().item())\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env=env(other, build_dir, LINGPROBE_SAMPLE_PLAN=str(resnet_run / "reports" /
                                                                           "coverage_audit.json")))
    assert p.returncode == 0, p.stderr
    (run,) = metadata.run_dirs(other / "out")
    assert not list((run / "snapshots").glob("*.pt")) if (run / "snapshots").exists() else True
    report = audited(cli, run)
    unmet = report["sampling"]["plan"]["unmet"]
    assert len(unmet) == plan["keys"] and unmet[0]["input_sha256"] == input_key(top["signature"]), unmet[:2]
    summary = (run / "reports" / "summary.md").read_text()
    assert f"{plan['keys']} planned key(s) never met in this run" in summary, summary


def test_a_plan_that_cannot_be_read_is_one_clear_line(build_dir, tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import torch\nprint(torch.ones(2).sum().item())\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env=env(tmp_path, build_dir, LINGPROBE_SAMPLE_PLAN=str(tmp_path / "no_such_run")))
    assert p.returncode == 0 and "2.0" in p.stdout, p.stderr
    lines = [l for l in p.stderr.splitlines() if "SAMPLE_PLAN" in l]
    assert len(lines) == 1 and "no such run directory or file" in lines[0] and "Traceback" not in p.stderr, p.stderr
    (tmp_path / "not_audited").mkdir()  # a directory without the audit's report: audit it first
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env=env(tmp_path, build_dir, LINGPROBE_SAMPLE_PLAN=str(tmp_path / "not_audited")))
    lines = [l for l in p.stderr.splitlines() if "SAMPLE_PLAN" in l]
    assert len(lines) == 1 and "lingprobe audit" in lines[0], p.stderr


def test_a_plan_without_snapshots_or_counters_says_it_does_nothing(build_dir, tmp_path):
    """A new user ran the plan workflow without SNAPSHOTS=1: no plan line, no snapshots, no word why."""
    script = tmp_path / "job.py"
    script.write_text("import torch\nprint(torch.ones(2).sum().item())\n")
    (tmp_path / "earlier" / "reports").mkdir(parents=True)
    (tmp_path / "earlier" / "reports" / "coverage_audit.json").write_text("{}")
    e = env(tmp_path, build_dir, LINGPROBE_SAMPLE_PLAN=str(tmp_path / "earlier"))
    del e["LINGPROBE_SNAPSHOTS"]
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=e)
    assert p.returncode == 0 and "2.0" in p.stdout, p.stderr
    lines = [l for l in p.stderr.splitlines() if "SAMPLE_PLAN" in l]
    assert len(lines) == 1 and "neither LINGPROBE_SNAPSHOTS=1 nor LINGPROBE_PROFILE=1" in lines[0], p.stderr


def test_a_cpu_program_where_only_gpu_calls_are_sampled_says_so_at_exit(build_dir, tmp_path):
    """On a GPU machine the default samples GPU calls only; a CPU job there would end with no evidence and no word.
    LINGPROBE_SAMPLE_DEVICES=gpu stands in for that machine here."""
    script = tmp_path / "job.py"
    script.write_text("import torch\nprint(torch.mm(torch.ones(3, 5), torch.ones(5, 7)).sum().item())\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env=env(tmp_path, build_dir, LINGPROBE_SAMPLE_DEVICES="gpu"))
    assert p.returncode == 0 and "105.0" in p.stdout, p.stderr
    lines = [l for l in p.stderr.splitlines() if "not sampled" in l]
    assert len(lines) == 1 and "LINGPROBE_SAMPLE_DEVICES=any" in lines[0], p.stderr
    (run,) = metadata.run_dirs(tmp_path / "out")
    assert not (run / "snapshots").exists() or not list((run / "snapshots").glob("*.pt"))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env=env(tmp_path / "any", build_dir, LINGPROBE_SAMPLE_DEVICES="any"))
    assert p.returncode == 0 and "not sampled" not in p.stderr, p.stderr
    (run,) = metadata.run_dirs(tmp_path / "any" / "out")
    assert list((run / "snapshots").glob("*.pt"))


def test_counter_windows_that_spent_their_budget_say_so_at_exit(build_dir, cli, tmp_path):
    """A decode loop's new shapes spend the counter windows' stall budget (the GPU corpus's generate() loop: 300 s),
    then later calls go without counters: said at exit, before the last line, with the option. A budget of 0 s stands
    in for a spent one here (the budget is checked before a window looks for a GPU)."""
    script = tmp_path / "job.py"
    script.write_text("import torch\nx = torch.ones(3, 5)\nfor n in range(1, 9):\n    torch.mm(x, torch.ones(5, n))\n"
                      "print('ok')\n")
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env=env(tmp_path, build_dir, LINGPROBE_PROFILE="1", LINGPROBE_PROFILE_BUDGET_S="0",
                               LINGPROBE_OPS="aten::mm"))
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr
    lines = [l for l in p.stderr.splitlines() if l.startswith("[lingprobe")]
    assert "counter windows held the program 0.0 s, all of LINGPROBE_PROFILE_BUDGET_S=0: 8 later sampled call(s) " \
           "got no counters (budget_profile;" in lines[-2] and "recorded " in lines[-1], p.stderr
    (run,) = metadata.run_dirs(tmp_path / "out")
    assert subprocess.run([cli, "audit", str(run)], capture_output=True, timeout=300).returncode == 0
    assert "| `aten::mm` | snapshot | counters: budget_profile |" in (run / "reports" / "summary.md").read_text()
    quiet = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                           env=env(tmp_path / "default", build_dir, LINGPROBE_PROFILE="1"))
    assert quiet.returncode == 0 and "counter windows held" not in quiet.stderr, quiet.stderr


def test_trunc_normal_init_counts_as_set_up_and_leaves_the_budget_to_the_forward(build_dir, tmp_path):
    """A new user's swin_t: trunc_normal_ (uniform_, then erfinv_, mul_, add_ and clamp_ in place on each weight)
    was counted as compute, its snapshots 377 MB of 758 MB, its erfinv_ the whole 'Top by time' table."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import torch
        layers = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])
        for m in layers:
            torch.nn.init.trunc_normal_(m.weight, std=0.02)
        with torch.no_grad():
            layers(torch.randn(8, 512))
        print("ok")
    """))
    # 1 MB each weight, copied before and after: every init step is over the set-up share (an eighth of 8 MB)
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env=env(tmp_path, build_dir, LINGPROBE_SAMPLE_BUDGET_PROCESS=str(8 * 2**20)))
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr
    (run,) = metadata.run_dirs(tmp_path / "out")
    refused = {r["op"].split(".")[0] for r in records(run, "refusal") if r["reason"] == "setup_share"}
    assert {"aten::erfinv_", "aten::mul_", "aten::add_", "aten::clamp_"} <= refused, refused
    ops = snapshot_ops(run)
    assert "aten.linear.default" in ops and not ops["aten.linear.default"][0]["setup_call"], sorted(ops)
    assert not [op for op, docs in ops.items() for d in docs if op != "aten.linear.default" and not d["setup_call"]
                and op.split(".")[1] in ("erfinv_", "mul_", "add_", "clamp_")], sorted(ops)


def test_snapshots_make_torch_warn_nothing_a_strict_program_would_die_of(build_dir, tmp_path):
    """A new user's training step under `-W error::UserWarning`: the set-up rule read `.grad` of an activation
    written in place (`h.relu_()`, resnet's `out += identity`), and torch warned that a non-leaf's .grad is not
    populated; the program died of the warning with snapshots on, and ran without them."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import torch
        w = torch.randn(4, requires_grad=True)
        h = w * 2
        h.relu_()
        g = w * 3
        g += 1
        (h + g).sum().backward()
        print("ok", len(w.grad.tolist()))
    """))
    p = subprocess.run([sys.executable, "-W", "error::UserWarning", str(script)], capture_output=True, text=True,
                       timeout=300, env=env(tmp_path, build_dir))
    assert p.returncode == 0 and "ok 4" in p.stdout, p.stderr
    assert "Warning" not in p.stderr, p.stderr
    (run,) = metadata.run_dirs(tmp_path / "out")
    ops = snapshot_ops(run)
    assert not ops["aten.relu_.default"][0]["setup_call"], sorted(ops)  # an activation in the graph: compute


def test_a_dataloader_batch_set_from_a_workers_storage_is_not_snapshotted_and_replay_passes(build_dir, cli, tmp_path):
    """A new user's training job with a fork DataLoader: the batches arrive by `set_(Storage, ...)` from the workers'
    shared memory; their snapshots held a Storage no replay can rebuild, and `lingprobe replay` failed the run."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader, Dataset
        class D(Dataset):
            def __len__(self): return 8
            def __getitem__(self, i): return torch.full((3,), float(i))
        if __name__ == "__main__":
            lin = torch.nn.Linear(3, 2)
            for x in DataLoader(D(), batch_size=4, num_workers=1, multiprocessing_context="fork"):
                print(tuple(lin(x).shape))
    """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                       env=env(tmp_path, build_dir))
    assert p.returncode == 0 and p.stdout.count("(4, 2)") == 2, p.stderr
    (run,) = metadata.run_dirs(tmp_path / "out")
    refused = {(r["op"], r["reason"]) for r in records(run, "refusal")}
    assert ("aten::set_.source_Storage_storage_offset", "unsupported_argument") in refused, refused
    assert not [op for op in snapshot_ops(run) if op.startswith("aten.set_.source_Storage")]
    r = subprocess.run([cli, "replay", str(run)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and " 0 failed" in r.stdout, r.stdout + r.stderr
