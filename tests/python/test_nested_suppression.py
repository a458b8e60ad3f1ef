"""Nested-call suppression (issue 14): below a recorded top-level call
lingprobe switches RecordFunction off on the thread, so the dispatcher stops
boxing the nested calls' arguments; top-level results stay exactly the same,
and another RecordFunction user (torch.profiler, a second global callback)
keeps seeing nested calls. Each case in a fresh interpreter."""
import collections
import json
import os
import subprocess
import sys

import pytest

import metadata
from conftest import SHIM_DIR

# Top-level calls with many nested ones (linear: t, transpose, as_strided, addmm, ...), a few (to: _to_copy,
# empty_strided, copy_) and none (add); a stage, a view, an in-place op.
JOB = """
import json, sys, torch, torch.nn.functional as F, lingprobe
lingprobe.start(out_dir=sys.argv[1], **json.loads(sys.argv[2]))
x, w, b = torch.randn(8, 16), torch.randn(32, 16), torch.randn(32)
for i in range(40):
    with lingprobe.stage("dit" if i % 2 else "vae"):
        y = F.linear(x, w, b)
        z = y.to(torch.float64).sum(0)
        torch.add(x, x).mul_(2)
        F.layer_norm(y, (32,))
        y.t().contiguous()
s = lingprobe.stats()
lingprobe.finalize()
print(json.dumps({"stats": s, "path": lingprobe.metadata_path()}))
"""


def run_job(tmp_path, name, **options):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_")}
    env.update(LINGPROBE_LIBRARY=str(BUILD / "liblingprobe.so"), PYTHONPATH=str(SHIM_DIR))
    p = subprocess.run([sys.executable, str(script), str(tmp_path / name), json.dumps(options)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    return out["stats"], out["path"]


BUILD = None


@pytest.fixture(autouse=True)
def _build(build_dir):
    global BUILD
    BUILD = build_dir


def signatures_and_calls(path):
    """(signature_json bytes, calls) per sha256, and the call records' (sha256, depth) multiset."""
    records = metadata.read(path)
    sigs = {r["id"]: r for r in records if r["kind"] == "signature"}
    last = [r for r in records if r["kind"] == "counts"][-1]
    by_sha = {sigs[int(i)]["sha256"]: (sigs[int(i)]["signature_json"], n) for i, n in last["calls"].items()}
    calls = collections.Counter((sigs[r["id"]]["sha256"], r["depth"]) for r in records if r["kind"] == "call")
    return by_sha, calls


def test_top_level_results_are_the_same_with_and_without_suppression(tmp_path):
    never, never_path = run_job(tmp_path, "never", suppress_nested="never")
    auto, auto_path = run_job(tmp_path, "auto")
    always, always_path = run_job(tmp_path, "always", suppress_nested="always")
    assert never["nested_suppressed"] == 0 and never["nested_seen"] > 0
    # auto learns each op's nested calls on its first 8 calls, then switches them off below linear (t, addmm...),
    # layer_norm and contiguous-of-a-transpose where they pay; always below every top-level call
    assert 0 < auto["nested_suppressed"] < always["nested_suppressed"] == always["calls_seen"]
    assert always["nested_seen"] == 0 and 0 < auto["nested_seen"] < never["nested_seen"]
    for s in (auto, always):
        assert {k: s[k] for k in ("calls_seen", "calls_recorded", "signatures", "dropped")} == \
            {k: never[k] for k in ("calls_seen", "calls_recorded", "signatures", "dropped")}
    reference = signatures_and_calls(never_path)
    assert signatures_and_calls(auto_path) == reference
    assert signatures_and_calls(always_path) == reference
    # the counts record carries the same two figures (the audit sums them: coverage_audit.json "nested_calls")
    for st, path in ((never, never_path), (auto, auto_path), (always, always_path)):
        last = [r for r in metadata.read(path) if r["kind"] == "counts"][-1]
        assert last["nested"] == {"seen": st["nested_seen"], "suppressed_below": st["nested_suppressed"]}, last
    # lingprobe.config in the header says which mode ran
    header = metadata.read(auto_path)[0]
    assert header["config"]["suppress_nested"] == "auto" and header["config"]["suppress_nested_min"] == 4


def test_audit_sums_the_nested_calls(tmp_path, cli):
    stats, path = run_job(tmp_path, "auto")
    run_dir = os.path.dirname(os.path.dirname(path))
    p = subprocess.run([cli, "audit", "--quiet", run_dir], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    report = json.loads(open(os.path.join(run_dir, "reports", "coverage_audit.json")).read())
    assert report["nested_calls"] == {"seen": stats["nested_seen"], "suppressed_below": stats["nested_suppressed"]}
    summary = open(os.path.join(run_dir, "reports", "summary.md")).read()
    assert f"RecordFunction was switched off below {stats['nested_suppressed']} top-level call(s)" in summary


def test_min_nested_decides_which_ops_auto_suppresses(tmp_path):
    low, _ = run_job(tmp_path, "low", suppress_nested_min="1")
    high, _ = run_job(tmp_path, "high", suppress_nested_min="1000")
    assert high["nested_suppressed"] == 0
    assert low["nested_suppressed"] > 0


OTHERS = """
import ctypes, json, sys, torch, torch.nn.functional as F, lingprobe
lingprobe.start(out_dir=sys.argv[1], suppress_nested="always")
x, w = torch.randn(8, 16), torch.randn(32, 16)
def suppressed():
    return lingprobe.stats()["nested_suppressed"]
base = suppressed()
F.linear(x, w)
assert suppressed() == base + 1
# torch.profiler (thread-local callbacks): no suppression while it runs, and it sees the nested calls
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    for _ in range(5):
        F.linear(x, w)
names = {e.name for e in prof.events()}
assert "aten::linear" in names and ("aten::addmm" in names or "aten::mm" in names) and "aten::t" in names, names
assert suppressed() == base + 1, suppressed()
F.linear(x, w)
assert suppressed() == base + 2
# an exception inside a suppressed call: RecordFunction is on again afterwards (lingprobe and the profiler see calls)
try:
    F.linear(x, torch.randn(3, 5))
except RuntimeError:
    pass
seen = lingprobe.stats()["calls_seen"]
torch.add(x, x)
assert lingprobe.stats()["calls_seen"] == seen + 1
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
    F.linear(x, w)
assert "aten::t" in {e.name for e in prof.events()}
# another global callback (the benchmark's floor): suppression stops within one recheck interval (256)
floor = ctypes.CDLL(sys.argv[2])
floor.floor_install.restype = ctypes.c_uint64
handle = floor.floor_install()
before = suppressed()
for _ in range(600):
    F.linear(x, w)
during = suppressed() - before
floor.floor_remove.argtypes = [ctypes.c_uint64]
floor.floor_remove(handle)
before = suppressed()
for _ in range(300):  # the floor gone: suppression resumes at the thread's next look (within 256)
    F.linear(x, w)
after = suppressed() - before
print(json.dumps({"during": during, "after": after}))
lingprobe.finalize()
"""


def test_other_callbacks_keep_seeing_nested_calls(tmp_path, build_dir):
    floor = build_dir / "bench" / "libfloor_callback.so"
    if not floor.exists():
        pytest.skip(f"{floor} not built")
    script = tmp_path / "others.py"
    script.write_text(OTHERS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_")}
    env.update(LINGPROBE_LIBRARY=str(build_dir / "liblingprobe.so"), PYTHONPATH=str(SHIM_DIR))
    p = subprocess.run([sys.executable, str(script), str(tmp_path / "out"), str(floor)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got["during"] <= 256, got  # at most the suppressions left before the thread looked again
    assert got["after"] >= 300 - 256, got


RESTART = """
import json, sys, torch, lingprobe
lingprobe.start(out_dir=sys.argv[1], suppress_nested="always")
lib = torch.library.Library("lptest", "DEF")
lib.define("reenter(Tensor x) -> Tensor")

def reenter(x):  # runs below a suppressed top-level call
    torch.autograd._enable_record_function(True)   # someone switches RecordFunction back on for a while...
    lingprobe.stop()
    lingprobe.start()                              # ...recording restarts meanwhile (the frames are reset)...
    y = x.t().contiguous().t()                     # ...ops run...
    torch.autograd._enable_record_function(False)  # ...and the state the op ran with is restored
    return y

lib.impl("reenter", reenter, "CPU")
x = torch.randn(4, 4)
torch.ops.lptest.reenter(x)
seen = lingprobe.stats()["calls_seen"]
torch.add(x, x)                                    # RecordFunction is on again: lingprobe sees this call
print(json.dumps({"added": lingprobe.stats()["calls_seen"] - seen}))
lingprobe.finalize()
"""


def test_restart_inside_a_suppressed_call_leaves_record_function_on(tmp_path, build_dir):
    """The end callback of the call below which lingprobe switched RecordFunction off switches it back on even
    when recording restarted meanwhile (its frames reset): before the fix it returned early and the thread stayed
    off, for lingprobe and every other RecordFunction user."""
    script = tmp_path / "restart.py"
    script.write_text(RESTART)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_")}
    env.update(LINGPROBE_LIBRARY=str(build_dir / "liblingprobe.so"), PYTHONPATH=str(SHIM_DIR))
    p = subprocess.run([sys.executable, str(script), str(tmp_path / "out")], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {"added": 1}
