"""The C++ linking path end to end: a LibTorch program records its own calls
through the C ABI with stages set by RAII helpers."""
import os
import subprocess

import metadata


def test_cpp_serving_example_records_its_dit_calls(build_dir, tmp_path):
    exe = build_dir / "lingprobe_cpp_serving"
    p = subprocess.run([str(exe), str(tmp_path), "7", "64"], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    header, sigs, counts, calls, last = metadata.summarize(p.stdout.decode().strip())
    got = {}
    for i, n in counts.items():
        key = (sigs[i]["stage"], sigs[i]["op"])
        got[key] = got.get(key, 0) + n
    # per block: 4 linears and 2 matmuls, all top-level calls in C++
    assert got == {("dit", "aten.linear.default"): 28, ("dit", "aten.matmul.default"): 14}
    assert header["role"] == "single" and last["final"]


def test_a_program_that_returns_without_finalize_exits_cleanly_with_its_snapshots(build_dir, tmp_path):
    """finalize runs at exit by itself, and hashes the snapshots still being written. libcrypto registers its own
    exit handler (which frees its locks) at its first use, after lingprobe's: exit handlers run in reverse order,
    so it ran first and the snapshot writer crashed in EVP_MD_fetch (SIGSEGV at exit, the last snapshots and the
    final counts record lost; 6 of 6 runs of a user's program, 2026-12-06)."""
    exe = build_dir / "tests" / "exit_without_finalize"
    env = dict(os.environ, LINGPROBE_SNAPSHOTS="1", LINGPROBE_SAMPLE_DEVICES="any")  # CPU calls, on a GPU machine too
    for trial in range(3):
        p = subprocess.run([str(exe), str(tmp_path / str(trial))], capture_output=True, timeout=120, env=env)
        assert p.returncode == 0, (p.returncode, p.stderr.decode()[-2000:])
        path = p.stdout.decode().strip()
        header, sigs, counts, calls, last = metadata.summarize(path)
        assert last["final"] and len(sigs) >= 32  # 16 shapes of linear and of relu
        snapshots = [r for r in metadata.read(path) if r["kind"] == "snapshot"]
        assert len(snapshots) == len(sigs), (len(snapshots), len(sigs))  # each written whole and named


def test_the_example_under_ld_preload_says_it_records_as_configured_at_load(build_dir, tmp_path):
    """Under LD_PRELOAD the stub configures lingprobe at load; the program's own init with other options gets
    LINGPROBE_ERROR_ALREADY_INITIALIZED (it used to say ok and ignore them), and the example says so, serving on."""
    exe = build_dir / "lingprobe_cpp_serving"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_")}
    env.update(LD_PRELOAD=str(build_dir / "liblingprobe_preload.so"), LINGPROBE_OUT=str(tmp_path / "env-out"))
    p = subprocess.run([str(exe), str(tmp_path / "own-out"), "3", "64"], capture_output=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr.decode()
    err = p.stderr.decode()
    assert "lingprobe: recording as configured at load" in err, err
    assert "with other options (LINGPROBE_OUT, LINGPROBE_OPS)" in err, err
    (run,) = metadata.run_dirs(tmp_path / "env-out")
    assert not (tmp_path / "own-out").exists()
