"""Issue 16: `lingprobe diff`, two runs compared: the seeds' two situations (480x832 on one rank, 704x1280 on four)
paired signature by signature, the counters' metrics where both runs have them, and malformed input refused with
one line. Files only: the command loads no torch."""
import json
import subprocess

import pytest

from conftest import free_port

from test_reading_a_run import check_trace_format, header, trace, write_run
from test_reference_workload import reference_run

@pytest.fixture(scope="module")
def seed_situation(build_dir, tmp_path_factory):
    """The seeds' two runs: 480x832 on one rank, 704x1280 on four (meta, full widths, 2 blocks, 2 chunks)."""
    base = tmp_path_factory.mktemp("diff")
    a, b = base / "480x832-1rank", base / "704x1280-4ranks"
    reference_run(build_dir, a, "--device", "meta", "--scale", "full", "--size", "480*832", "--world-size", "1",
                  "--chunks", "2", "--blocks", "2", port=free_port())
    reference_run(build_dir, b, "--device", "meta", "--scale", "full", "--chunks", "2", "--blocks", "2", port=free_port())
    return a, b


def diff(cli, a, b, *args, expect_rc=0):
    p = subprocess.run([cli, "diff", str(a), str(b), *args], capture_output=True, text=True, timeout=300)
    assert p.returncode == expect_rc, p.stderr
    return p


# Every entry of the diff, as (stage, kind, A's rows, B's rows), by short signature. The DiT linears change from
# 4,680 tokens (480x832, one rank: the whole sequence) to 2,640 (704x1280, a quarter of 10,560 per rank), except
# those that run on every rank's whole sequence (the patch embedding, the camera path, the head's modulation),
# which go to 10,560. The VAE convolutions keep their channels and kernels; each rank decodes a quarter of the
# width. Their cached (6-frame) and first-chunk (3-frame) variants pair with the same variant, by size order.
EXPECTED_PAIRS = [
    ("dit", "one_to_many", ["aten.linear.default(bf16[1,4680,5120], bf16[5120,5120], bf16[5120])"],
     ["aten.linear.default(bf16[1,2640,5120], bf16[5120,5120], bf16[5120])", "aten.linear.default(bf16[1,10560,5120], bf16[5120,5120], bf16[5120])",
      "aten.linear.default(bf16[1,2640,5120], bf16[5120,5120], bf16[5120])"]),
    ("dit", "shape_changed", ["aten.linear.default(bf16[1,4680,5120], bf16[15360,5120], bf16[15360])"], ["aten.linear.default(bf16[1,2640,5120], bf16[15360,5120], bf16[15360])"]),
    ("dit", "shape_changed", ["aten.linear.default(bf16[1,4680,5120], bf16[13824,5120], bf16[13824])"], ["aten.linear.default(bf16[1,2640,5120], bf16[13824,5120], bf16[13824])"]),
    ("dit", "shape_changed", ["aten.linear.default(bf16[1,4680,13824], bf16[5120,13824], bf16[5120])"], ["aten.linear.default(bf16[1,2640,13824], bf16[5120,13824], bf16[5120])"]),
    ("dit", "shape_changed", ["aten.linear.default(bf16[1,4680,1536], bf16[5120,1536], bf16[5120])"], ["aten.linear.default(bf16[1,10560,1536], bf16[5120,1536], bf16[5120])"]),
    ("dit", "shape_changed", ["aten.linear.default(bf16[4680,144], bf16[5120,144], bf16[5120])"], ["aten.linear.default(bf16[10560,144], bf16[5120,144], bf16[5120])"]),
    ("dit", "shape_changed", ["aten.linear.default(bf16[1,4680,5120], bf16[64,5120], bf16[64])"], ["aten.linear.default(bf16[1,10560,5120], bf16[64,5120], bf16[64])"]),
    ("dit", "same_signature", ["aten.linear.default(bf16[1,3,5120], bf16[30720,5120], bf16[30720])"], ["aten.linear.default(bf16[1,3,5120], bf16[30720,5120], bf16[30720])"]),
    ("dit", "same_signature", ["aten.linear.default(bf16[3,5120], bf16[5120,5120], bf16[5120])"], ["aten.linear.default(bf16[3,5120], bf16[5120,5120], bf16[5120])"]),
    ("dit", "same_signature", ["aten.linear.default(bf16[3,256], bf16[5120,256], bf16[5120])"], ["aten.linear.default(bf16[3,256], bf16[5120,256], bf16[5120])"]),
    ("output", "shape_changed", ['aten.to.dtype(f32[1,3,9,480,832], "torch.uint8")'], ['aten.to.dtype(f32[1,3,9,704,1280], "torch.uint8")']),
] + [("vae", "shape_changed", [f"aten.conv3d.default(f32{a}, f32{w}, f32{b})"], [f"aten.conv3d.default(f32{a2}, f32{w}, f32{b})"]) for a, a2, w, b in [
    ("[1,96,6,482,834]", "[1,96,6,706,322]", "[96,96,3,3,3]", "[96]"),
    ("[1,192,6,242,418]", "[1,192,6,354,162]", "[192,192,3,3,3]", "[192]"),
    ("[1,384,4,122,210]", "[1,384,4,178,82]", "[384,384,3,3,3]", "[384]"),
    ("[1,384,3,62,106]", "[1,384,3,90,42]", "[384,384,3,3,3]", "[384]"),
    ("[1,96,3,482,834]", "[1,96,3,706,322]", "[96,96,3,3,3]", "[96]"),
    ("[1,192,3,242,418]", "[1,192,3,354,162]", "[192,192,3,3,3]", "[192]"),
    ("[1,384,3,122,210]", "[1,384,3,178,82]", "[384,384,3,3,3]", "[384]"),
    ("[1,192,4,122,210]", "[1,192,4,178,82]", "[384,192,3,3,3]", "[384]"),
    ("[1,384,4,120,208]", "[1,384,4,176,80]", "[768,384,3,1,1]", "[768]"),
    ("[1,192,3,122,210]", "[1,192,3,178,82]", "[384,192,3,3,3]", "[384]"),
    ("[1,96,6,482,834]", "[1,96,6,706,322]", "[3,96,3,3,3]", "[3]"),
    ("[1,384,3,60,104]", "[1,384,3,88,40]", "[768,384,3,1,1]", "[768]"),
    ("[1,192,2,120,208]", "[1,192,2,176,80]", "[384,192,1,1,1]", "[384]"),
    ("[1,16,3,62,106]", "[1,16,3,90,42]", "[384,16,3,3,3]", "[384]"),
    ("[1,96,3,482,834]", "[1,96,3,706,322]", "[3,96,3,3,3]", "[3]"),
    ("[1,192,1,120,208]", "[1,192,1,176,80]", "[384,192,1,1,1]", "[384]"),
    ("[1,16,3,60,104]", "[1,16,3,88,160]", "[16,16,1,1,1]", "[16]"),
]]


def test_diff_pairs_the_seeds_480x832_one_rank_run_with_the_704x1280_four_rank_one(cli, seed_situation):
    a, b = seed_situation
    doc = json.loads(diff(cli, a, b, "--json").stdout)
    assert doc["format"] == "lingprobe.diff/1" and (doc["a"]["world_size"], doc["b"]["world_size"]) == (1, 4)
    entries = [(s["stage"], e) for s in doc["stages"] for e in s["entries"]]
    called = lambda r: r["signature"].split(" -> ")[0]  # noqa: E731  (the call; its output follows the arrow)
    got = sorted((st, e["kind"], [called(r) for r in e["a"]], [called(r) for r in e["b"]]) for st, e in entries)
    assert got == sorted(EXPECTED_PAIRS)
    assert all(s["counts"]["only_in_a"] == 0 and s["counts"]["only_in_b"] == 0 for s in doc["stages"])
    # The seeds' mistake: the 480x832 DiT linear against the two 704x1280 rows that differ only in stride.
    dit = next(e for st, e in entries if e["kind"] == "one_to_many")
    (row_a,) = dit["a"]
    assert row_a["signature"] == "aten.linear.default(bf16[1,4680,5120], bf16[5120,5120], bf16[5120]) -> bf16[1,4680,5120]"
    quarter = [r for r in dit["b"] if r["signature"].startswith("aten.linear.default(bf16[1,2640,5120]")]
    strides = set()
    for r in quarter:
        pair = next(p for p in dit["pairs"] if p["b"] == r["signature_sha256"])
        assert pair["a"] == row_a["signature_sha256"]
        stride = [d for d in pair["differences"] if d.startswith("args[0].stride")]
        assert len(stride) == 1, pair
        strides.add(stride[0].split(" -> ")[1])
    assert strides == {"[13516800,5120,1]", "[54067200,5120,1]"}
    assert dit["stride_variants"] == [{"side": "b", "signatures": sorted(r["signature_sha256"] for r in quarter)}]
    assert dit["calls_per_rank_a"] == dit["calls_per_rank_b"] and dit["calls_b"] == 4 * dit["calls_a"]
    # Sorted by FLOPs moved, largest first, within each stage.
    for s in doc["stages"]:
        moved = [abs(e["flops_moved"]) for e in s["entries"]]
        assert moved == sorted(moved, reverse=True)
    md = diff(cli, a, b).stdout
    assert "| one_to_many |" in md and "stride [54067200,5120,1]" in md and "stride [13516800,5120,1]" in md
    assert "per rank 160 → 160" in md


def test_diff_of_a_run_with_itself_is_empty_and_stage_filter_applies(cli, seed_situation):
    a, _ = seed_situation
    doc = json.loads(diff(cli, a, a, "--json").stdout)
    assert all(not s["entries"] for s in doc["stages"])
    assert sum(s["counts"]["unchanged"] for s in doc["stages"]) == doc["a"]["signatures"]
    only_vae = json.loads(diff(cli, a, seed_situation[1], "--json", "--stage", "vae").stdout)
    assert [s["stage"] for s in only_vae["stages"]] == ["vae"]


def test_diff_refuses_a_stage_neither_run_has_and_shows_every_row_when_asked(cli, seed_situation):
    # a new user's --stage typo printed an empty table and exit 0: "nothing changed"
    a, b = seed_situation
    p = diff(cli, a, b, "--stage", "ouput", expect_rc=1)
    assert p.stdout == "", p.stdout
    assert "--stage 'ouput': neither run has that stage (did you mean 'output'?)" in p.stderr, p.stderr
    assert p.stderr.rstrip().endswith("their stages: dit, output, vae"), p.stderr
    capped, every = diff(cli, a, b).stdout, diff(cli, a, b, "--rows", "0").stdout
    assert "more in the JSON" in capped and "more in the JSON" not in every
    assert len(every) > len(capped)
    for bad_rows in ("many", " -5"):
        bad = diff(cli, a, b, "--rows", bad_rows, expect_rc=2)
        assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "--rows takes a count of rows" in bad.stderr


def profile_run(run_dir, gpu_time_us, dram_bytes, calls, extra_sig=None):
    """A one-process run whose signature has counter evidence (a profile directory named by its record)."""
    import hashlib
    sig = {"args": [{"dtype": "torch.bfloat16", "shape": [8, 64], "stride": [64, 1]},
                    {"dtype": "torch.bfloat16", "shape": [64, 64], "stride": [64, 1]}], "kwargs": {},
           "op": "aten.linear.default", "output": {"dtype": "torch.bfloat16", "shape": [8, 64], "stride": [64, 1]},
           "stage": "dit"}
    text = json.dumps(sig, sort_keys=True, separators=(",", ":"))
    sha = hashlib.sha256(text.encode()).hexdigest()
    prof = run_dir / "profiles" / f"dit_rank0_{sha[:16]}"
    prof.mkdir(parents=True)
    (prof / "kernels.json").write_text(json.dumps({"kernels": [{"name": "gemm", "metrics": {
        "gpu__time_duration.sum": {"value": gpu_time_us, "unit": "us"},
        "dram__bytes.sum": {"value": dram_bytes, "unit": "byte"}}}]}))
    (prof / "manifest.json").write_text("{}")
    manifest = hashlib.sha256(b"{}").hexdigest()
    records = [header(run_id=run_dir.name), {"kind": "signature", "id": 0, "sha256": sha, "signature_json": text},
               {"kind": "profile", "id": 0, "seq": 0, "path": f"profiles/{prof.name}", "sha256": manifest,
                "status": "passed", "window_s": 0.5, "lock_wait_s": 0.1},
               {"depth": 0, "id": 0, "kind": "call", "seq": 0, "t0_ns": 6_000_000_000, "t1_ns": 6_000_001_000, "tid": 100},
               {"kind": "counts", "final": True, "calls": {"0": calls}, "dropped": {}}]
    write_run(run_dir, records)


def test_diff_compares_the_kernels_metrics_where_both_runs_have_counters(cli, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    profile_run(a, 10.0, 4000, 5)
    profile_run(b, 15.0, 4000, 7)
    doc = json.loads(diff(cli, a, b, "--json").stdout)
    (entry,) = doc["stages"][0]["entries"]
    assert entry["kind"] == "same_signature" and (entry["calls_a"], entry["calls_b"]) == (5, 7)
    assert entry["calls_change"] == 2 and entry["calls_change_relative"] == pytest.approx(0.4)
    (c,) = entry["counters"]
    assert (c["kernel_time_us_per_call_a"], c["kernel_time_us_per_call_b"]) == (10.0, 15.0)
    metrics = c["kernels"][0]["metrics"]
    assert metrics["gpu__time_duration.sum"]["change_relative"] == pytest.approx(0.5)
    assert metrics["dram__bytes.sum"]["change_relative"] == 0
    # The trace marks the counter window and its lock wait beside the call's thread.
    doc, _ = trace(cli, b)
    check_trace_format(doc)
    windows = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "lingprobe"]
    assert [w["name"] for w in windows] == ["counter window (passed)", "waiting for the counter lock"]
    call = next(e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] == "dit")
    assert windows[0]["ts"] == pytest.approx(call["ts"] - 1e5) and windows[0]["dur"] == pytest.approx(5e5)
    assert windows[1]["dur"] == pytest.approx(1e5) and windows[0]["tid"] != call["tid"]
    assert call["args"]["profile"] == windows[0]["args"]["path"]


def test_diff_refuses_malformed_input_clearly(cli, tmp_path, seed_situation):
    p = subprocess.run([cli, "diff", str(seed_situation[0])], capture_output=True, text=True)
    assert p.returncode == 2 and "needs two run directories" in p.stderr
    p = subprocess.run([cli, "diff", str(seed_situation[0]), str(tmp_path / "missing")], capture_output=True, text=True)
    assert p.returncode == 1 and "missing" in p.stderr and "missing' does not exist" in p.stderr
    bad = tmp_path / "bad"
    write_run(bad, None, raw=json.dumps(header()) + "\n" + '{"kind":"counts","calls":{"0":1}}\n')
    p = subprocess.run([cli, "diff", str(bad), str(seed_situation[0])], capture_output=True, text=True)
    assert p.returncode == 1 and "never defines" in p.stderr


def signatures_run(run_dir, sigs, **header_fields):
    import hashlib
    records = [header(run_id=run_dir.name, **header_fields)]
    for i, sig in enumerate(sigs):
        text = json.dumps(sig, sort_keys=True, separators=(",", ":"))
        records.append({"kind": "signature", "id": i, "sha256": hashlib.sha256(text.encode()).hexdigest(),
                        "signature_json": text})
    records.append({"kind": "counts", "final": True, "calls": {str(i): 3 for i in range(len(sigs))}, "dropped": {}})
    write_run(run_dir, records)


def one_signature_run(run_dir, stride):
    signatures_run(run_dir, [{"args": [{"dtype": "torch.float32", "shape": [2, 24, 64], "stride": stride}, [0, 0, 0, 0]],
                              "kwargs": {}, "op": "aten.pad.default", "stage": "unstaged",
                              "output": {"dtype": "torch.float32", "shape": [2, 24, 64], "stride": [1536, 64, 1]}}])


def test_a_pair_whose_sides_read_the_same_says_what_differs(cli, tmp_path):
    # A new user's fp32-against-autocast diff: "shape_changed | aten.pad.default(f32[2,24,64], ...) | the same text",
    # the stride change in the JSON only.
    a, b = tmp_path / "a", tmp_path / "b"
    one_signature_run(a, [4608, 192, 1])
    one_signature_run(b, [1536, 64, 1])
    row = next(l for l in diff(cli, a, b).stdout.splitlines() if "aten.pad.default" in l)
    assert "differs in `args[0].stride: [4608,192,1] -> [1536,64,1]`" in row, row


def test_rows_the_other_run_did_not_record_are_not_changes(cli, tmp_path):
    """A new user's run of every op against one with LINGPROBE_OPS='aten::linear': every relu read 'only_in_a',
    as if the model had stopped calling it, and nothing said the runs recorded different ops."""
    t = {"dtype": "torch.float32", "shape": [1, 8], "stride": [8, 1]}
    w = {"dtype": "torch.float32", "shape": [8, 8], "stride": [8, 1]}
    linear = {"args": [t, w], "kwargs": {}, "op": "aten.linear.default", "output": t, "stage": "s"}
    relu = {"args": [t], "kwargs": {}, "op": "aten.relu.default", "output": t, "stage": "s"}
    mm = {"args": [w, w], "kwargs": {}, "op": "aten.mm.default", "output": w, "stage": "s"}
    gone = dict(linear, args=[dict(t, shape=[2, 8], stride=[8, 1]), w], stage="other")  # a real change: A records it
    a, b = tmp_path / "a", tmp_path / "b"
    signatures_run(a, [linear, relu, mm, gone], config={"ops": "", "ops_deny": ""})
    signatures_run(b, [linear], config={"ops": "aten::linear", "ops_deny": ""})
    p = diff(cli, a, b)
    assert "**The runs recorded different ops** (A: every op; B: LINGPROBE_OPS='aten::linear')" in p.stdout, p.stdout
    row = next(l for l in p.stdout.splitlines() if "aten.relu.default" in l)
    assert row.startswith("| not_recorded_in_b |"), row
    doc = json.loads(diff(cli, a, b, "--json").stdout)
    counts = {s["stage"]: s["counts"] for s in doc["stages"]}
    assert counts["s"]["not_recorded_in_b"] == 2 and counts["s"]["only_in_a"] == 0, counts
    assert counts["other"]["only_in_a"] == 1 and counts["other"]["not_recorded_in_b"] == 0, counts
    flops = {s["stage"]: (s["flops_a"], s["flops_b"]) for s in doc["stages"]}
    assert flops["s"][0] == flops["s"][1] > 0, flops  # the mm B did not record counts in neither column
    assert doc["b"]["ops"] == "aten::linear" and doc["a"]["ops"] == ""
    same = diff(cli, a, a)
    assert "recorded different ops" not in same.stdout
