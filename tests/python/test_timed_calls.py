"""Timed calls on a real GPU: a profiled key's later calls timed inline without the op's thread waiting
for its kernels, calls pending at once read in few flushes, and no call timed right after a counter window. Skips
without a CUDA device (CI): these run on the GPU machine through scripts/gpu-check.sh. (The counter windows
themselves: test_counters.py.)"""
import json

import metadata
import test_counters
from test_counters import run_script

pytestmark = test_counters.pytestmark  # the same skip without a CUDA device


# The jobs' wait for the writer's thread: profile records written whole to the run's metadata (each key's counters).
WAIT_FOR_PROFILES = """
    import glob, os, time
    def wait_for_profiles(n, seconds=60):            # a fixed sleep was too short on a cold first run
        deadline = time.time() + seconds
        while time.time() < deadline:
            files = glob.glob(os.path.join(os.environ["LINGPROBE_OUT"], "*", "metadata", "*.jsonl"))
            if sum(l.endswith("\\n") and '"kind":"profile"' in l for f in files for l in open(f)) >= n:  # whole lines
                return
            time.sleep(0.05)
"""


NO_WAIT_JOB = WAIT_FOR_PROFILES + """
    import json, torch
    dev = torch.device("cuda")
    x = torch.randn(8192, 8192, device=dev)          # fp32: GEMMs of tens of milliseconds
    v = torch.randn(4096, 8192, device=dev)
    torch.mm(x, x)                                   # two keys' counters
    torch.mm(v, x)
    torch.cuda.synchronize()
    wait_for_profiles(2)
    time.sleep(0.2)                                  # each key's next call is timed
    t0 = time.perf_counter()
    y = torch.mm(x, x)                               # timed: the op returns before its kernel ends
    host_s = time.perf_counter() - t0
    w = torch.mm(v, x)                               # timed too, queued behind it, while the first is pending
    z = y[:2, :2].sum() + w[:2, :2].sum()
    torch.cuda.synchronize()
    print("ok", json.dumps({"host_s": host_s}))
"""


def test_timed_calls_do_not_wait_for_their_kernels(build_dir, tmp_path):
    """A timed call's records are read on the writer's thread: the op's thread does not wait for the device, so the
    next op's kernels queue behind the timed ones as without lingprobe (an idle start moved kernels by up to 8%:
    bench/idle_start_probe.py), and the next key's timed call begins while the first is pending. Before, the timed
    call synchronised the context at the op's end."""
    run_dir, out = run_script(tmp_path, build_dir, NO_WAIT_JOB, LINGPROBE_OPS="aten::mm", LINGPROBE_SAMPLE_OPS="aten::mm")
    host_s = json.loads(out.split("ok", 1)[1].strip().splitlines()[0])["host_s"]
    timings = sorted((r for f in metadata.files(run_dir) for r in metadata.read(f) if r["kind"] == "kernel_timing"),
                     key=lambda r: r["seq"])
    records = [r for f in metadata.files(run_dir) for r in metadata.read(f)]
    told = [r for r in records if r["kind"] not in ("call", "signature", "config", "kernel_timing", "profile")]
    assert [t["status"] for t in timings] == ["passed", "passed"], (timings, told)
    kernel_s = [sum(k["metrics"]["gpu__time_duration.sum"]["value"] for k in t["kernels"]) / 1e6 for t in timings]  # us
    assert min(kernel_s) > 0.005, timings
    assert host_s < kernel_s[0] / 2, (host_s, kernel_s)
    assert timings[0]["window_s"] < kernel_s[0] / 2, timings
    # the op thread's split: the first started the session, the second joined it while the first was pending
    assert [t["joined_session"] for t in timings] == [False, True], timings
    assert all(0 <= t["open_us"] + t["stop_us"] <= t["window_s"] * 1e6 for t in timings), timings
    # the writer's reading: the records came in a flush, the second call's maybe in the one made for the first
    assert sum(t["flushes"] for t in timings) >= 1, timings
    assert all(t["flushes"] >= 0 and t["records_wait_us"] >= 0 and t["forced_flush"] in (False, True)
               for t in timings), timings


BATCH_JOB = WAIT_FOR_PROFILES + """
    import torch
    dev = torch.device("cuda")
    xs = [torch.randn(256 + 64 * i, 512, device=dev) for i in range(12)]   # twelve keys
    for x in xs:
        torch.add(x, x)                              # each key's counters
    wait_for_profiles(len(xs), seconds=120)
    time.sleep(0.05)
    for x in xs:
        torch.add(x, x)                              # each key's timed call, back to back
    torch.cuda.synchronize()
    print("ok")
"""


def test_timed_calls_pending_at_once_are_read_in_few_flushes(build_dir, tmp_path):
    """Reading a timed call's records flushes CUPTI's buffers, and a flush holds the op thread's launches: read call
    by call as each ended, the joined calls of the gate's program took ~200 us more on the host than in the trace
    (docs/gpu/timing-reads-batched-h100-2026-12-06). The writer reads a call no sooner than 10 ms after its stop, so
    one flush brings the records of the calls stopped by then, and a call whose records came needs no flush."""
    run_dir, _ = run_script(tmp_path, build_dir, BATCH_JOB, LINGPROBE_OPS="aten::add", LINGPROBE_SAMPLE_OPS="aten::add")
    timings = [r for f in metadata.files(run_dir) for r in metadata.read(f) if r["kind"] == "kernel_timing"]
    passed = [t for t in timings if t["status"] == "passed"]
    assert len(passed) >= 8, timings
    flushes = sum(t["flushes"] for t in timings)
    print(f"{len(timings)} timed calls ({len(passed)} passed), {flushes} flushes")
    assert 1 <= flushes <= len(timings) // 3, [(t["seq"], t["flushes"], t.get("joined_session")) for t in timings]


SPACING_JOB = WAIT_FOR_PROFILES + """
    import torch
    dev = torch.device("cuda")
    x, a = torch.randn(2048, 2048, device=dev), torch.randn(1024, 1024, device=dev)
    torch.add(x, x)                                  # counters
    wait_for_profiles(1)
    time.sleep(0.05)                                 # its record is written just before the key is told
    torch.mm(a, a)                                   # counters
    torch.add(x, x)                                  # right after the window: not timed
    time.sleep(0.01)
    torch.sub(x, x)                                  # unsampled
    torch.add(x, x)                                  # timed
    wait_for_profiles(2)
    torch.mm(a, a)                                   # timed
    torch.cuda.synchronize()
    print("ok")
"""


def test_no_call_is_timed_right_after_a_counter_window(build_dir, tmp_path):
    """A counter window leaves the GPU idle and its L2 as its replay passes left it: the gate's weight cast right
    after one read 4.6-11.7% short of the trace in every run (COUNTERS.md). A call due for timing within 2 ms of a
    window's end on its GPU is refused before its claim, with no backoff, so its key's next call is timed. (A 100 us
    rule never fired on an H100: lingprobe's own end of the window's call took longer.)"""
    run_dir, _ = run_script(tmp_path, build_dir, SPACING_JOB, LINGPROBE_OPS="aten::add,aten::mm,aten::sub",
                            LINGPROBE_SAMPLE_OPS="aten::add;aten::mm")
    records = [r for f in metadata.files(run_dir) for r in metadata.read(f)]
    sig_op = {r["id"]: json.loads(r["signature_json"])["op"] for r in records if r["kind"] == "signature"}
    seq_op = {r["seq"]: sig_op[r["id"]] for r in records if r["kind"] == "call"}
    seqs = sorted(seq_op)
    assert [seq_op[q] for q in seqs] == ["aten.add.Tensor", "aten.mm.default", "aten.add.Tensor", "aten.sub.Tensor",
                                         "aten.add.Tensor", "aten.mm.default"], seq_op
    timings = sorted((r for r in records if r["kind"] == "kernel_timing"), key=lambda r: r["seq"])
    assert [(t["seq"], t["status"]) for t in timings] == [(seqs[4], "passed"), (seqs[5], "passed")], timings
    refusals = [(r["evidence"], r["reason"], r["op"], r["call"]) for r in records if r["kind"] == "refusal"]
    assert refusals == [("timing", "after_counter_window", "aten::add.Tensor", 2)], refusals
    # each timed call says how long after a counter window's call it began (the add: after the 10 ms sleep)
    assert timings[0]["since_counter_call_us"] >= 10000, timings[0]
