"""The C++ linking path end to end: a LibTorch program records its own calls
through the C ABI with stages set by RAII helpers."""
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
