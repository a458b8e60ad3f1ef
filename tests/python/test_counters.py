"""Inline CUPTI counters (issue 13) on a real GPU: sampled calls' kernels
measured inside the live process, their files, the counters probe, and the
agreement with Nsight Compute on the same calls. Skips without a CUDA
device (CI): these run on the GPU machine through scripts/gpu-check.sh."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

import metadata

ROOT = pathlib.Path(__file__).resolve().parents[2]


def has_cuda():
    return subprocess.run([sys.executable, "-c", "import torch, sys; sys.exit(not torch.cuda.is_available())"]).returncode == 0


pytestmark = pytest.mark.skipif(not has_cuda(), reason="no CUDA device here (CI has none): counters run on the GPU "
                                "machine through scripts/gpu-check.sh")

JOB = textwrap.dedent("""
    import sys, torch, torch.nn.functional as F
    torch.manual_seed(0)
    dev = torch.device("cuda")
    if "--profiler-first" in sys.argv:               # torch.profiler before lingprobe's first window
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            torch.mm(torch.randn(64, 64, device=dev), torch.randn(64, 64, device=dev))
        assert any(e.device_type == torch.autograd.DeviceType.CUDA for e in prof.events()), "profiler saw no GPU event"
    x = torch.randn(1, 4 * 2640, 5120, device=dev, dtype=torch.bfloat16)
    view = torch.chunk(x, 4, dim=1)[1]               # the seed's DiT input layout
    w = torch.randn(5120, 5120, device=dev, dtype=torch.bfloat16)
    F.linear(view, w)                                # bf16 GEMM
    F.conv3d(torch.randn(1, 96, 3, 482, 210, device=dev), torch.randn(96, 96, 3, 3, 3, device=dev),
             torch.randn(96, device=dev))            # fp32 conv3d (cuDNN, TF32)
    (torch.rand(3, 9, 704, 1280, device=dev) * 255).to(torch.uint8)
    torch.cuda.synchronize()
    if "--profiler-after" in sys.argv:               # torch.profiler after lingprobe's windows: complete
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            torch.mm(torch.randn(64, 64, device=dev), torch.randn(64, 64, device=dev))
            torch.cuda.synchronize()
        assert any(e.device_type == torch.autograd.DeviceType.CUDA for e in prof.events()), "profiler saw no GPU event"
    print("ok")
""")


def run(tmp_path, build_dir, *args, **extra):
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k not in ("PYTHONPATH", "LD_PRELOAD")}
    env.update(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(tmp_path / "out"),
               LINGPROBE_SNAPSHOTS="1", LINGPROBE_PROFILE="1", LINGPROBE_OPS="aten::linear,aten::conv3d,aten::to",
               **extra)
    p = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr[-3000:]
    (run_dir,) = metadata.run_dirs(tmp_path / "out")
    return run_dir


def profiles(run_dir):
    out = {}
    for d in sorted((run_dir / "profiles").iterdir()):
        ident = json.loads((d / "identity.json").read_text())
        out[json.loads(ident["signature_json"])["op"]] = (d, ident, json.loads((d / "kernels.json").read_text()))
    return out


@pytest.fixture(scope="module")
def counted(build_dir, tmp_path_factory):
    return run(tmp_path_factory.mktemp("counters"), build_dir)


def test_every_sampled_call_is_profiled_inline_with_the_seed_metrics(counted):
    recs = [r for f in metadata.files(counted) for r in metadata.read(f)]
    (probe,) = [r for r in recs if r["kind"] == "counters_probe"]
    assert probe["available"] and probe["chip"] == "GH100" and probe["passes"] == 8, probe
    prof = profiles(counted)
    assert set(prof) == {"aten.linear.default", "aten.conv3d.default", "aten.to.dtype"}
    for op, (d, ident, kernels) in prof.items():
        assert ident["status"] == "passed", (op, ident.get("reason"))
        assert kernels and ident["ranges"] == len(kernels)
        for k in kernels:
            assert len(k["metrics"]) == 10 and k["mangled_name"] and k["grid"] and k["block"]
            assert k["metrics"]["gpu__time_duration.sum"]["value"] > 0
        print(f"\n{op}: {len(kernels)} kernel(s), {ident['window_seconds']:.2f} s window, "
              + ", ".join(f"{k['name'][:40]} {k['metrics']['gpu__time_duration.sum']['value']:.1f} us" for k in kernels))
    assert len(prof["aten.conv3d.default"][2]) >= 2  # cuDNN's layout transforms and the conv kernel
    profile_recs = [r for r in recs if r["kind"] == "profile"]
    assert len(profile_recs) == 3 and all(r["status"] == "passed" for r in profile_recs)


def test_audit_counts_the_counters_as_this_runs_evidence(counted, cli):
    a = subprocess.run([cli, "audit", "--quiet", str(counted)], capture_output=True, text=True)
    assert a.returncode == 0, a.stderr
    report = json.loads((counted / "reports" / "coverage_audit.json").read_text())
    assert report["coverage"]["counters"]["by_signatures"]["fraction"] == 1.0
    assert all(r["kernel_time_us_per_call"] > 0 for r in report["rows"])


@pytest.mark.skipif(not shutil.which("ncu"), reason="Nsight Compute (ncu) not on PATH")
def test_inline_counters_agree_with_nsight_compute(counted, cli, tmp_path):
    r = subprocess.run([cli, "replay", "--quiet", str(counted)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    out = tmp_path / "validate.json"
    v = subprocess.run([sys.executable, "-m", "lingprobe.validate", str(counted), "--runs", "2", "--json", str(out)],
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "python_shim")), capture_output=True, text=True,
                       timeout=900)
    print("\n" + v.stdout + v.stderr[-2000:])
    if out.exists() and os.environ.get("LPTEST_KEEP"):
        shutil.copy(out, os.path.join(os.environ["LPTEST_KEEP"], "validate-counters.json"))
    report = json.loads(out.read_text())
    assert report["pairs"] > 0 and report["within"] >= 0.9 * report["pairs"], v.stdout


def test_torch_profiler_before_and_after_lingprobe(build_dir, tmp_path):
    before = run(tmp_path / "before", build_dir, "--profiler-first")
    after = run(tmp_path / "after", build_dir, "--profiler-after")
    for run_dir in (before, after):
        for op, (d, ident, kernels) in profiles(run_dir).items():
            assert ident["status"] == "passed", (run_dir.name, op, ident.get("reason"))
    # Kineto keeps CUPTI's subscriber after its first session: the graph guard could not be armed then
    assert not any(i["graph_guard"] for _, i, _ in profiles(before).values())
    assert all(i["graph_guard"] for _, i, _ in profiles(after).values())
