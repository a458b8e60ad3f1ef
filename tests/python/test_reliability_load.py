"""Reliability (issue 15) under concurrency and load: a fork while other threads hold lingprobe's and torch's
locks; start, stop and finalize racing with calls on other threads; a hundred thousand signatures and 64 staged
threads; sustained load under each overflow policy, in bounded memory. Every test runs a real torch process and
checks what it left on disk. (Kills, signals and a full disk: test_reliability.py.)"""
import json
import pathlib
import subprocess
import sys
import textwrap

import pytest

import metadata
from test_reliability import base_env, final_counts, write_job


FORK_JOB = textwrap.dedent("""
    import json, os, signal, sys, threading, time
    import torch, lingprobe
    stop = False

    w = torch.ones(4, 2)

    def churn(k):  # new signatures (key table, writers), stage interning, flushes, stats: lingprobe's locks, busy
        i = 0
        while not stop:
            with lingprobe.stage(f"t{k}-{i % 50}"):
                x = torch.ones(i % 300 + 1, 2).neg()
                torch.nn.functional.linear(x, w)  # nested calls: RecordFunction switched off and on below it
            if i % 7 == 0:
                lingprobe.flush()
            if i % 5 == 0:
                lingprobe.stats()
            i += 1

    def restart():  # lingprobe inside torch's addCallback / removeCallback, again and again
        while not stop:
            lingprobe.stop()
            lingprobe.start()

    # (No torch.randn and no torch.profiler on these threads: a fork while another thread holds torch's
    # generator or, in torch.profiler, its callback mutex hangs the child without lingprobe too.)
    threads = [threading.Thread(target=churn, args=(k,)) for k in range(3)] + [threading.Thread(target=restart)]
    for t in threads:
        t.start()
    hung, statuses = 0, []
    for trial in range(20):
        time.sleep(0.05)
        pid = os.fork()
        if pid == 0:  # ops, stages, every kind of entry point, then an ordinary exit (atexit runs finalize)
            with lingprobe.stage("child"):
                torch.nn.functional.linear(torch.ones(5, 2).neg(), w)
            lingprobe.stats()
            try:
                lingprobe.flush()
            except lingprobe.LingprobeError:
                pass
            sys.exit(0)
        deadline = time.monotonic() + 30
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                hung, status = hung + 1, -1
                break
            time.sleep(0.01)
        statuses.append(status)
    stop = True
    for t in threads:
        t.join()
    print(json.dumps({"hung": hung, "statuses": statuses}), flush=True)
""")


def test_fork_while_other_threads_hold_lingprobes_and_torchs_locks_never_hangs_the_child(build_dir, tmp_path):
    script = write_job(tmp_path, FORK_JOB, "fork_locks.py")
    env = base_env(tmp_path, build_dir, LINGPROBE_SNAPSHOTS="1", LINGPROBE_FLUSH_INTERVAL_MS="5",
                   LINGPROBE_SUPPRESS_NESTED="always")
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"\nreliability: fork under lock churn: 20 forks, {r['hung']} hung, exit statuses {set(r['statuses'])}")
    assert r["hung"] == 0 and r["statuses"] == [0] * 20
    (run_dir,) = metadata.run_dirs(tmp_path / "out")
    files = metadata.files(run_dir)
    assert len(files) == 1, files  # the children wrote nothing
    counts, _ = final_counts(tmp_path / "out")
    assert counts["final"] is True


RACE_JOB = textwrap.dedent("""
    import atexit, os, sys, threading, time
    import torch
    if os.environ.get("JOB_BASELINE"):
        class lingprobe:  # the same program without lingprobe, for its exit status
            start = stop = flush = finalize = staticmethod(lambda: None)
            stage = staticmethod(lambda name: __import__("contextlib").nullcontext())
    else:
        import lingprobe
    running = True

    def ops():
        x = torch.ones(3)
        while running:
            with lingprobe.stage("worker"):
                torch.add(x, 1)

    def at_exit():  # Python's atexit runs while daemon threads still run ops: finalize there, then let them go
        global running
        lingprobe.finalize()
        running = False
        for t in threads:  # (a fixed sleep here was a race on loaded cores)
            t.join(timeout=60)

    atexit.register(at_exit)
    threads = [threading.Thread(target=ops, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(200):  # start/stop racing with the calls
        (lingprobe.stop if i % 2 else lingprobe.start)()
        if i % 20 == 0:
            lingprobe.flush()
    lingprobe.start()
    time.sleep(0.2)
    print("exiting", flush=True)
""")


def test_start_stop_and_finalize_at_exit_race_with_calls_on_other_threads(build_dir, tmp_path):
    """(Daemon threads still inside torch when Python finalizes abort torch 1.13 with 'terminate called without
    an active exception', lingprobe or not: the job lets them end in its atexit handler, after finalize.)"""
    script = write_job(tmp_path, RACE_JOB, "race.py")
    base = subprocess.run([sys.executable, str(script)], env=base_env(tmp_path, build_dir, preload=False,
                                                                      JOB_BASELINE="1"),
                          capture_output=True, text=True, timeout=120)
    for trial in range(5):
        out = tmp_path / f"race{trial}"
        p = subprocess.run([sys.executable, str(script)], env=base_env(tmp_path, build_dir, LINGPROBE_OUT=str(out)),
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == base.returncode == 0 and p.stdout.strip() == "exiting", p.stderr[-3000:]
        counts, calls = final_counts(out)
        assert counts["final"] is True and calls > 0
        assert sum(counts["calls"].values()) >= calls


SIZES_JOB = textwrap.dedent("""
    import json, os, sys, threading, torch
    import lingprobe
    mode = sys.argv[1]
    recording = "LD_PRELOAD" in os.environ
    if mode == "signatures":  # 10^5 distinct signatures (empty tensors: the shapes differ, no data)
        for n in range(100000):
            torch.empty(n, 0)
    elif mode == "threads":  # 64 threads, each in its own stage
        def work(k):
            with lingprobe.stage(f"thread{k}"):
                x = torch.ones(2)
                for _ in range(200):
                    torch.add(x, 1)
        ts = [threading.Thread(target=work, args=(k,)) for k in range(64)]
        [t.start() for t in ts]
        [t.join() for t in ts]
    else:  # sustained load on 4 threads against a small buffer
        def load():
            x = torch.ones(2)
            for _ in range(50000):
                torch.add(x, 1)
        ts = [threading.Thread(target=load) for _ in range(4)]
        [t.start() for t in ts]
        [t.join() for t in ts]
    if recording:
        lingprobe.finalize()
    # VmHWM: this image's own peak (ru_maxrss keeps the forking parent's across exec: pytest's, in CI)
    hwm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))
    print(json.dumps({"peak_rss_kb": hwm}), flush=True)
""")


def run_sizes(tmp_path, build_dir, mode, preload=True, **extra):
    script = write_job(tmp_path, SIZES_JOB, "sizes.py")
    out = tmp_path / f"out-{mode}-{len(list(tmp_path.glob('out-*')))}"
    env = base_env(tmp_path, build_dir, preload=preload, LINGPROBE_OUT=str(out), **extra)
    if not preload:  # the same program without lingprobe: the baseline's peak RSS
        env["PYTHONPATH"] = str(pathlib.Path(__file__).resolve().parents[2] / "python_shim")
    p = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return out, json.loads(p.stdout.strip().splitlines()[-1])["peak_rss_kb"]


def test_a_hundred_thousand_signatures_and_64_staged_threads(cli, build_dir, tmp_path):
    out, rss = run_sizes(tmp_path, build_dir, "signatures")
    _, base = run_sizes(tmp_path, build_dir, "signatures", preload=False)
    counts, _ = final_counts(out)
    assert counts["final"] is True and counts["dropped"] == {}
    (run_dir,) = metadata.run_dirs(out)
    (f,) = metadata.files(run_dir)
    sigs = [r for r in metadata.read(f) if r["kind"] == "signature"]
    empties = [s for s in sigs if json.loads(s["signature_json"])["op"].startswith("aten.empty")]
    assert len(empties) == 100000 and sum(counts["calls"][str(s["id"])] for s in empties) == 100000
    out64, _ = run_sizes(tmp_path, build_dir, "threads")
    p = subprocess.run([cli, "audit", "--quiet", str(metadata.run_dirs(out64)[0])], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    report = json.loads((metadata.run_dirs(out64)[0] / "reports" / "coverage_audit.json").read_text())
    by_stage = {s["stage"]: s["recorded_calls"] for s in report["stages"]}
    assert all(by_stage.get(f"thread{k}") == 201 for k in range(64)), by_stage  # ones() and 200 adds
    print(f"\nreliability: 100000 signatures: peak RSS {rss / 1024:.0f} MiB vs {base / 1024:.0f} MiB without "
          f"recording (+{(rss - base) / 1024:.0f} MiB, {(rss - base) * 1024 / 100000:.0f} B per signature); "
          f"64 threads x 200 calls in 64 stages: exact")


@pytest.mark.parametrize("policy", ["drop", "block"])
def test_sustained_load_with_each_overflow_policy_counts_what_it_drops_in_bounded_memory(build_dir, tmp_path, policy):
    out, rss = run_sizes(tmp_path, build_dir, "load", LINGPROBE_OVERFLOW=policy, LINGPROBE_BUFFER_RECORDS="1024",
                         LINGPROBE_FLUSH_INTERVAL_MS="1000")
    counts, calls = final_counts(out)
    total = 4 * 50000
    add_id = max(counts["calls"], key=lambda k: counts["calls"][k])
    assert counts["calls"][add_id] == total  # every call counted, whatever its record's fate
    dropped = counts["dropped"].get("call_records", {}).get("buffer_full", 0)
    assert calls + dropped == sum(counts["calls"].values())
    if policy == "block":
        assert dropped == 0
    print(f"\nreliability: overflow={policy}: {total} calls on 4 threads, buffer 1024 records: {calls} records "
          f"written, {dropped} dropped (counted), peak RSS {rss / 1024:.0f} MiB")
    assert rss < 1024 * 1024  # KiB: well under a GiB (buffers are bounded: 4 x 1024 records)
