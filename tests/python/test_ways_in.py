"""The one-variable way in, as a new user meets it: plain LD_PRELOAD of the
stub (no PYTHONPATH, no `lingprobe run`) into Python scripts, torchrun jobs,
mp.spawn processes and from an installed prefix; the right identity for every
process (ranks, the launcher, children); one run directory per launch."""
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import free_port

import metadata

ROOT = pathlib.Path(__file__).resolve().parents[2]


def clean_env(**extra):
    """The environment of a user who has set nothing of lingprobe's."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LINGPROBE_") and k not in ("PYTHONPATH", "LD_PRELOAD")}
    env.update(OMP_NUM_THREADS="1", **extra)
    return env


def preload(stub, out, **extra):
    return clean_env(LD_PRELOAD=str(stub), LINGPROBE_OUT=str(out), **extra)


def run(args, env, cwd=None, timeout=300):
    p = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return p


def lingprobe_lines(text):
    return [l for l in text.splitlines() if "lingprobe" in l]


def without_python_resource_tracker_warnings(stderr):
    """stderr less CPython's own multiprocessing warning at a spawn child's teardown ("resource_tracker: '/mp-...':
    [Errno 2] No such file or directory" and its `warnings.warn(` line): a race between a semaphore's unlink and
    the tracker's (seen once in CI's DataLoader spawn case), not a line of lingprobe's."""
    lines = stderr.splitlines()
    keep = [l for i, l in enumerate(lines)
            if "UserWarning: resource_tracker:" not in l
            and not (l.strip().startswith("warnings.warn(") and i and "UserWarning: resource_tracker:" in lines[i - 1])]
    return "\n".join(keep)


def only_the_exit_line(stderr, out):
    """A run that went well says one thing at exit: where its records went and the next command (issue 28)."""
    (line,) = without_python_resource_tracker_warnings(stderr).splitlines()
    (run_dir,) = metadata.run_dirs(out)
    assert line.startswith("[lingprobe") and f"into {run_dir}; next: " in line, stderr
    assert line.endswith(f"lingprobe audit {run_dir}"), stderr  # `lingprobe`, or its path where PATH lacks it


def headers(out):
    return [metadata.read(f)[0] for f in metadata.files(out)]


def rows(out, roles=("rank", "single")):
    """(rank, canonical signature) -> calls, from the files of these roles (as the audit sums them)."""
    got = {}
    for f in metadata.files(out):
        header, sigs, counts, _, _ = metadata.summarize(f)
        if header["role"] not in roles:
            continue
        for sid, n in counts.items():
            key = (header["rank"], json.dumps(sigs[sid], sort_keys=True))
            got[key] = got.get(key, 0) + n
    return got


SCRIPT = textwrap.dedent("""
    import os, sys, torch, torch.nn.functional as F
    for _ in range(5):
        F.linear(torch.ones(2, 3), torch.ones(4, 3))
    print("PYTHONPATH=" + repr(os.environ.get("PYTHONPATH")))
""")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    return path


def test_plain_ld_preload_is_enough(build_dir, tmp_path, script):
    out = tmp_path / "o"
    p = run([sys.executable, str(script)], preload(build_dir / "liblingprobe_preload.so", out, LINGPROBE_OPS="aten::linear"))
    assert p.returncode == 0, p.stderr
    only_the_exit_line(p.stderr, out)
    assert "PYTHONPATH=None" in p.stdout  # the stub's entry is gone from what children inherit
    (f,) = metadata.files(out)
    header, sigs, counts, _, last = metadata.summarize(f)
    assert header["role"] == "single" and list(counts.values()) == [5] and last["final"]
    (run_dir,) = metadata.run_dirs(out)
    assert run_dir.name == header["run_id"] and os.readlink(out / "latest") == run_dir.name


def test_existing_pythonpath_and_user_sitecustomize_still_work(build_dir, tmp_path, script):
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_SITE_RAN'] = '1'\n")
    (user / "usermod.py").write_text("X = 42\n")
    code = ("import os, usermod, torch\n"
            "torch.mm(torch.ones(2, 2), torch.ones(2, 2))\n"
            "print(usermod.X, os.environ.get('USER_SITE_RAN'), os.environ['PYTHONPATH'])\n")
    out = tmp_path / "o"
    p = run([sys.executable, "-c", code],
            preload(build_dir / "liblingprobe_preload.so", out, PYTHONPATH=str(user), LINGPROBE_OPS="aten::mm"))
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["42", "1", str(user)]
    (f,) = metadata.files(out)
    assert sum(metadata.summarize(f)[2].values()) == 1


@pytest.mark.parametrize("flag", ["-I", "-E", "-S", "-sE"])
def test_options_that_skip_the_shim_say_so_in_one_line(build_dir, tmp_path, script, flag):
    out = tmp_path / "o"
    code = "import sys; sys.path[:0] = " + repr(sys.path[1:]) + "; import torch; torch.ones(1)"
    p = run([sys.executable, flag, "-c", code], preload(build_dir / "liblingprobe_preload.so", out))
    assert p.returncode == 0, p.stderr
    lines = lingprobe_lines(p.stderr)
    assert len(lines) == 1, p.stderr
    assert "could not attach" in lines[0] and flag[-1:] in lines[0] and "nothing was recorded" in lines[0]
    assert not metadata.files(out)


def test_preloading_the_full_library_names_the_stub_and_records_nothing(build_dir, tmp_path, script):
    out = tmp_path / "o"
    p = run([sys.executable, str(script)], preload(build_dir / "liblingprobe.so", out))
    assert p.returncode == 0, p.stderr
    (line,) = lingprobe_lines(p.stderr)
    assert "liblingprobe_preload.so" in line and "records nothing" in line
    assert not metadata.files(out)


def test_children_without_torch_stay_untouched(build_dir, tmp_path):
    out = tmp_path / "o"
    # the shim's start-up part is loaded (about 5 ms), but neither torch nor ctypes
    code = "import sys; print('torch' in sys.modules, 'ctypes' in sys.modules)"
    p = run(["sh", "-c", f"echo hi; {sys.executable} -c \"{code}\""], preload(build_dir / "liblingprobe_preload.so", out))
    assert p.returncode == 0 and p.stdout == "hi\nFalse False\n" and p.stderr == ""
    assert not out.exists()


def test_torchrun_job_with_plain_ld_preload(build_dir, tmp_path):
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent("""
        import torch, torch.distributed as dist, torch.nn.functional as F
        dist.init_process_group("gloo")
        for _ in range(3 + dist.get_rank()):
            F.linear(torch.ones(2, 3), torch.ones(4, 3))
        dist.barrier()
    """))
    out = tmp_path / "o"
    p = run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=4", f"--master_port={free_port()}",
             "--redirects=2", "--tee=2", str(job)],
            preload(build_dir / "liblingprobe_preload.so", out, LINGPROBE_OPS="aten::linear"), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    hs = headers(out)
    assert sorted(h["rank"] for h in hs) == [0, 1, 2, 3] and {h["role"] for h in hs} == {"rank"}
    assert len({h["run_id"] for h in hs}) == 1  # the agent gave its workers one launch id
    assert {k[0]: n for k, n in rows(out).items()} == {0: 3, 1: 4, 2: 5, 3: 6}


def test_four_mp_spawn_processes_are_ranks_0_to_3(build_dir, tmp_path):
    job = tmp_path / "spawn_job.py"
    job.write_text(textwrap.dedent("""
        import sys, torch, torch.distributed as dist, torch.multiprocessing as mp, torch.nn.functional as F
        def worker(i, world, port):
            dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=i, world_size=world)
            for _ in range(2 + i):
                F.linear(torch.ones(2, 3), torch.ones(4, 3))
            dist.barrier()
            dist.destroy_process_group()
        if __name__ == "__main__":
            F.linear(torch.ones(2, 3), torch.ones(4, 3))  # the parent's own call: not a rank's
            mp.spawn(worker, args=(4, int(sys.argv[1])), nprocs=4)
    """))
    out = tmp_path / "o"
    p = run([sys.executable, str(job), str(free_port())],
            preload(build_dir / "liblingprobe_preload.so", out, LINGPROBE_OPS="aten::linear"), timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    hs = headers(out)
    ranks = sorted((h["rank"], h["world_size"]) for h in hs if h["role"] == "rank")
    assert ranks == [(0, 4), (1, 4), (2, 4), (3, 4)]
    (parent,) = [h for h in hs if h["role"] == "single"]
    assert len({h["run_id"] for h in hs}) == 1
    assert {k[0]: n for k, n in rows(out, roles=("rank",)).items()} == {0: 2, 1: 3, 2: 4, 3: 5}
    # the audit reports the mp.spawn parent apart, never as rank 0
    (run_dir,) = metadata.run_dirs(out)
    a = subprocess.run([str(build_dir / "lingprobe"), "audit", "--quiet", str(out)], capture_output=True, text=True)
    assert a.returncode == 0, a.stderr
    report = json.loads((run_dir / "reports" / "coverage_audit.json").read_text())
    assert [r["calls_by_rank"] for r in report["rows"]] == [{"0": 2, "1": 3, "2": 4, "3": 5}]
    assert [(o["role"], o["pid"], o["calls"]) for o in report["other_processes"]] == [("single", parent["pid"], 1)]


DATALOADER = textwrap.dedent("""
    import sys, torch, torch.nn.functional as F
    from torch.utils.data import DataLoader, Dataset
    class Numbers(Dataset):
        def __len__(self):
            return 8
        def __getitem__(self, i):
            return torch.full((3,), float(i)) * 2
    if __name__ == "__main__":
        workers, method = int(sys.argv[1]), sys.argv[2]
        kw = dict(num_workers=workers, multiprocessing_context=method) if workers else {}
        w = torch.ones(4, 3)
        for batch in DataLoader(Numbers(), batch_size=2, **kw):
            F.linear(batch, w)
""")


def test_dataloader_workers_leave_the_rank_rows_unchanged(build_dir, tmp_path):
    job = tmp_path / "loader.py"
    job.write_text(DATALOADER)
    results = {}
    for workers, method in ((0, "fork"), (2, "fork"), (2, "spawn")):
        out = tmp_path / f"o-{workers}-{method}"
        # RANK=0 as under torchrun: children inherit it and must not become rank 0
        p = run([sys.executable, str(job), str(workers), method],
                preload(build_dir / "liblingprobe_preload.so", out, LINGPROBE_OPS="aten::linear", RANK="0",
                        WORLD_SIZE="1"))
        assert p.returncode == 0, p.stderr
        only_the_exit_line(p.stderr, out)  # rank 0's; never a worker's
        results[(workers, method)] = (rows(out), headers(out))
    base = results[(0, "fork")][0]
    assert base and all(r == base for r, _ in results.values())
    assert [h["role"] for h in results[(2, "fork")][1]] == ["rank"]  # forked workers record nothing
    # spawned workers: their own files as children (nothing selected in them here)
    out = tmp_path / "o-children"
    p = run([sys.executable, str(job), "2", "spawn"],
            preload(build_dir / "liblingprobe_preload.so", out, LINGPROBE_OPS="aten::linear,aten::mul", RANK="0",
                    WORLD_SIZE="1"))
    assert p.returncode == 0, p.stderr
    hs = headers(out)
    (rank,) = [h for h in hs if h["role"] == "rank"]
    children = [h for h in hs if h["role"] == "child"]
    assert len(children) == 2 and {h["parent_pid"] for h in children} == {rank["pid"]}
    assert all(f.name.startswith("metadata_child_pid") for f in metadata.files(out) if "child" in f.name)
    a = subprocess.run([str(build_dir / "lingprobe"), "audit", "--quiet", str(out)], capture_output=True, text=True)
    assert a.returncode == 0, a.stderr
    (run_dir,) = metadata.run_dirs(out)
    report = json.loads((run_dir / "reports" / "coverage_audit.json").read_text())
    assert [r["signature"]["op"] for r in report["rows"]] == ["aten.linear.default"]
    assert sorted(o["role"] for o in report["other_processes"]) == ["child", "child"]
    assert sum(o["calls"] for o in report["other_processes"]) == 8  # the workers' aten::mul
    assert "Other processes" in (run_dir / "reports" / "summary.md").read_text()


def test_from_an_installed_prefix(build_dir, tmp_path, script):
    prefix = tmp_path / "prefix"
    p = run(["cmake", "--install", str(build_dir), "--prefix", str(prefix)], clean_env())
    assert p.returncode == 0, p.stderr
    (stub,) = prefix.glob("lib*/**/liblingprobe_preload.so")
    # the source tree must not be what makes it work: copy the installed tree elsewhere
    moved = tmp_path / "moved"
    shutil.copytree(prefix, moved, symlinks=True)
    shutil.rmtree(prefix)
    stub = moved / stub.relative_to(prefix)
    out = tmp_path / "o"
    p = run([sys.executable, str(script)], preload(stub, out, LINGPROBE_OPS="aten::linear"))
    assert p.returncode == 0, p.stderr
    only_the_exit_line(p.stderr, out)
    (f,) = metadata.files(out)
    assert sum(metadata.summarize(f)[2].values()) == 5
    cli = next(moved.glob("bin/lingprobe"))
    p = run([str(cli), "run", "-o", str(tmp_path / "o2"), "--ops", "aten::linear", "--", sys.executable, str(script)],
            clean_env())
    assert p.returncode == 0, p.stderr
    (f,) = metadata.files(tmp_path / "o2")
    assert sum(metadata.summarize(f)[2].values()) == 5
    # the torch-linked replayer loads from the moved tree too (it links liblingprobe for replay --profile)
    p = run([str(cli), "replay", "--help"], clean_env())
    assert p.returncode == 0 and "--profile" in p.stdout, p.stdout + p.stderr


def test_two_launches_into_one_directory_are_kept_apart(build_dir, tmp_path, script):
    out = tmp_path / "o"
    for _ in range(2):
        p = run([sys.executable, str(script)], preload(build_dir / "liblingprobe_preload.so", out, LINGPROBE_OPS="aten::linear"))
        assert p.returncode == 0, p.stderr
    first, second = metadata.run_dirs(out)
    assert first.name != second.name
    assert os.readlink(out / "latest") in (first.name, second.name)
    cli = str(build_dir / "lingprobe")
    a = subprocess.run([cli, "audit", "--quiet", str(out)], capture_output=True, text=True)
    assert a.returncode == 1 and "holds 2 launches" in a.stderr and "--allow-mixed-runs" in a.stderr
    a = subprocess.run([cli, "audit", "--quiet", str(second)], capture_output=True, text=True)
    assert a.returncode == 0, a.stderr
    assert json.loads((second / "reports" / "coverage_audit.json").read_text())["rows"][0]["calls"] == 5
    a = subprocess.run([cli, "audit", "--quiet", "--allow-mixed-runs", "-o", str(tmp_path / "both.json"), str(out)],
                       capture_output=True, text=True)
    assert a.returncode == 0 and "mixed_runs" in metadata.warning_codes(a.stderr), a.stderr
    assert json.loads((tmp_path / "both.json").read_text())["rows"][0]["calls"] == 10
    # one launch id given by the user: the same run directory (a restarted process joins its launch)
    for _ in range(2):
        p = run([sys.executable, str(script)],
                preload(build_dir / "liblingprobe_preload.so", tmp_path / "o3", LINGPROBE_RUN_ID="job-7"))
        assert p.returncode == 0, p.stderr
    assert [d.name for d in metadata.run_dirs(tmp_path / "o3")] == ["job-7"]
    assert len(metadata.files(tmp_path / "o3")) == 2


def test_late_rank_after_the_first_flush_is_refused_with_a_reason(build_dir, tmp_path):
    code = textwrap.dedent(f"""
        import time, torch, lingprobe
        lingprobe.start(out_dir={str(tmp_path)!r}, ops=["aten::mm"], flush_interval_ms=10)
        torch.mm(torch.ones(2, 2), torch.ones(2, 2))
        lingprobe.flush()
        try:
            lingprobe.set_rank(2, 2, 4)
        except lingprobe.LingprobeError as e:
            print("refused:", e)
    """)
    p = run([sys.executable, "-c", code], clean_env(PYTHONPATH=str(ROOT / "python_shim"),
                                                     LINGPROBE_LIBRARY=str(build_dir / "liblingprobe.so")))
    assert p.returncode == 0, p.stderr
    assert "refused:" in p.stdout and "before lingprobe's first flush" in p.stdout
    assert [h["rank"] for h in headers(tmp_path)] == [0]


def has_torch_compile():
    # In a child: importing torch here would make every later child's peak RSS
    # include pytest's (Linux carries the pre-exec high-water mark over exec).
    return subprocess.run([sys.executable, "-c", "import torch, sys; sys.exit(not hasattr(torch, 'compile'))"]).returncode == 0


def test_torch_compile_workers_leave_the_rank_rows_unchanged(build_dir, tmp_path):
    if not has_torch_compile():
        pytest.skip("torch.compile needs torch >= 2.0 (Debian's torch is 1.13): runs on the GPU machine "
                    "(scripts/gpu-check.sh test)")
    job = tmp_path / "compiled.py"
    job.write_text(textwrap.dedent("""
        import torch, torch.nn.functional as F
        def f(x, w):
            return torch.relu(F.linear(x, w)) * 2
        g = torch.compile(f)
        x, w = torch.randn(8, 16), torch.randn(32, 16)
        for _ in range(3):
            g(x, w)
        F.linear(x, w)
    """))
    results = []
    for threads in ("1", "4"):
        out = tmp_path / f"o{threads}"
        p = run([sys.executable, str(job)], preload(build_dir / "liblingprobe_preload.so", out, RANK="0", WORLD_SIZE="1",
                                                    TORCHINDUCTOR_COMPILE_THREADS=threads,
                                                    TORCHINDUCTOR_CACHE_DIR=str(tmp_path / f"cache{threads}")),
                timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        results.append((rows(out), headers(out)))
    assert results[0][0] == results[1][0]
    print("compile workers:", [(h["role"], h.get("parent_pid")) for h in results[1][1]])
