"""Evidence across devices and processes on the GPU (issue 26): a key called
on meta, then CPU, then CUDA takes its evidence from the CUDA call; two ranks
share the claims; a key one rank kept in part (its counters, its own byte
budget spent) gets its snapshot from another; a frozen model's move to the
GPU leaves the byte budget to the compute. Each job is built in the process
under test and recorded through plain LD_PRELOAD. Skips without a CUDA device
(CI): run on the GPU machine through scripts/gpu-check.sh pytest
test_third_party_gpu_processes.py."""
import json
import subprocess
import sys
import textwrap

import pytest

from conftest import free_port

import metadata
from test_third_party_gpu import capability, has, preloaded_env

pytestmark = pytest.mark.skipif(not has("torch"), reason="no CUDA device here (CI has none): these runs are on the "
                                "GPU machine through scripts/gpu-check.sh")


MM_ON_THREE_DEVICES = textwrap.dedent("""
    import torch
    for device in ("meta", "cpu", "cuda"):   # one key: the signature strips the device
        a, b = torch.ones(256, 512, device=device), torch.ones(512, 128, device=device)
        torch.mm(a, b)
    torch.cuda.synchronize()
    print("ok")
""")


def test_a_key_called_on_meta_then_cpu_then_cuda_gets_its_evidence_from_the_cuda_call(build_dir, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(MM_ON_THREE_DEVICES)
    env = preloaded_env(build_dir, tmp_path / "out", LINGPROBE_SNAPSHOTS="1", LINGPROBE_PROFILE="1",
                        LINGPROBE_OPS="aten::mm")
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr
    (run,) = metadata.run_dirs(tmp_path / "out")
    import torch
    (snap,) = list((run / "snapshots").glob("*.pt"))
    d = torch.load(snap, weights_only=True)
    assert d["args"][0]["device"].startswith("cuda"), d["args"][0]
    (profile,) = [p for p in (run / "profiles").iterdir() if p.is_dir()]
    assert json.loads((profile / "identity.json").read_text())["status"] == "passed"
    refusals = {(r["evidence"], r["reason"]) for f in metadata.files(run) for r in metadata.read(f)
                if r["kind"] == "refusal"}
    assert refusals == {("snapshot+counters", "no_storage"), ("snapshot+counters", "not_on_gpu")}, refusals


# Two ranks on the one GPU (gloo for the collective: NCCL refuses two ranks on one device), each building the same
# ViT in its own process: claims give each key to one rank, the counter lock serialises the windows.
TWO_RANKS = textwrap.dedent("""
    import torch, torch.distributed as dist, transformers
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(hidden_size=512, num_hidden_layers=2, num_attention_heads=8,
                                 intermediate_size=2048, image_size=224, patch_size=16)
    model = transformers.ViTModel(cfg).cuda().eval()
    x = torch.randn(4, 3, 224, 224, device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(2):
            y = model(pixel_values=x).last_hidden_state
            t = y.float().sum().cpu()
            dist.all_reduce(t)
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print("ok", dist.get_rank() if dist.is_initialized() else "done")
""")


def test_two_ranks_share_the_claims_and_cover_the_flops(build_dir, cli, tmp_path):
    if not has("transformers"):
        pytest.skip("transformers is not installed here")
    script = tmp_path / "job.py"
    script.write_text(TWO_RANKS)
    env = preloaded_env(build_dir, tmp_path / "out", LINGPROBE_SNAPSHOTS="1", LINGPROBE_PROFILE="1")
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(free_port()),
                        str(script)], env=env, capture_output=True, text=True, timeout=540)
    assert p.returncode == 0, p.stderr[-3000:]
    (run,) = metadata.run_dirs(tmp_path / "out")
    report = subprocess.run([cli, "report", str(run)], capture_output=True, text=True, timeout=300)
    audit = subprocess.run([cli, "audit", str(run)], capture_output=True, text=True, timeout=300)
    assert report.returncode == 0 and audit.returncode == 0, report.stderr + audit.stderr
    cov = json.loads((run / "reports" / "coverage_audit.json").read_text())
    assert len(metadata.files(run)) == 2, metadata.files(run)
    # one snapshot per signature in the launch, whichever rank reached it first; both ranks took some
    paths = [r["path"] for f in metadata.files(run) for r in metadata.read(f) if r["kind"] == "snapshot"]
    rows = [r for r in cov["rows"] if r["snapshot"]]
    assert rows and len(paths) == len(set(paths)) == len({r["signature_sha256"] for r in rows}), (len(paths), len(rows))
    whole = capability(run)["whole_run"]
    share = whole["attributed_flops"] / whole["flops"]
    print(f"two ranks: counters cover {share:.1%} of {whole['flops']:.3g} FLOPs")
    assert share >= 0.95, whole


# Two processes of one launch, one after the other: rank 0's own byte budget takes no snapshot, so its keys get their
# counters only; rank 1, with bytes to spare, takes their snapshots and opens no counter window for them.
MLP = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 512)).cuda()
    x = torch.randn(64, 512, device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            y = m(x)
    torch.cuda.synchronize()
    print("ok")
""")


def evidence_by_signature(path):
    records = metadata.read(path)
    sha_of = {r["id"]: r["sha256"] for r in records if r["kind"] == "signature"}
    return ({sha_of[r["id"]] for r in records if r["kind"] == "snapshot"},
            {sha_of[r["id"]] for r in records if r["kind"] == "profile"})


def test_a_key_whose_snapshot_one_rank_could_not_take_gets_it_from_another(build_dir, cli, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(MLP)
    for rank, extra in ((0, {"LINGPROBE_SAMPLE_BUDGET_PROCESS": "1"}), (1, {})):
        env = preloaded_env(build_dir, tmp_path / "out", LINGPROBE_SNAPSHOTS="1", LINGPROBE_PROFILE="1",
                            LINGPROBE_RUN_ID="partial", LINGPROBE_WORLD_SIZE="2", LINGPROBE_RANK=str(rank), **extra)
        p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0 and "ok" in p.stdout, p.stderr[-3000:]
    (run,) = metadata.run_dirs(tmp_path / "out")
    by_rank = {metadata.read(f)[0]["rank"]: evidence_by_signature(f) for f in metadata.files(run)}
    (snapshots0, profiles0), (snapshots1, profiles1) = by_rank[0], by_rank[1]
    print(f"rank 0: {len(snapshots0)} snapshots, {len(profiles0)} profiles; "
          f"rank 1: {len(snapshots1)} snapshots, {len(profiles1)} profiles")
    assert not snapshots0 and profiles0, (snapshots0, profiles0)
    assert profiles0 <= snapshots1, profiles0 - snapshots1  # before: rank 0's claims were done, rank 1 took nothing
    assert not profiles1 & profiles0, profiles1 & profiles0  # no second counter window for a signature
    report = subprocess.run([cli, "report", str(run)], capture_output=True, text=True, timeout=300)
    audit = subprocess.run([cli, "audit", str(run)], capture_output=True, text=True, timeout=300)
    assert report.returncode == 0 and audit.returncode == 0, report.stdout + report.stderr + audit.stdout + audit.stderr
    whole = capability(run)["whole_run"]
    assert whole["attributed_flops"] / whole["flops"] >= 0.95, whole
    rows = json.loads((run / "reports" / "coverage_audit.json").read_text())["rows"]
    # the compute's rows hold rank 1's snapshot and rank 0's counters (a kernel-less op's profile holds no counters)
    split = [r for r in rows if r["signature_sha256"] in profiles0
             and r["signature"]["op"] in ("aten.linear.default", "aten.gelu.default")]
    assert len(split) == 3 and all(r["snapshot"] and r["profile"] for r in split), split


# A frozen model, as inference pipelines hold one (requires_grad_(False)), built on the CPU and moved to the GPU,
# with a byte budget its move alone would spend: each weight's `to` took a snapshot of compute before 2026-12-07.
FROZEN = textwrap.dedent("""
    import torch, torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval().requires_grad_(False).cuda()
    x = torch.randn(2, 3, 64, 64, device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(2):
            y = model(x)
    torch.cuda.synchronize()
    print("ok")
""")


def test_a_frozen_models_move_to_the_gpu_leaves_the_budget_to_the_compute(build_dir, tmp_path):
    if not has("torchvision"):
        pytest.skip("torchvision is not installed here")
    script = tmp_path / "job.py"
    script.write_text(FROZEN)
    env = preloaded_env(build_dir, tmp_path / "out", LINGPROBE_SNAPSHOTS="1",
                        LINGPROBE_SAMPLE_BUDGET_PROCESS=str(64 * 2**20))
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr[-3000:]
    (run,) = metadata.run_dirs(tmp_path / "out")
    (f,) = metadata.files(run)
    records = metadata.read(f)
    refusals = {(r["op"], r["reason"]) for r in records if r["kind"] == "refusal"}
    print("frozen resnet18: refusals", sorted(refusals))
    assert not {reason for _, reason in refusals} & {"budget_process", "budget_run", "budget_device"}, sorted(refusals)
    ops = {r["id"]: json.loads(r["signature_json"])["op"] for r in records if r["kind"] == "signature"}
    snapshotted = {ops[r["id"]] for r in records if r["kind"] == "snapshot"}
    assert {"aten.conv2d.default", "aten.linear.default"} <= snapshotted, sorted(snapshotted)
