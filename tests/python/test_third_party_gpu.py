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


def clean_env():
    """This environment without lingprobe: no LINGPROBE_ options, no LD_PRELOAD, no PYTHONPATH (the shim)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k not in ("PYTHONPATH", "LD_PRELOAD")}


def preloaded_env(build_dir, out, **options):
    """A new user's environment: plain LD_PRELOAD, LINGPROBE_OUT and the options given."""
    return {**clean_env(), "LD_PRELOAD": str(build_dir / "liblingprobe_preload.so"), "LINGPROBE_OUT": str(out),
            **options}


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

# T5 (encoder-decoder, its own matmul attention), built on the CPU and moved; no stage map.
T5 = textwrap.dedent("""
    import torch, transformers
    torch.manual_seed(0)
    cfg = transformers.T5Config(d_model=512, d_ff=2048, num_layers=4, num_decoder_layers=4, num_heads=8,
                                vocab_size=32128)
    model = transformers.T5ForConditionalGeneration(cfg).cuda().eval()
    ids = torch.randint(0, 32128, (2, 256), device="cuda")
    dec = torch.randint(0, 32128, (2, 64), device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            y = model(input_ids=ids, decoder_input_ids=dec).logits
    torch.cuda.synchronize()
    print("ok", y.dtype)
""")

# A Hugging Face ViT, built directly on the GPU, with a stage map on its encoder.
VIT = textwrap.dedent("""
    import torch, transformers
    torch.manual_seed(0)
    cfg = transformers.ViTConfig(hidden_size=768, num_hidden_layers=4, num_attention_heads=12,
                                 intermediate_size=3072, image_size=224, patch_size=16)
    with torch.device("cuda"):
        model = transformers.ViTModel(cfg).eval()
    x = torch.randn(8, 3, 224, 224, device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            y = model(pixel_values=x).last_hidden_state
    torch.cuda.synchronize()
    print("ok", y.dtype)
""")

# timm's ConvNeXt-Tiny (random init, no download).
TIMM = textwrap.dedent("""
    import torch, timm
    torch.manual_seed(0)
    model = timm.create_model("convnext_tiny", pretrained=False).cuda().eval()
    x = torch.randn(8, 3, 224, 224, device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            y = model(x)
    torch.cuda.synchronize()
    print("ok", y.dtype)
""")

# torch.nn.Transformer (encoder and decoder), batch first.
NN_TRANSFORMER = textwrap.dedent("""
    import torch
    torch.manual_seed(0)
    model = torch.nn.Transformer(d_model=512, nhead=8, num_encoder_layers=3, num_decoder_layers=3,
                                 dim_feedforward=2048, batch_first=True).cuda().eval()
    src, tgt = torch.randn(4, 256, 512, device="cuda"), torch.randn(4, 128, 512, device="cuda")
    mask = torch.nn.Transformer.generate_square_subsequent_mask(128, device="cuda")
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(3):
            y = model(src, tgt, tgt_mask=mask)
    torch.cuda.synchronize()
    print("ok", y.dtype)
""")

# A Hugging Face generate() decode loop: the KV cache grows every step, so attention keys are new at each step
# (the stall budget bounds their windows); greedy, 24 new tokens.
GENERATE = textwrap.dedent("""
    import torch, transformers
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=1024, intermediate_size=2816, num_hidden_layers=4,
                                   num_attention_heads=16, num_key_value_heads=8, vocab_size=32000)
    model = transformers.LlamaForCausalLM(cfg).cuda().eval()
    ids = torch.randint(0, 32000, (1, 32), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=24, min_new_tokens=24,
                             do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    print("ok", out.shape)
""")

MODELS = {
    "llama": (LLAMA, "transformers", {}),
    "resnet50": (RESNET, "torchvision", {"LINGPROBE_STAGE_MAP": "backbone=ResNet"}),
    "t5": (T5, "transformers", {}),
    "vit": (VIT, "transformers", {"LINGPROBE_STAGE_MAP": "encoder=ViTEncoder"}),
    "timm_convnext": (TIMM, "timm", {}),
    "nn_transformer": (NN_TRANSFORMER, "torch", {}),
    "llama_generate": (GENERATE, "transformers", {}),
}


def recorded(name, build_dir, tmp):
    code, module, extra = MODELS[name]
    if not has(module):
        pytest.skip(f"{module} is not installed here")
    script = tmp / "job.py"
    script.write_text(code)
    env = preloaded_env(build_dir, tmp / "out", LINGPROBE_SNAPSHOTS="1", LINGPROBE_PROFILE="1", **extra)
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=540)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr[-3000:]
    (run,) = metadata.run_dirs(tmp / "out")
    return run


# The same program without lingprobe under torch.profiler: what its kernels really took.
TRACED = textwrap.dedent("""
    import runpy, sys
    from torch.profiler import profile, ProfilerActivity
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        runpy.run_path(sys.argv[1], run_name="__main__")
    prof.export_chrome_trace(sys.argv[2])
""")


def against_trace(name, run, cli, tmp):
    """validate --against-trace of the run, against the same program traced without lingprobe: its JSON."""
    (tmp / "traced.py").write_text(TRACED)
    clean = clean_env()
    p = subprocess.run([sys.executable, str(tmp / "traced.py"), str(tmp / "job.py"), str(tmp / "trace.json")],
                       env={**clean, **MODELS[name][2]}, capture_output=True, text=True, timeout=540)
    assert p.returncode == 0, p.stderr[-3000:]
    out = tmp / "against_trace.json"
    v = subprocess.run([cli, "validate", str(run), "--against-trace", str(tmp / "trace.json"), "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert out.exists(), v.stdout[-2000:] + v.stderr[-2000:]
    return v.stdout, json.loads(out.read_text())


@pytest.fixture(scope="module", params=sorted(MODELS))
def model_run(request, build_dir, cli, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(request.param)
    run = recorded(request.param, build_dir, tmp)
    replay = subprocess.run([cli, "replay", str(run)], capture_output=True, text=True, timeout=540)
    report = subprocess.run([cli, "report", str(run)], capture_output=True, text=True, timeout=300)
    audit = subprocess.run([cli, "audit", str(run)], capture_output=True, text=True, timeout=300)
    traced_text, traced = against_trace(request.param, run, cli, tmp)
    keep = os.environ.get("LPTEST_KEEP")
    if keep:
        import shutil
        dest = os.path.join(keep, "third_party", request.param)
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(run / "reports", dest)
        for name, text in (("replay", replay.stdout + replay.stderr), ("report", report.stdout + report.stderr),
                           ("audit", audit.stdout + audit.stderr), ("against_trace", traced_text)):
            with open(os.path.join(dest, name + ".log"), "w") as f:
                f.write(text)
    return request.param, run, replay, report, audit, traced


def capability(run):
    (path,) = list((run / "reports").glob("**/capability_report.json"))
    return json.loads(path.read_text())


def test_counters_cover_the_flops_by_default(model_run):
    name, run, replay, report, audit, traced = model_run
    assert report.returncode == 0, report.stdout + report.stderr
    whole = capability(run)["whole_run"]
    share = whole["attributed_flops"] / whole["flops"]
    print(f"{name}: counters cover {share:.1%} of {whole['flops']:.3g} FLOPs")
    assert share >= 0.95, whole


def test_counters_cover_every_key_that_dominates_the_real_kernel_time(model_run):
    name, run, replay, report, audit, traced = model_run
    heavy = traced["heavy_keys"]
    print(f"{name}: {len(heavy) - traced['heavy_keys_without_counters']} of {len(heavy)} keys with >= 1% of the "
          f"unprofiled run's kernel time have counters")
    assert heavy and not traced["heavy_keys_without_counters"], [k for k in heavy if not k["counters"]]


def test_no_job_stands_above_its_roof(model_run):
    name, run, replay, report, audit, traced = model_run
    jobs = capability(run)["jobs"]
    over = [(j["signature"]["op"], j["math_mode"], j["over_roof_fraction"]) for j in jobs if j.get("over_roof")]
    assert not over, over
    gemms = [j for j in jobs if j["signature"]["op"] in ("aten.linear.default", "aten.conv2d.default")
             and j["status"] == "passed"]
    if name == "nn_transformer":  # its attention's projections are addmm/linear inside the MHA op; not all linear
        gemms = gemms or [j for j in jobs if j["status"] == "passed" and j["flops_per_call"]]
    assert gemms and all(j["math_mode"] == "bf16" for j in gemms if j["signature"]["output"]["dtype"] == "torch.bfloat16")


def test_every_snapshot_replays_exactly(model_run):
    name, run, replay, report, audit, traced = model_run
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
    name, run, replay, report, audit, traced = model_run
    refusals = [r for f in metadata.files(run) for r in metadata.read(f) if r["kind"] == "refusal"]
    reasons = {r["reason"] for r in refusals}
    print(f"{name}: refusal reasons {sorted(reasons)}")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    # the model was built (and initialised at random) in the process: no byte budget ran out, construction's
    # calls held to their share (setup_share), and the compute's GEMMs have their snapshots
    # (budget_profile is the counter windows' stall budget: a decode loop's new shapes spend it, by design)
    assert not reasons & {"budget_process", "budget_run", "budget_device"}, sorted(reasons)
    snapshotted = set()
    for f in metadata.files(run):
        records = metadata.read(f)
        sha_of = {r["id"]: r["sha256"] for r in records if r["kind"] == "signature"}
        snapshotted |= {sha_of[r["id"]] for r in records if r["kind"] == "snapshot"}
    gemms = [j for j in capability(run)["jobs"] if j["signature"]["op"] in ("aten.linear.default", "aten.conv2d.default")]
    assert gemms or name == "nn_transformer", name  # its GEMMs run inside the fused encoder-layer op
    assert all(j["signature_sha256"] in snapshotted for j in gemms), [j["signature"]["op"] for j in gemms]


# A Llama forward large enough for kernels of 20 us and more, run twice: under lingprobe with counters, and without
# lingprobe under torch.profiler. Each key's timed call (its second, LINGPROBE_PROFILE_TIMING: CUPTI Activity alone)
# against the same call's kernels in the trace; a key called once, its profiled call (the counters' own time).
TIMED = textwrap.dedent("""
    import sys, torch, transformers
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=2,
                                   num_attention_heads=16, num_key_value_heads=8, vocab_size=32000)
    model = transformers.LlamaForCausalLM(cfg).cuda().eval()
    # two sequence lengths: each shape its own keys, so that one kernel's run-to-run spread (the cuDNN attention's
    # first executions spread by up to 5.8% across unprofiled runs) is not a seventh of the gate
    ids = [torch.randint(0, 32000, (1, n), device="cuda") for n in (2048, 3072)]
    def forwards():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            for _ in range(2):
                for x in ids:
                    model(x)
        torch.cuda.synchronize()
    if len(sys.argv) > 1:
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            forwards()
        prof.export_chrome_trace(sys.argv[1])
    else:
        forwards()
    print("ok")
""")


@pytest.mark.xfail(strict=False, reason="issue 26's gate (90% of kernels >= 20 us within 3%): 2 of 5 H100 runs passed "
                   "since timed calls wait 2 ms after a counter window's call (96%, 96%; 84.6%, 88.5%, 88.0%), and "
                   "4 of 8 since timed calls are read in batches (92.6%, 96.0%, 92.6%, 92.3%; 88.9%, 88.5%, 84.0%, "
                   "88.9%); two unprofiled runs agree 80.8-100% within 3% (--noise-trace). Not yet run on the H200. "
                   "docs/COUNTERS.md, docs/gpu/gate-h100-2026-12-07-session14")
def test_the_reported_kernel_time_matches_the_real_execution(build_dir, cli, tmp_path):
    if not has("transformers"):
        pytest.skip("transformers is not installed here")
    script = tmp_path / "job.py"
    script.write_text(TIMED)
    clean = clean_env()
    # traced twice without lingprobe: the second trace shows the method's own noise (validate --noise-trace)
    trace, second = tmp_path / "trace.json", tmp_path / "trace2.json"
    for path in (trace, second):
        p = subprocess.run([sys.executable, str(script), str(path)], env=clean, capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr[-3000:]
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=400,
                       env={**clean, "LD_PRELOAD": str(build_dir / "liblingprobe_preload.so"),
                            "LINGPROBE_OUT": str(tmp_path / "out"), "LINGPROBE_PROFILE": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    (run,) = metadata.run_dirs(tmp_path / "out")
    out = tmp_path / "against_trace.json"
    v = subprocess.run([cli, "validate", str(run), "--against-trace", str(trace), "--noise-trace", str(second),
                        "--json", str(out)],
                       capture_output=True, text=True, timeout=300)
    keep = os.environ.get("LPTEST_KEEP")
    if keep:
        os.makedirs(os.path.join(keep, "third_party"), exist_ok=True)
        with open(os.path.join(keep, "third_party", "against_trace.txt"), "w") as f:
            f.write(v.stdout + v.stderr)
        import gzip, shutil
        shutil.copy(out, os.path.join(keep, "third_party", "against_trace.json")) if out.exists() else None
        for f in (run / "metadata").glob("*.jsonl"):  # the timed calls' records: their op-thread split
            shutil.copy(f, os.path.join(keep, "third_party", "against_trace_" + f.name))
        for path, name in ((trace, "against_trace_trace.json.gz"), (second, "against_trace_trace2.json.gz")):
            with open(path, "rb") as src, gzip.open(os.path.join(keep, "third_party", name), "wb") as dst:
                shutil.copyfileobj(src, dst)
    print(v.stdout[-4000:])
    assert v.returncode == 0, v.stdout[-4000:] + v.stderr
    rows = json.loads(out.read_text())["calls"]
    assert any(r["source"] == "activity" and r["gated"] for r in rows), rows

