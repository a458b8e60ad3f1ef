"""Evidence by default on third-party models (issue 26), on the GPU: each
model is built in the process under test (one on the meta device, then
to_empty and its own init), runs under torch.autocast(bfloat16), and is
recorded through plain LD_PRELOAD with nothing but LINGPROBE_SNAPSHOTS=1
LINGPROBE_PROFILE=1. The capability report must cover the run's FLOPs with
counters, no job may stand above its roof, and every snapshot replays
exactly. Skips without a CUDA device (CI): run on the GPU machine through
scripts/gpu-check.sh pytest test_third_party_gpu.py."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import metadata


def has(module):
    code = f"import torch, sys, {module}; sys.exit(not torch.cuda.is_available())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


pytestmark = pytest.mark.skipif(not has("torch"), reason="no CUDA device here (CI has none): the third-party corpus "
                                "runs on the GPU machine through scripts/gpu-check.sh")

# A Hugging Face Llama built on the meta device, materialised with to_empty and initialised by its own
# _init_weights; three forwards under bf16 autocast, one with an fp32 autocast region inside (the LM head).
LLAMA = textwrap.dedent("""
    import torch, transformers
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                                   num_attention_heads=16, num_key_value_heads=8, vocab_size=32000)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    model.to_empty(device="cuda")
    model.apply(model._init_weights)
    model.eval()
    ids = torch.randint(0, 32000, (1, 512), device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            h = model.model(ids).last_hidden_state
            with torch.autocast("cuda", enabled=False):
                logits = model.lm_head(h.float())
    torch.cuda.synchronize()
    print("ok", logits.dtype)
""")

# torchvision's resnet50 built on the CPU and moved (its init and .cuda() are set-up calls), with a stage map.
RESNET = textwrap.dedent("""
    import torch, torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet50().cuda().eval()
    x = torch.randn(8, 3, 224, 224, device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            y = model(x)
    torch.cuda.synchronize()
    print("ok", y.dtype)
""")

MODELS = {
    "llama": (LLAMA, "transformers", {}),
    "resnet50": (RESNET, "torchvision", {"LINGPROBE_STAGE_MAP": "backbone=ResNet"}),
}


def recorded(name, build_dir, tmp):
    code, module, extra = MODELS[name]
    if not has(module):
        pytest.skip(f"{module} is not installed here")
    script = tmp / "job.py"
    script.write_text(code)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k not in ("PYTHONPATH", "LD_PRELOAD")}
    env.update(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(tmp / "out"),
               LINGPROBE_SNAPSHOTS="1", LINGPROBE_PROFILE="1", **extra)
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=540)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr[-3000:]
    (run,) = metadata.run_dirs(tmp / "out")
    return run


@pytest.fixture(scope="module", params=sorted(MODELS))
def model_run(request, build_dir, cli, tmp_path_factory):
    run = recorded(request.param, build_dir, tmp_path_factory.mktemp(request.param))
    replay = subprocess.run([cli, "replay", str(run)], capture_output=True, text=True, timeout=540)
    report = subprocess.run([cli, "report", str(run)], capture_output=True, text=True, timeout=300)
    audit = subprocess.run([cli, "audit", str(run)], capture_output=True, text=True, timeout=300)
    keep = os.environ.get("LPTEST_KEEP")
    if keep:
        import shutil
        dest = os.path.join(keep, "third_party", request.param)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(run / "reports", dest)
        for name, p in (("replay", replay), ("report", report), ("audit", audit)):
            with open(os.path.join(dest, name + ".log"), "w") as f:
                f.write(p.stdout + p.stderr)
    return request.param, run, replay, report, audit


def capability(run):
    (path,) = list((run / "reports").glob("**/capability_report.json"))
    return json.loads(path.read_text())


def test_counters_cover_the_flops_by_default(model_run):
    name, run, replay, report, audit = model_run
    assert report.returncode == 0, report.stdout + report.stderr
    whole = capability(run)["whole_run"]
    share = whole["attributed_flops"] / whole["flops"]
    print(f"{name}: counters cover {share:.1%} of {whole['flops']:.3g} FLOPs")
    assert share >= 0.95, whole


def test_no_job_stands_above_its_roof(model_run):
    name, run, replay, report, audit = model_run
    jobs = capability(run)["jobs"]
    over = [(j["signature"]["op"], j["math_mode"], j["fraction_of_peak_flops"]) for j in jobs if j.get("over_roof")]
    assert not over, over
    gemms = [j for j in jobs if j["signature"]["op"] in ("aten.linear.default", "aten.conv2d.default")
             and j["status"] == "passed"]
    assert gemms and all(j["math_mode"] == "bf16" for j in gemms if j["signature"]["output"]["dtype"] == "torch.bfloat16")


def test_every_snapshot_replays_exactly(model_run):
    name, run, replay, report, audit = model_run
    n = len(list((run / "snapshots").glob("*.pt")))
    assert n > 0
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-2000:]
    assert f"replayed {n} snapshot(s):" in replay.stdout and " 0 inexact, " in replay.stdout and " 0 failed" in \
        replay.stdout, replay.stdout[-3000:]
    nondet = [line for line in replay.stdout.splitlines() if line.startswith("nondet ")]
    print(f"{name}: nondeterministic: {sorted({line.split()[2] for line in nondet})}")
    assert all("random op" in line or "uninitialised" in line for line in nondet), nondet  # by definition only
    assert "frame #" not in replay.stdout + replay.stderr


def test_construction_left_the_budgets_to_the_compute(model_run):
    name, run, replay, report, audit = model_run
    refusals = [r for f in metadata.files(run) for r in metadata.read(f) if r["kind"] == "refusal"]
    reasons = {r["reason"] for r in refusals}
    print(f"{name}: refusal reasons {sorted(reasons)}")
    assert audit.returncode == 0, audit.stdout + audit.stderr


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
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k not in ("PYTHONPATH", "LD_PRELOAD")}
    env.update(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(tmp_path / "out"),
               LINGPROBE_SNAPSHOTS="1", LINGPROBE_PROFILE="1", LINGPROBE_OPS="aten::mm")
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
