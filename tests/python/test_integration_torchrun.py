"""Tier 3: a real 4-rank torchrun job (gloo, CPU) under `lingprobe run`, then
every output file validated against what the job itself says it did."""
import collections
import json
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import free_port

import metadata

HERE = pathlib.Path(__file__).resolve().parent
JOB = HERE.parent / "integration" / "distributed_job.py"


@pytest.fixture(scope="module")
def run_dir(cli, build_dir, tmp_path_factory):
    helper = build_dir / "tests" / "libnvtx_helper.so"
    if not helper.exists():
        pytest.skip("built without the CUDA toolkit's NVTX3 headers: no NVTX helper")
    out = tmp_path_factory.mktemp("torchrun")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", LPTEST_NVTX_HELPER=str(helper))
    proc = subprocess.run(
        [cli, "run", "-o", str(out), "--ops", "aten::linear,aten::conv3d,aten::to",
         "--stage-map", "dit=DitBlock;vae=__main__.VaeDecoder;output=job_outputs:save_video",
         "--nvtx-map", "dit=^transformer;vae=^vae;output=^output", "--",
         sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=4", f"--master_port={free_port()}",
         # torch 1.13 on Python 3.11 maps the default "0" of these to None (IntFlag
         # iteration skips 0); 2 (stderr) parses on both versions.
         "--redirects=2", "--tee=2",
         str(JOB), str(out)],
        env=env, capture_output=True, timeout=600)
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    return out


def test_one_file_per_rank_none_for_launcher_or_child(run_dir):
    files = metadata.files(run_dir)
    ranks = sorted(metadata.read(f)[0]["rank"] for f in files)
    assert ranks == [0, 1, 2, 3], [f.name for f in files]
    for f in files:
        h = metadata.read(f)[0]
        assert h["role"] == "rank" and h["world_size"] == 4
        assert f.name == f"metadata_rank{h['rank']}_pid{h['pid']}.jsonl"
        assert h["torch_version"] and h["lingprobe_version"] and h["run_id"]


def test_counts_and_stages_match_what_the_job_did(run_dir):
    runs = set()
    for f in metadata.files(run_dir):
        header, sigs, counts, calls, last = metadata.summarize(f)
        runs.add(header["run_id"])
        got = collections.Counter()
        for sid, n in counts.items():
            got[f"{sigs[sid]['stage']}/{sigs[sid]['op']}"] += n
        expected = json.loads((run_dir / f"expected_rank{header['rank']}.json").read_text())
        assert dict(got) == expected
        assert last["final"] is True
        assert last["dropped"] == {}
        # call records agree with counts; per-thread stages stayed apart
        per_id = collections.Counter(c["id"] for c in calls)
        assert dict(per_id) == counts
        tids_by_stage = collections.defaultdict(set)
        for c in calls:
            tids_by_stage[sigs[c["id"]]["stage"]].add(c["tid"])
        for i in range(8):
            assert len(tids_by_stage[f"thread{i}"]) == 1
    assert len(runs) == 1
