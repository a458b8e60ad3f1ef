"""Large tensors on the GPU (issue 26 item 5): what one DiT-sized snapshot costs, and the host route of calls whose
device copies could never fit LINGPROBE_SAMPLE_BUDGET_DEVICE (docs/SNAPSHOTS.md, "Large tensors"). Skips without a
CUDA device (CI): run on the GPU machine through scripts/gpu-check.sh pytest test_large_snapshots_gpu.py."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import metadata
from test_third_party_gpu import clean_env, has, preloaded_env

pytestmark = pytest.mark.skipif(not has("torch"), reason="no CUDA device here (CI has none): large snapshots run on "
                                "the GPU machine through scripts/gpu-check.sh")


# What one snapshot of a DiT-sized linear costs (issue 26 item 5): [1,10560,5120] bf16 activation, [5120,5120]
# weight and bias, [1,10560,5120] output.
LARGE = textwrap.dedent("""
    import json, time, torch
    x = torch.randn(1, 10560, 5120, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(5120, 5120, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(5120, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    y = torch.nn.functional.linear(x, w, b)
    torch.cuda.synchronize()
    call_s = time.perf_counter() - t0
    print(json.dumps({"call_s": call_s, "device_peak_extra": torch.cuda.max_memory_allocated() - base}))
""")


def test_the_cost_of_one_large_snapshot(build_dir, tmp_path):
    import time
    script = tmp_path / "job.py"
    script.write_text(LARGE)
    clean = clean_env()
    figures = {}
    for name, extra in (("without", {}), ("with", {"LD_PRELOAD": str(build_dir / "liblingprobe_preload.so"),
                                                     "LINGPROBE_OUT": str(tmp_path / "out"), "LINGPROBE_SNAPSHOTS": "1",
                                                     "LINGPROBE_SAMPLE_OPS": "aten::linear"})):
        t0 = time.perf_counter()
        child = subprocess.Popen([sys.executable, str(script)], env={**clean, **extra}, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
        out = child.stdout.read()
        _, status, usage = os.wait4(child.pid, 0)  # this child's own peak RSS, its exit (the writer's drain) included
        child.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        assert child.returncode == 0, out[-2000:]
        figures[name] = {**json.loads(out.splitlines()[-1]), "process_s": wall, "max_rss_kib": usage.ru_maxrss}
    (run,) = metadata.run_dirs(tmp_path / "out")
    (snap,) = list((run / "snapshots").glob("*.pt"))
    tensor_bytes = (2 * 10560 * 5120 + 5120 * 5120 + 5120) * 2
    figures["snapshot_file_bytes"] = snap.stat().st_size
    figures["tensor_bytes"] = tensor_bytes
    print("large snapshot:", json.dumps(figures))
    keep = os.environ.get("LPTEST_KEEP")
    if keep:
        os.makedirs(os.path.join(keep, "third_party"), exist_ok=True)
        with open(os.path.join(keep, "third_party", "large_snapshot.json"), "w") as f:
            json.dump(figures, f, indent=1)
    assert tensor_bytes <= figures["snapshot_file_bytes"] < tensor_bytes + (1 << 20)


# Calls whose device copies could never fit a 64 MiB device budget (issue 26 item 5): a linear on a contiguous
# 64 MiB activation, an in-place add whose written argument must be copied before it runs, an mm of a transposed
# (non-contiguous) operand, and a repeat whose inputs fit but whose output does not. Each is called 16 times (a
# refused key tries again at calls 2, 4, 8, 16; one buffer is ready at a time, so the four keys take turns), with a
# pause for the writer's thread to allocate the pinned buffer asked for at a refused call. A small linear first
# allocates cuBLAS's workspace.
TOO_LARGE = textwrap.dedent("""
    import json, time, torch
    torch.manual_seed(0)
    x = torch.randn(1, 8192, 4096, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    a = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    small = torch.randn(1024, 4096, device="cuda", dtype=torch.bfloat16)
    acc = torch.zeros(8192, 4096, device="cuda", dtype=torch.bfloat16)
    torch.nn.functional.linear(x[:, :64], w)
    extra, ms = [], []
    for i in range(16):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        y = torch.nn.functional.linear(x, w)
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - t0) * 1e3)
        extra.append(torch.cuda.max_memory_allocated() - base - y.numel() * y.element_size())
        acc.add_(a)
        z = torch.mm(a.t(), a[:, :1024])
        r = small.repeat(16, 1)
        del y, z, r
        torch.cuda.synchronize()
        time.sleep(0.2)
    print(json.dumps({"linear_device_extra": extra, "linear_ms": ms}))
""")


def test_a_call_too_large_for_the_device_budget_is_copied_through_pinned_host_memory(build_dir, cli, tmp_path):
    script = tmp_path / "job.py"
    script.write_text(TOO_LARGE)
    env = preloaded_env(build_dir, tmp_path / "out", LINGPROBE_SNAPSHOTS="1", LINGPROBE_SAMPLE_BUDGET_DEVICE="64M",
                        LINGPROBE_SAMPLE_OPS="aten::linear;aten::add_;aten::mm;aten::repeat")
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    figures = json.loads(p.stdout.splitlines()[-1])
    (run,) = metadata.run_dirs(tmp_path / "out")
    refusals = [r for f in metadata.files(run) for r in metadata.read(f) if r["kind"] == "refusal"]
    print("refusals:", [(r["op"], r["reason"], r["call"]) for r in refusals], figures)
    audit = subprocess.run([cli, "audit", str(run)], capture_output=True, text=True, timeout=300)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    rows = json.loads((run / "reports" / "coverage_audit.json").read_text())["rows"]
    with_snapshot = {r["signature"]["op"] for r in rows if r["snapshot"]}
    # each was refused once for the device budget (the call that asked for the buffer), then copied through it
    assert {r["op"].split(".")[0] for r in refusals if r["reason"] == "budget_device"} == \
        {"aten::linear", "aten::add_", "aten::mm", "aten::repeat"}, refusals
    assert with_snapshot >= {"aten.linear.default", "aten.add_.Tensor", "aten.mm.default", "aten.repeat.default"}, \
        with_snapshot
    # a contiguous tensor goes straight from its memory: no call held a device copy
    assert max(figures["linear_device_extra"]) < (1 << 20), figures
    # the one pinned buffer is kept for the keys that follow: no allocation or free of pinned memory (which holds
    # the driver's lock: 89 and 114 ms stalls of this loop's linear when each key had a buffer of its own) after
    # the first (the calls before are the key's first, with cuBLAS's choice, and its host-route copy)
    assert max(figures["linear_ms"][2:]) < 20, figures
    replay = subprocess.run([cli, "replay", str(run)], capture_output=True, text=True, timeout=300)
    n = len(list((run / "snapshots").glob("*.pt")))
    assert replay.returncode == 0 and f"replayed {n} snapshot(s):" in replay.stdout, replay.stdout + replay.stderr
    assert " 0 inexact, " in replay.stdout and " 0 failed" in replay.stdout, replay.stdout[-3000:]
    upcast = host_route_upcast(build_dir, cli, tmp_path / "upcast")
    keep = os.environ.get("LPTEST_KEEP")
    if keep:
        os.makedirs(os.path.join(keep, "third_party"), exist_ok=True)
        with open(os.path.join(keep, "third_party", "host_route_upcast.log"), "w") as f:
            f.write(upcast)
        with open(os.path.join(keep, "third_party", "host_route.log"), "w") as f:
            f.write(p.stderr + json.dumps(figures) + "\n" + replay.stdout + "\n" + json.dumps(refusals, indent=1))


# A cast whose output is twice its input, alone in its process: the pinned buffer its first call asks for (twice the
# inputs') holds the output alone, not the input and the output. The call that took it must see that before any
# copy, remember the whole, and leave the key to a later call with a buffer that holds both.
UPCAST = textwrap.dedent("""
    import time, torch
    x = torch.randn(4096, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(8):
        y = x.float()
        del y
        torch.cuda.synchronize()
        time.sleep(0.2)
    print("ok")
""")


def host_route_upcast(build_dir, cli, tmp):
    tmp.mkdir()
    (tmp / "job.py").write_text(UPCAST)
    env = preloaded_env(build_dir, tmp / "out", LINGPROBE_SNAPSHOTS="1", LINGPROBE_SAMPLE_BUDGET_DEVICE="32M",
                        LINGPROBE_SAMPLE_OPS="aten::to")
    p = subprocess.run([sys.executable, str(tmp / "job.py")], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr[-3000:]
    (run,) = metadata.run_dirs(tmp / "out")
    records = [r for f in metadata.files(run) for r in metadata.read(f)]
    reasons = [(r["op"].split(".")[0], r["reason"]) for r in records if r["kind"] == "refusal"]
    assert reasons == [("aten::to", "budget_device")], reasons  # no copy_error: nothing was copied in vain
    replay = subprocess.run([cli, "replay", str(run)], capture_output=True, text=True, timeout=120)
    assert "replayed 1 snapshot(s): 1 exact," in replay.stdout, replay.stdout + replay.stderr
    return p.stderr + replay.stdout + json.dumps(reasons)
