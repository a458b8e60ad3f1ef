"""Shared fixtures: where the build and the seeds are (set by ctest)."""
import json
import os
import pathlib
import re
import socket
import tempfile

import pytest

BUILD_DIR = pathlib.Path(os.environ.get("LPTEST_BUILD_DIR", pathlib.Path(__file__).resolve().parents[2] / "build"))
SHIM_DIR = pathlib.Path(__file__).resolve().parents[2] / "python_shim"
SEEDS_DIR = pathlib.Path(os.environ.get("LPTEST_SEEDS_DIR", pathlib.Path(__file__).resolve().parents[3] / "shared" / "seeds"))


# What the shell that started pytest may hold and lingprobe reads: its own options (a developer's exported
# LINGPROBE_OUT, LINGPROBE_FUZZ_SECONDS), LD_PRELOAD, and the launchers' rank variables (inside a Slurm allocation
# SLURM_PROCID makes every job a rank and SLURM_JOB_ID gives every launch the same run id). The tests' jobs set
# what they need themselves.
LAUNCH_VARIABLE = re.compile(r"^(LINGPROBE_|SLURM_|PMI_|PMIX_|OMPI_COMM_WORLD_|TORCHELASTIC_)|"
                             r"^(LD_PRELOAD|RANK|WORLD_SIZE|LOCAL_RANK|LOCAL_WORLD_SIZE|GROUP_RANK|MASTER_ADDR|"
                             r"MASTER_PORT)$")


@pytest.fixture(scope="session", autouse=True)
def environment_of_no_launch():
    """The session's children start from the environment of a plain shell, whatever launched pytest."""
    removed = {k: os.environ.pop(k) for k in list(os.environ) if LAUNCH_VARIABLE.search(k)}
    yield
    os.environ.update(removed)


@pytest.fixture(scope="session", autouse=True)
def temporary_files_under_pytests_own(tmp_path_factory):
    """The jobs the tests start make their temporary files under TMPDIR (torchrun's torchelastic_* directories: 16
    left in /tmp by each CI run before): under pytest's temporary directory they go with it."""
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp_path_factory.mktemp("tmpdir"))
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    yield
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None


@pytest.fixture(scope="session")
def build_dir():
    return BUILD_DIR


@pytest.fixture(scope="session")
def cli(build_dir):
    path = build_dir / "lingprobe"
    assert path.exists(), f"{path} not built: run scripts/test.sh"
    return str(path)


@pytest.fixture(scope="session")
def seed_audit():
    with open(SEEDS_DIR / "coverage_audit.seed.json") as f:
        return json.load(f)


def free_port():
    """A TCP port free on the loopback now, for a job's rendezvous: a fixed port fails every later test that uses it
    while an orphaned process of an earlier one (a timed-out job's agent) still listens there."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
