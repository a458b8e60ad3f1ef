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


def run(tmp_path, build_dir, *args, **extra):  # the JOB with its three ops sampled and profiled
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k not in ("PYTHONPATH", "LD_PRELOAD")}
    env.update(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(tmp_path / "out"),
               LINGPROBE_SNAPSHOTS="1", LINGPROBE_PROFILE="1", LINGPROBE_OPS="aten::linear,aten::conv3d,aten::to")
    env.update(extra)
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


def validate(run_dir, out, *extra):
    v = subprocess.run([sys.executable, "-m", "lingprobe.validate", str(run_dir), "--runs", "2", "--json", str(out), *extra],
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "python_shim")), capture_output=True, text=True,
                       timeout=900)
    print("\n" + v.stdout + v.stderr[-2000:])
    if out.exists() and os.environ.get("LPTEST_KEEP"):
        shutil.copy(out, os.path.join(os.environ["LPTEST_KEEP"], out.name))
    return json.loads(out.read_text()), v


@pytest.mark.skipif(not shutil.which("ncu"), reason="Nsight Compute (ncu) not on PATH")
def test_inline_counters_beside_nsight_compute_on_the_live_cache_state(counted, cli, tmp_path):
    """The run's own profiles (the live cache state) against ncu --cache-control
    none on the replays: the same kernels, every pair compared, most within
    target. Not the 90% of the issue: a kernel's DRAM writes include the
    write-backs of lines earlier kernels left dirty, which differ between the
    run and the replay script (41 of 48 on the H200, docs/COUNTERS.md: every
    pair outside a cache-state figure)."""
    r = subprocess.run([cli, "replay", "--quiet", str(counted)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    report, v = validate(counted, tmp_path / "validate-counters-live.json")
    assert report["pairs"] >= 30 and report["kernel_set_misses"] == 0, v.stdout
    assert report["within"] >= 0.75 * report["pairs"], v.stdout


def test_torch_profiler_before_and_after_lingprobe(build_dir, tmp_path):
    """Kineto keeps CUPTI's subscriber after its first session: windows then
    cannot hold other threads' launches and are refused (subscriber_held),
    unless LINGPROBE_PROFILE_UNGUARDED=1 measures them without the guard.
    torch.profiler after lingprobe's windows sees its GPU events (the job asserts it)."""
    before = run(tmp_path / "before", build_dir, "--profiler-first")
    assert not (before / "profiles").exists() or not list((before / "profiles").iterdir())
    assert last_counts(before)["dropped"]["profiles"]["subscriber_held"] == 3, last_counts(before)
    unguarded = run(tmp_path / "unguarded", build_dir, "--profiler-first", LINGPROBE_PROFILE_UNGUARDED="1")
    after = run(tmp_path / "after", build_dir, "--profiler-after")
    for run_dir in (unguarded, after):
        for op, (d, ident, kernels) in profiles(run_dir).items():
            assert ident["status"] == "passed", (run_dir.name, op, ident.get("reason"))
    assert not any(i["launch_guard"] for _, i, _ in profiles(unguarded).values())
    assert all(i["launch_guard"] for _, i, _ in profiles(after).values())


def test_guard_identity_and_stall_at_world_size_1(counted, cli):
    """World size 1: nobody else computes on the GPU during the windows (NVML's
    guard says `alone`, or `unknown` with the reason where a pid namespace
    hides the processes); identity has the versions and the clocks as found;
    the summary has the rank's stall."""
    verdicts = set()
    for op, (d, ident, kernels) in profiles(counted).items():
        guard = json.loads((d / "guard_own_pid_history.json").read_text())
        manifest = json.loads((d / "manifest.json").read_text())
        assert "guard_own_pid_history.json" in manifest["sha256"]
        assert guard["verdict"] in ("alone", "unknown"), guard
        if guard["verdict"] == "unknown":
            assert guard["reason"], guard
        assert guard["during"]["samples"] >= 1
        verdicts.add((guard["verdict"], guard["matched_by"], guard["reason"]))
        assert ident["cuda_runtime_version"] >= 12000 and ident["cupti_version"] > 0 and ident["driver"], ident
        assert ident["clocks_mhz"].get("sm", 0) > 0, ident
        assert 0 <= ident["lock_wait_seconds"] <= ident["window_seconds"]
    print(f"\nguard verdicts: {sorted(verdicts, key=str)}")
    a = subprocess.run([cli, "audit", "--quiet", str(counted)], capture_output=True, text=True)
    assert a.returncode == 0, a.stderr
    report = json.loads((counted / "reports" / "coverage_audit.json").read_text())
    (row,) = report["counter_windows"]["by_rank"]
    assert row["windows"] == 3 and row["by_status"] == {"passed": 3} and row["stall_seconds_total"] >= row["window_seconds_total"] - 1e-5 > 0
    assert "## Counter windows: each rank's stall" in (counted / "reports" / "summary.md").read_text()


def run_script(tmp_path, build_dir, source, *args, **extra):
    tmp_path.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(source))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k not in ("PYTHONPATH", "LD_PRELOAD")}
    env.update(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(tmp_path / "out"),
               LINGPROBE_PROFILE="1", **extra)
    cmd = [sys.executable, "-X", "faulthandler", str(script), *args]
    if os.environ.get("LPTEST_GDB") and shutil.which("gdb"):  # a crash's native stacks, for the GPU machine's log
        cmd = ["gdb", "-q", "-batch", "-ex", "run", "-ex", "thread apply all bt 25", "--args", *cmd]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    print("\n" + p.stdout[-1500:] + p.stderr[-1500:])
    if "received signal" in p.stdout:  # under gdb: the whole native backtrace
        print(p.stdout[-12000:])
    assert p.returncode == 0 and "ok" in p.stdout, p.stderr[-3000:]
    (run_dir,) = metadata.run_dirs(tmp_path / "out")
    return run_dir, p.stdout


def last_counts(run_dir):
    return [r for f in metadata.files(run_dir) for r in metadata.read(f) if r["kind"] == "counts"][-1]


GRAPH_JOB = """
    import threading, time, torch, torch.nn.functional as F
    dev = torch.device("cuda")
    torch.manual_seed(0)
    a = torch.randn(512, 512, device=dev)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        b = a @ a                                    # warm-up outside the capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        b = a @ a
    torch.cuda.synchronize()

    @torch.library.custom_op("lp::replays_a_graph", mutates_args=())
    def replays_a_graph(x: torch.Tensor) -> torch.Tensor:
        y = x * 2                                    # a kernel of the op, then a graph launch on the window's thread
        g.replay()
        return y

    x = torch.randn(1, 2640, 5120, device=dev, dtype=torch.bfloat16)
    w = torch.randn(5120, 5120, device=dev, dtype=torch.bfloat16)
    stop, replays = threading.Event(), [0]
    def replay():
        while not stop.is_set():
            g.replay()
            replays[0] += 1
            time.sleep(0.002)
    t = threading.Thread(target=replay)
    t.start()
    time.sleep(0.2)
    y = F.linear(x, w)                               # sampled: the other thread's graph launches wait for its window
    stop.set()
    t.join()
    torch.cuda.synchronize()
    assert replays[0] > 0
    assert torch.allclose(b, a @ a, rtol=1e-4, atol=1e-3), "the graph's result changed"
    assert torch.allclose(y.float(), x.float() @ w.float().t(), rtol=2e-2, atol=1.0), "the profiled op's result changed"
    a.copy_(torch.randn(512, 512, device=dev))
    z = replays_a_graph(torch.ones(1000, device=dev))  # sampled: the window ends at the graph launch's entry
    torch.cuda.synchronize()
    assert torch.equal(z, torch.full((1000,), 2.0, device=dev))
    assert torch.allclose(b, a @ a, rtol=1e-4, atol=1e-3), "the graph launched inside the window did not run whole"
    print("ok", replays[0])
"""


def test_graph_launches_inside_a_window_and_results_are_correct(build_dir, tmp_path):
    run_dir, _ = run_script(tmp_path, build_dir, GRAPH_JOB, LINGPROBE_OPS="aten::linear,aten::mm,lp::*",
                            LINGPROBE_SAMPLE_OPS="aten::linear,lp::*")
    prof = profiles(run_dir)
    _, linear, _ = prof["aten.linear.default"]
    assert linear["status"] == "passed" and linear["launches_held"] >= 1, \
        {k: linear.get(k) for k in ("status", "reason", "launches_held")}  # the other thread's graphs waited
    _, own, _ = prof["lp.replays_a_graph.default"]
    assert own["status"] == "abandoned" and "graph" in own["reason"], own
    assert last_counts(run_dir)["dropped"]["profiles"]["abandoned"] >= 1


OTHER_THREAD_JOB = """
    import sys, threading, time, torch, torch.nn.functional as F
    dev = torch.device("cuda")
    if "--profiler-first" in sys.argv:               # Kineto then keeps CUPTI's subscriber: no launch guard
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
            torch.mm(torch.randn(64, 64, device=dev), torch.randn(64, 64, device=dev))
            torch.cuda.synchronize()
    x = torch.randn(1, 2640, 5120, device=dev, dtype=torch.bfloat16)
    w = torch.randn(5120, 5120, device=dev, dtype=torch.bfloat16)
    m = torch.randn(256, 256, device=dev)
    stop, calls = threading.Event(), [0]
    def other():
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            while not stop.is_set():
                torch.mm(m, m)
                calls[0] += 1
                time.sleep(0.001)
        s.synchronize()
    t = threading.Thread(target=other)
    t.start()
    time.sleep(0.2)
    y = F.linear(x, w)                               # sampled while the other thread launches on its own stream
    stop.set()
    t.join()
    torch.cuda.synchronize()
    assert calls[0] > 0
    assert torch.allclose(y.float(), x.float() @ w.float().t(), rtol=2e-2, atol=1.0)
    print("ok", calls[0])
"""


@pytest.mark.parametrize("unguarded", ["0", "1"])
def test_other_threads_kernels_during_a_window(build_dir, tmp_path, unguarded):
    """Guarded (default): the other thread's launches wait at their entry and
    the window passes. Unguarded, with Kineto holding CUPTI's subscriber: they
    run inside it and mark it contaminated, named."""
    run_dir, _ = run_script(tmp_path, build_dir, OTHER_THREAD_JOB, *(["--profiler-first"] if unguarded == "1" else []),
                            LINGPROBE_OPS="aten::linear,aten::mm", LINGPROBE_SAMPLE_OPS="aten::linear",
                            LINGPROBE_PROFILE_UNGUARDED=unguarded)
    _, ident, _ = profiles(run_dir)["aten.linear.default"]
    if unguarded == "0":
        assert ident["status"] == "passed" and ident["launches_held"] >= 1, ident
    else:
        assert ident["status"] == "contaminated" and ident["foreign_kernels"], ident


COLLECTIVE_JOB = """
    import socket, torch, torch.distributed as dist
    with socket.socket() as s:  # a port free now (a fixed one fails while an earlier job's process holds it)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=0, world_size=1)
    t = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(t)                               # sampled, refused before Start: a collective
    torch.cuda.synchronize()
    assert torch.equal(t, torch.ones(1 << 20, device="cuda"))
    x = torch.randn(256, 256, device="cuda")
    y = torch.mm(x, x)                               # an ordinary op of the same process: profiled
    torch.cuda.synchronize()
    dist.destroy_process_group()
    print("ok")
"""


def test_collective_is_refused_before_start(build_dir, tmp_path):
    run_dir, _ = run_script(tmp_path, build_dir, COLLECTIVE_JOB, LINGPROBE_OPS="c10d::allreduce_,aten::mm",
                            NCCL_NVLS_ENABLE="0")
    prof = profiles(run_dir)
    assert set(prof) == {"aten.mm.default"} and prof["aten.mm.default"][1]["status"] == "passed", prof
    counts = last_counts(run_dir)
    assert counts["dropped"]["profiles"]["collective"] >= 1, counts
    sigs = [r for f in metadata.files(run_dir) for r in metadata.read(f) if r["kind"] == "signature"]
    assert any(json.loads(s["signature_json"])["op"].startswith("c10d.allreduce_") for s in sigs)


PROFILER_DURING_JOB = """
    import threading, time, torch
    from torch.profiler import profile, ProfilerActivity
    dev = torch.device("cuda")
    in_window, started, mm_calls, kernels, waited = threading.Event(), threading.Event(), [0], [], [0.0]

    @torch.library.custom_op("lp::window_while_the_profiler_starts", mutates_args=())
    def window_while_the_profiler_starts(x: torch.Tensor) -> torch.Tensor:
        in_window.set()                              # the window is open: the profiler thread starts now
        time.sleep(0.5)                              # and its start waits for this window
        assert not started.is_set(), "the profiler started inside the window"
        return x @ x

    def profiler_thread():
        assert in_window.wait(60), "no window opened"
        t0 = time.monotonic()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            waited[0] = time.monotonic() - t0
            started.set()
            for _ in range(20):
                torch.mm(torch.randn(128, 128, device=dev), torch.randn(128, 128, device=dev))
                mm_calls[0] += 1
            torch.cuda.synchronize()
        kernels.extend(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)

    t = threading.Thread(target=profiler_thread)
    t.start()
    y = window_while_the_profiler_starts(torch.randn(2048, 2048, device=dev))    # sampled: the window
    torch.cuda.synchronize()
    t.join()
    gemms = [k for k in kernels if "gemm" in k.lower() or "nvjet" in k.lower()]
    print(f"profiler: waited {waited[0]:.2f} s to start; mm calls {mm_calls[0]}, CUDA events {len(kernels)}, "
          f"GEMM kernels {len(gemms)}")
    assert waited[0] > 0.2 and len(gemms) >= mm_calls[0] == 20, "the profiler's trace lost GPU events"
    torch.mm(torch.randn(64, 64, device=dev), torch.randn(64, 64, device=dev))  # after: Kineto keeps the subscriber
    torch.cuda.synchronize()
    print("ok")
"""


def test_torch_profiler_started_during_a_window_on_another_thread(build_dir, tmp_path):
    """The shim holds counter windows off around torch.profiler sessions: a
    session started while a window is open waits for it to close, so Kineto
    finds CUPTI free (its trace complete, the job asserts it) and the window
    is not disturbed; later windows are refused while Kineto keeps the subscriber."""
    run_dir, out = run_script(tmp_path, build_dir, PROFILER_DURING_JOB, LINGPROBE_OPS="lp::*,aten::mm",
                              LINGPROBE_SAMPLE_OPS="lp::*,aten::mm")
    prof = profiles(run_dir)
    _, during, _ = prof["lp.window_while_the_profiler_starts.default"]
    assert during["status"] == "passed", during
    assert "aten.mm.default" not in prof
    dropped = last_counts(run_dir)["dropped"]["profiles"]
    assert dropped.get("subscriber_held", 0) >= 1, dropped  # the hold was released: the later window met Kineto
    print(f"\nduring: {during['status']}; later windows: {dropped}")


STAGE_JOB = """
    import json, sys, torch, lingprobe
    dev = torch.device("cuda")
    a = torch.randn(4096, 4096, device=dev)
    b = torch.randn(2048, 2048, device=dev)
    own = {"big": [], "small": []}
    for it in range(4):                              # iteration 0: each key's first call opens a window
        for stage, x, n in (("big", a, 12), ("small", b, 6)):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            with lingprobe.stage(stage):
                s.record()
                for _ in range(n):
                    y = torch.mm(x, x)
                e.record()
            torch.cuda.synchronize()
            own[stage].append(1000.0 * s.elapsed_time(e))
    json.dump(own, open(sys.argv[1], "w"))
    print("ok")
"""


def test_stage_gpu_time_is_measured_and_windows_are_told_apart(build_dir, tmp_path, cli):
    # The capability report's denominator: each stage's GPU time by CUDA events at its first op and its end.
    # The job times the same regions with its own events; the first iteration's windows make it not clean.
    own_path = tmp_path / "own.json"
    # Without the timed calls (PROFILE_TIMING): a key's timed call comes at its first call after the writer kept its
    # counters, in iteration 0 or 1 depending on the writer's pace; this test needs the windows in iteration 0.
    run_dir, _ = run_script(tmp_path, build_dir, STAGE_JOB, str(own_path), LINGPROBE_OPS="aten::mm",
                            LINGPROBE_PROFILE_TIMING="0", PYTHONPATH=str(ROOT / "python_shim"))
    own = json.loads(own_path.read_text())
    counts = last_counts(run_dir)
    assert counts["final"] and counts.get("stage_gpu_lost", {}) == {}, counts
    stages = counts["stage_gpu"]
    for stage in ("big", "small"):
        s = stages[stage]
        assert s["intervals"] == 4 and s["clean_intervals"] == 3, s   # the first iteration had the windows
        clean_mean, job_mean = s["clean_gpu_us"] / 3, sum(own[stage][1:]) / 3
        assert abs(clean_mean - job_mean) <= 0.05 * job_mean + 20, (stage, clean_mean, job_mean)
        assert s["gpu_us"] > s["clean_gpu_us"] + 0.5 * job_mean       # the windowed iteration took longer
    p = subprocess.run([str(cli), "report", str(run_dir)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    whole = json.loads((run_dir / "reports" / "capability_report.json").read_text())["whole_run"]
    measured = whole["measured_gpu_time"]
    big = measured["by_stage"]["big"]
    assert big["gpu_time_without_windows_us"] == pytest.approx(stages["big"]["clean_gpu_us"] * 4 / 3, rel=1e-3)
    assert 0.5 < big["attributed_fraction"] <= 1.2, big                # the mm's kernel time x 48 calls
    assert "Measured GPU time (CUDA events per stage" in (run_dir / "reports" / "summary.md").read_text()


def test_replay_profile_sets_the_isolated_call_beside_the_run(counted, cli, tmp_path):
    # `lingprobe replay --profile`: each snapshot's call replayed in isolation under lingprobe's own
    # counter window, kernel by kernel beside the run's profile of the same call.
    r = subprocess.run([str(cli), "replay", str(counted), "-o", str(tmp_path), "--profile"], capture_output=True,
                       text=True, timeout=600)
    print(r.stdout[-3000:])
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [l for l in r.stdout.splitlines() if l.startswith("profile kernels")]
    assert len(lines) == 3 and all("(same)" in l for l in lines), r.stdout
    for d in (tmp_path / "replays").iterdir():
        c = json.loads((d / "replay_profile.json").read_text())
        assert c["kernels_match"] and c["run_status"] == c["replay_status"] == "passed", c
        assert c["run_kernels"] == c["replay_kernels"] >= 1
        assert abs(c["replay_time_us"] - c["run_time_us"]) <= 0.15 * c["run_time_us"] + 5, c


# A written argument whose copy the device cannot hold: x (3 GiB, written by mul_: copied at the op's start) with
# 1 GiB left beside it. The byte budgets are raised so that only the device's memory refuses the copy.
OOM_COPY_JOB = """
    import torch
    x = torch.ones((3 << 30) // 4, device="cuda")
    free, _ = torch.cuda.mem_get_info()
    ballast = torch.empty(free - (1 << 30), dtype=torch.uint8, device="cuda")
    x.mul_(2)
    torch.cuda.synchronize()
    print("ok")
"""


def test_a_copy_the_device_cannot_hold_refuses_the_snapshot_alone_and_keeps_the_counters(build_dir, tmp_path):
    # Before (issue 26), the failed copy refused the call's counters with its snapshot: "snapshot+counters device_oom".
    # (Written 2026-12-07 without a GPU to run it on; the CPU unit test "a written argument whose copy fails" covers
    # the same path through an allocator out of memory.)
    run_dir, _ = run_script(tmp_path, build_dir, OOM_COPY_JOB, LINGPROBE_SNAPSHOTS="1", LINGPROBE_OPS="aten::mul_",
                            LINGPROBE_SAMPLE_BUDGET_DEVICE="8G", LINGPROBE_SAMPLE_BUDGET_PROCESS="8G")
    records = [r for f in metadata.files(run_dir) for r in metadata.read(f)]
    refusals = {(r["evidence"], r["reason"]) for r in records if r["kind"] == "refusal"}
    assert ("snapshot", "device_oom") in refusals and not any("counters" in e for e, _ in refusals), refusals
    (profile,) = [p for p in (run_dir / "profiles").iterdir() if p.is_dir()]
    assert json.loads((profile / "identity.json").read_text())["status"] == "passed"
    assert not list(run_dir.glob("snapshots/*.pt"))
    assert last_counts(run_dir)["dropped"]["snapshots"] == {"device_oom": 1}
