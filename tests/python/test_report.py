"""`lingprobe report` on the real profiled run of the H200 (4 ranks, the seed
selection, LINGPROBE_PROFILE=1; tests/data/h200-seed-profile-run.tgz holds its
metadata, profiles, replays and reports, not its snapshots). Runs anywhere:
the report reads files only."""
import hashlib
import os
import sys
import json
import pathlib
import re
import shutil
import subprocess
import tarfile
import xml.etree.ElementTree as ET

import pytest

from conftest import SEEDS_DIR

FIXTURE = pathlib.Path(__file__).resolve().parents[1] / "data" / "h200-seed-profile-run.tgz"
H200_BF16 = 989.4e12
H200_DRAM = 4.8e12


@pytest.fixture
def run(tmp_path):
    with tarfile.open(FIXTURE) as t:
        t.extractall(tmp_path)
    return tmp_path / "seed-profile"


def report(cli, run, *extra, check=True):
    p = subprocess.run([cli, "report", *extra, str(run)], capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def load(run):
    return json.loads((run / "reports" / "capability_report.json").read_text())


def test_report_of_the_real_run_in_the_seed_schema(cli, run):
    p = report(cli, run, "--generated-at", "2026-12-01T00:00:00+00:00")
    doc = load(run)
    seed = json.loads((SEEDS_DIR / "capability_report.seed.json").read_text())
    assert list(doc)[: len(seed)] == list(seed)  # generated_at, status, jobs, scope first
    assert doc["generated_at"] == "2026-12-01T00:00:00+00:00"
    assert doc["status"] == "passed"
    seed_job = seed["jobs"][0]
    seed_metrics = list(seed_job["kernels"][0]["metrics"])
    assert len(doc["jobs"]) == 30
    for job in doc["jobs"]:
        # the seed's keys first, in its order, then the additions
        assert [k for k in job if k in seed_job] == list(seed_job)
        assert list(job)[: len(seed_job)] == list(seed_job)
        assert job["status"] == "passed"
        assert job["correctness"]["exact"] is True and job["correctness"]["max_abs"] == 0
        assert len(job["input_sha256"]) == 64
        assert job["kernel_count"] == len(job["kernels"]) >= 1
        for k in job["kernels"]:
            assert list(k["metrics"]) == seed_metrics
        assert (run / job["output"] / "manifest.json").exists()
        assert 0 < job["fraction_of_peak_dram"] <= 1
        if job["flops_per_call"]:
            assert 0 < job["fraction_of_peak_flops"] <= 1
    shares = [j["share_of_estimated_gpu_time"] for j in doc["jobs"]]
    assert shares == sorted(shares, reverse=True) and abs(sum(shares) - 1) < 1e-9
    whole = doc["whole_run"]
    assert whole["signatures"] == whole["profiled_signatures"] == 30 and whole["unattributed_calls"] == 0
    assert sum(j["calls"] for j in doc["jobs"]) == 17106  # the run's calls (docs/gpu)
    assert "## Capability (inline counters)" in p.stdout and "30 of 30 signatures profiled inline (30 passed)" in p.stdout
    assert "| 33.7% | 9600 | 187.3 | 739 TFLOP/s | 75% | 1.07 TB/s | 22% | bf16 | passed | `aten.linear.default`" in p.stdout
    # What is left on the table: per job, its time x (1 - the bounding roof's fraction); the section leads.
    for job in doc["jobs"]:
        bound = max(job["fraction_of_peak_flops"] or 0, job["fraction_of_peak_dram"])
        assert abs(job["recoverable_gpu_time_us"] - job["estimated_gpu_time_us"] * (1 - bound)) < 1e-6
    assert abs(whole["recoverable_gpu_time_us"] - sum(j["recoverable_gpu_time_us"] for j in doc["jobs"])) < 1e-3
    assert p.stdout.index("### Left on the table") < p.stdout.index("| share of est. GPU time |")
    top = max(doc["jobs"], key=lambda j: j["recoverable_gpu_time_us"])
    table = p.stdout[p.stdout.index("### Left on the table"):]
    first_row = [l for l in table.splitlines() if l.startswith("| ") and "would save" not in l][0]
    assert top["signature_sha256"][:12] in first_row, first_row


def test_figures_recomputed_independently(cli, run):
    """The top job's FLOP/s and fractions from its own kernels and signature,
    without the report's code: a linear is 2*M*N*K FLOPs, plus M*N for a bias."""
    report(cli, run)
    job = load(run)["jobs"][0]
    sig = job["signature"]
    assert sig["op"] == "aten.linear.default" and job["math_mode"] == "bf16"
    x, w = sig["args"][0]["shape"], sig["args"][1]["shape"]
    m = 1
    for d in x[:-1]:
        m *= d
    flops = 2 * m * w[0] * w[1] + (m * w[0] if len(sig["args"]) > 2 else 0)
    assert job["flops_per_call"] == flops
    t = sum(k["metrics"]["gpu__time_duration.sum"]["value"] for k in job["kernels"]) * 1e-6
    assert all(k["metrics"]["gpu__time_duration.sum"]["unit"] == "us" for k in job["kernels"])
    dram = sum((k["metrics"]["dram__bytes_read.sum"]["value"] + k["metrics"]["dram__bytes_write.sum"]["value"]) * 1e6
               for k in job["kernels"])
    assert job["fraction_of_peak_flops"] == pytest.approx(flops / t / H200_BF16, rel=1e-9)
    assert job["fraction_of_peak_dram"] == pytest.approx(dram / t / H200_DRAM, rel=1e-9)
    assert job["estimated_gpu_time_us"] == pytest.approx(t * 1e6 * job["calls"], rel=1e-9)
    # cuDNN may use TF32 by default: fp32 convolutions are measured against the TF32 peak
    convs = [j for j in load(run)["jobs"] if j["signature"]["op"] == "aten.conv3d.default"]
    assert convs and all(j["math_mode"] == "tf32" and j["peak"]["flops_per_second"] == H200_BF16 / 2 for j in convs)


def test_roofline_and_summary(cli, run):
    audit_part = (run / "reports" / "summary.md").read_text()
    assert "## Capability" not in audit_part
    report(cli, run, "--generated-at", "t")
    once = (run / "reports" / "summary.md").read_text()
    report(cli, run, "--generated-at", "t")  # twice: the section is replaced, not repeated
    summary = (run / "reports" / "summary.md").read_text()
    assert summary == once
    assert summary.count("## Capability (inline counters)") == 1
    # The capability section leads, opening with what is left on the table; the audit's part follows whole.
    title, audit_body = audit_part.split("\n", 1)
    assert summary.startswith(title + "\n\n## Capability (inline counters)\n\n### Left on the table\n")
    assert summary.rstrip("\n").endswith(audit_body.strip("\n"))
    svg = ET.parse(run / "reports" / "roofline.svg").getroot()
    ns = "{http://www.w3.org/2000/svg}"
    points = [c for tag in ("circle", "rect", "polygon") for c in svg.iter(ns + tag) if c.find(ns + "title") is not None]
    with_flops = [j for j in load(run)["jobs"] if j["flops_per_call"]]
    assert len(points) == len(with_flops) == 29  # aten.to.dtype does no arithmetic: not on a roofline
    assert len(svg.findall(ns + "polyline")) == 2  # bf16 and tf32 roofs
    # a re-audit keeps the capability section
    subprocess.run([cli, "audit", "--quiet", str(run)], check=True, capture_output=True)
    again = (run / "reports" / "summary.md").read_text()
    capability = lambda text: text[text.index("## Capability"):text.index("<!-- end of the capability section -->")]
    assert again.count("## Capability (inline counters)") == 1 and capability(again) == capability(summary)
    assert again.startswith(title + "\n\n## Capability (inline counters)\n")


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_altered_profile_is_not_a_job(cli, run):
    """A kernels.json edited after the run (manifest untouched), then a
    manifest edited too: neither profile becomes a job."""
    profs = sorted((run / "profiles").iterdir())
    kernels = profs[0] / "kernels.json"
    kernels.write_text(kernels.read_text().replace('"value": ', '"value": 1', 1))
    (profs[1] / "manifest.json").write_text((profs[1] / "manifest.json").read_text() + " ")
    p = report(cli, run)
    assert f"profiles/{profs[0].name}: kernels.json is missing or altered since the run" in p.stderr
    assert f"profiles/{profs[1].name}: missing or altered since the run" in p.stderr
    doc = load(run)
    assert len(doc["jobs"]) == 28 and doc["whole_run"]["unattributed_signatures"] == 2
    assert not {j["output"] for j in doc["jobs"]} & {f"profiles/{profs[0].name}", f"profiles/{profs[1].name}"}
    shutil.rmtree(profs[0])
    report(cli, run)
    assert len(load(run)["jobs"]) == 28


def fail_profile(run, prof, status):
    """Rewrites a profile as if its window had ended `status` (identity,
    manifest and the run's profile record kept consistent)."""
    ident = json.loads((prof / "identity.json").read_text())
    ident["status"] = status
    (prof / "identity.json").write_text(json.dumps(ident))
    manifest = json.loads((prof / "manifest.json").read_text())
    manifest["sha256"]["identity.json"] = sha(prof / "identity.json")
    old = sha(prof / "manifest.json")
    (prof / "manifest.json").write_text(json.dumps(manifest))
    for f in (run / "metadata").glob("*.jsonl"):
        f.write_text(f.read_text().replace(old, sha(prof / "manifest.json")))


def test_a_job_that_did_not_pass_is_listed_but_not_counted(cli, run):
    report(cli, run)
    before = load(run)
    top = before["jobs"][0]
    fail_profile(run, run / top["output"], "contaminated")
    report(cli, run)
    doc = load(run)
    assert doc["status"] == "partial" and len(doc["jobs"]) == 30
    last = doc["jobs"][-1]  # passed jobs first
    assert last["output"] == top["output"] and last["status"] == "contaminated"
    assert last["share_of_estimated_gpu_time"] is None
    whole, was = doc["whole_run"], before["whole_run"]
    assert whole["passed_signatures"] == 29 and whole["unattributed_signatures"] == 1
    assert whole["unattributed_calls"] == top["calls"]
    assert whole["estimated_gpu_time_us"] == pytest.approx(was["estimated_gpu_time_us"] - top["estimated_gpu_time_us"])
    assert sum(j["share_of_estimated_gpu_time"] for j in doc["jobs"][:-1]) == pytest.approx(1)
    svg = ET.parse(run / "reports" / "roofline.svg").getroot()
    titles = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title")]
    assert len(titles) == 28 and not any(top["signature_sha256"][:16] in t for t in titles)
    assert "(29 passed, 1 contaminated)" in (run / "reports" / "summary.md").read_text() or \
        "(1 contaminated, 29 passed)" in (run / "reports" / "summary.md").read_text()


def test_an_audit_of_a_profiled_run_points_to_the_report(cli, run):
    """`audit` alone left summary.md without the capability section and without a word of how to get it."""
    (run / "reports" / "summary.md").unlink(missing_ok=True)
    subprocess.run([cli, "audit", "--quiet", str(run)], check=True, capture_output=True)
    summary = (run / "reports" / "summary.md").read_text()
    assert f"30 signature(s) have counter evidence: `lingprobe report {run}` puts here" in summary, summary[:2000]
    (run.parent / "latest").symlink_to(run)  # a re-audit rewrites its own placeholder (not the report's section)
    subprocess.run([cli, "audit", "--quiet", str(run.parent / "latest")], check=True, capture_output=True)
    summary = (run / "reports" / "summary.md").read_text()
    assert f"`lingprobe report {run.parent / 'latest'}` puts here" in summary and str(run) + "` puts" not in summary
    assert summary.count("## Capability (inline counters)") == 1
    report(cli, run)
    summary = (run / "reports" / "summary.md").read_text()
    assert "have counter evidence" not in summary and "### Left on the table" in summary
    assert summary.count("## Capability (inline counters)") == 1


def test_run_without_profiles_and_not_a_run(cli, run, tmp_path):
    shutil.rmtree(run / "profiles")
    report(cli, run)
    doc = load(run)
    assert doc["status"] == "no_profiles" and doc["jobs"] == [] and doc["whole_run"]["unattributed_signatures"] == 30
    assert "No profiled call in this run (30 signatures)" in (run / "reports" / "summary.md").read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    p = report(cli, empty, check=False)
    assert p.returncode == 1 and "is not a run directory" in p.stderr and not (empty / "reports").exists()
    p = subprocess.run([cli, "report", "--bogus"], capture_output=True, text=True)
    assert p.returncode == 2 and "unknown option" in p.stderr


def test_validate_command_chooses_signatures_and_never_crashes_without_ncu(cli, run, tmp_path):
    """`lingprobe validate` on the real run without Nsight Compute (CI): the
    choice (--top, then --random seeded among the rest) is deterministic,
    each profile's failure is reported and the exit status says the target
    was not shown; a directory without profiles is bad input."""
    env = dict(os.environ, PATH=str(tmp_path))  # no ncu (nor anything else) on PATH but the Python below
    (tmp_path / "python3").symlink_to(sys.executable)
    args = [cli, "validate", str(run), "--top", "2", "--random", "3", "--seed", "7", "--runs", "1",
            "--json", str(tmp_path / "v.json")]
    first = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    again = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 1, first.stdout + first.stderr
    picked = [l for l in first.stdout.splitlines() if "picked" in l]
    assert len(picked) == 1 and picked == [l for l in again.stdout.splitlines() if "picked" in l]
    doc = json.loads((tmp_path / "v.json").read_text())
    assert len(doc["results"]) == 5 and all(r.get("error") for r in doc["results"]), doc
    assert doc["pairs"] == 0
    empty = subprocess.run([cli, "validate", str(tmp_path)], env=env, capture_output=True, text=True)
    assert empty.returncode == 2 and "has no profiles/" in empty.stderr
    # --min-kernel-us: --random picks only among profiles with a kernel at least that long
    longest = {}
    for prof in (run / "profiles").iterdir():
        times = [k["metrics"]["gpu__time_duration.sum"]["value"] for k in json.loads((prof / "kernels.json").read_text())]
        longest[prof.name] = max(times, default=0)
    long_ones = {n for n, t in longest.items() if t >= 400}
    assert 2 < len(long_ones) < len(longest) - 5
    p = subprocess.run([cli, "validate", str(run), "--random", "2", "--seed", "1", "--min-kernel-us", "400", "--runs", "1"],
                       env=env, capture_output=True, text=True, timeout=300)
    (line,) = [l for l in p.stdout.splitlines() if "picked" in l]
    assert f"among {len(long_ones)} with a kernel >= 400 us" in line, line
    names = line.rsplit(": ", 1)[1].split(", ")
    assert len(names) == 2 and set(names) <= long_ones, (names, long_ones)


def test_measured_stage_time_is_the_denominator(cli, run):
    """A run with GPU time per stage (its counts records' stage_gpu): the
    report sets each stage's time without the windows against the passed
    jobs' estimated time, and every job gets its share of that total."""
    report(cli, run)
    jobs = load(run)["jobs"]
    by_stage = {}
    for j in jobs:
        by_stage[j["stage"]] = by_stage.get(j["stage"], 0) + j["estimated_gpu_time_us"]
    files = sorted((run / "metadata").glob("*.jsonl"))
    assert len(files) == 4
    for f in files:  # each rank measured a quarter of twice the estimate, half of it in clean intervals
        lines = f.read_text().splitlines()
        last = max(i for i, l in enumerate(lines) if '"kind":"counts"' in l)
        rec = json.loads(lines[last])
        rec["stage_gpu"] = {s: {"gpu_us": round(t / 2), "intervals": 2, "clean_gpu_us": round(t / 4), "clean_intervals": 1}
                            for s, t in by_stage.items()}
        lines[last] = json.dumps(rec, sort_keys=True, separators=(",", ":"))
        f.write_text("\n".join(lines) + "\n")
    report(cli, run)
    doc = load(run)
    measured = doc["whole_run"]["measured_gpu_time"]
    assert set(measured["by_stage"]) == set(by_stage)
    for s, t in by_stage.items():
        m = measured["by_stage"][s]
        assert m["intervals"] == 8 and m["clean_intervals"] == 4
        assert m["gpu_time_without_windows_us"] == pytest.approx(2 * t, rel=1e-3, abs=4)  # rounded to us per rank
        assert m["attributed_fraction"] == pytest.approx(0.5, rel=2e-2)
    assert sum(j["share_of_measured_gpu_time"] for j in doc["jobs"]) == pytest.approx(0.5, rel=1e-3)
    assert "Measured GPU time (CUDA events per stage, all ranks)" in (run / "reports" / "summary.md").read_text()


def test_the_roofline_is_a_picture_people_can_read(cli, run, tmp_path):
    """Issue 28, item 11: names on the largest points, markers by math mode with a legend, areas by share of GPU
    time, roof names clear of the points, points off the axes said to be; rendered to PNG as a reader sees it."""
    import re
    import shutil
    report(cli, run)
    svg = (run / "reports" / "roofline.svg").read_text()
    labels = re.findall(r'<text x="([\d.]+)" y="[\d.]+" font-size="10">([^<]+)</text>', svg)
    assert all(" [" in text for _, text in labels), labels  # op and shape
    named = sum(int(n) if n else 1 for _, text in labels for n in [re.search(r"\((\d+) signatures\)", text)]
                for n in [n.group(1) if n else None])
    assert named == 5, labels  # the five largest, one label per op and shape
    assert "math mode</text>" in svg and "stage</text>" in svg
    roof_names = re.findall(r'<text x="([\d.]+)" y="[\d.]+" fill="#c33">[^<]*peak', svg)
    assert roof_names and all(float(x) > 760 for x in roof_names)  # in the margin, right of the plot
    sizes = {float(r) for r in re.findall(r'(?:r|width)="([\d.]+)" fill', svg)}
    assert len(sizes) > 2  # sized by share, not one size for all
    assert len({m for m in re.findall(r"<(circle|rect|polygon) [^>]*><title>", svg)}) >= 2  # a marker per math mode
    if shutil.which("rsvg-convert"):
        png = tmp_path / "roofline.png"
        subprocess.run(["rsvg-convert", "-o", str(png), str(run / "reports" / "roofline.svg")], check=True)
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def add_timed_call(run, job, scale):
    """A kernel_timing record for the job's signature, its kernels' times `scale` times the counter window's."""
    sha = job["signature_sha256"]
    f = next(p for p in sorted((run / "metadata").glob("*.jsonl")) if sha in p.read_text())
    sig_id = next(json.loads(l)["id"] for l in f.read_text().splitlines()
                  if '"kind":"signature"' in l and json.loads(l)["sha256"] == sha)
    kernels = [{"name": k["name"], "metrics": {"gpu__time_duration.sum": {
        "value": k["metrics"]["gpu__time_duration.sum"]["value"] * scale, "unit": "us"}}} for k in job["kernels"]]
    timing = {"id": sig_id, "kind": "kernel_timing", "seq": 999999, "status": "passed", "window_s": 0.001,
              "kernels": kernels}
    lines = f.read_text().splitlines()
    last = max(i for i, l in enumerate(lines) if '"kind":"counts"' in l)  # before the final counts, as written
    lines.insert(last, json.dumps(timing, sort_keys=True, separators=(",", ":")))
    f.write_text("\n".join(lines) + "\n")


def test_a_job_above_its_roof_is_a_defect_not_a_figure(cli, run):
    """A kernel time too short for the FLOPs (here a timed call at a thousandth of the window's) puts a job above
    its roof: it is no longer 'passed', and neither the JSON nor the summary prints its fraction (it read
    'passed' at 1003% of the roof)."""
    report(cli, run)
    top = load(run)["jobs"][0]
    add_timed_call(run, top, 0.001)
    p = report(cli, run)
    assert "over 100%: its math mode or its kernel time is wrong" in p.stderr, p.stderr
    doc = load(run)
    job = next(j for j in doc["jobs"] if j["signature_sha256"] == top["signature_sha256"])
    assert job["over_roof"] and job["status"] == "over_roof" and doc["status"] == "partial", job["status"]
    assert job["fraction_of_peak_flops"] is None and job["share_of_estimated_gpu_time"] is None
    assert job["over_roof_fraction"] > 1
    summary = (run / "reports" / "summary.md").read_text()
    assert "(29 passed, 1 over_roof)" in summary or "(1 over_roof, 29 passed)" in summary
    assert all(int(x) <= 100 for x in re.findall(r"\| (\d+)% \|", summary))
    for row in (l for l in summary.splitlines() if top["signature_sha256"][:12] in l):  # listed: without a figure
        assert "| passed |" not in row, row
        if "| over_roof |" in row:  # the top jobs' table: its two fractions read "over roof"
            assert row.count("| over roof |") == 2, row


def test_a_timed_call_gives_the_kernel_time_and_the_flop_rate(cli, run):
    """LINGPROBE_PROFILE_TIMING: a key's next call after its counters is timed by CUPTI Activity alone (a
    kernel_timing record). The report's kernel time, FLOP rate and estimate come from it; the DRAM rate stays the
    counter window's bytes over the window's own time; the audit's row says which time it shows."""
    report(cli, run)
    before = load(run)["jobs"][0]
    counters_us = before["kernel_time_us_per_call"]
    assert before["kernel_time_source"] == "counters" and before["timed_call"] is None
    sha = before["signature_sha256"]
    add_timed_call(run, before, 0.9)
    report(cli, run)
    job = next(j for j in load(run)["jobs"] if j["signature_sha256"] == sha)
    assert job["kernel_time_source"] == "activity" and job["timed_call"]["seq"] == 999999
    assert job["kernel_time_us_per_call"] == pytest.approx(0.9 * counters_us, rel=1e-9)
    assert job["counters_kernel_time_us_per_call"] == pytest.approx(counters_us, rel=1e-9)
    assert job["fraction_of_peak_flops"] == pytest.approx(before["fraction_of_peak_flops"] / 0.9, rel=1e-9)
    assert job["fraction_of_peak_dram"] == pytest.approx(before["fraction_of_peak_dram"], rel=1e-9)
    assert job["estimated_gpu_time_us"] == pytest.approx(0.9 * before["estimated_gpu_time_us"], rel=1e-9)
    subprocess.run([cli, "audit", "--quiet", str(run)], check=True, capture_output=True)
    rows = json.loads((run / "reports" / "coverage_audit.json").read_text())["rows"]
    row = next(r for r in rows if r["signature_sha256"] == sha)
    assert row["kernel_time_source"] == "activity"
    assert row["kernel_time_us_per_call"] == pytest.approx(0.9 * counters_us, rel=1e-9)
    assert {r["kernel_time_source"] for r in rows if r["signature_sha256"] != sha} <= {"counters", None}
