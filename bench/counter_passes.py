"""Does the pass a metric lands in change what it reads? (docs/COUNTERS.md)

Under kernel replay each pass after the first starts from device memory that
CUPTI restored; a kernel whose DRAM writes are tiny (a GEMV, a reduction)
then also writes back whatever the restore left dirty in L2. This measures a
GEMV ([3,5120] x [5120,5120], 30 KB out) and a reduction (mean of 216 MB, 42 KB
out) inline under several metric lists (order and count) and under ncu
(--cache-control none and all), one fresh process each, and prints the DRAM
bytes and time per configuration.

    python3 bench/counter_passes.py --build BUILD_DIR [--json OUT]
"""
import argparse
import csv
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

JOB = """
import torch, torch.nn.functional as F
dev = torch.device("cuda")
torch.manual_seed(0)
w = torch.randn(5120, 5120, device=dev, dtype=torch.bfloat16)
b = torch.randn(5120, device=dev, dtype=torch.bfloat16)
x = torch.randn(3, 5120, device=dev, dtype=torch.bfloat16)
big = torch.randn(1, 10560, 5120, device=dev)
torch.cuda.synchronize()
F.linear(x, w, b)
big.mean(-1)
torch.cuda.synchronize()
print("ok")
"""
SEED = ["gpu__time_duration.sum", "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "lts__throughput.avg.pct_of_peak_sustained_elapsed",
        "sm__warps_active.avg.pct_of_peak_sustained_active", "dram__bytes_read.sum", "dram__bytes_write.sum",
        "dram__bytes.sum.per_second"]
BYTES = ["dram__bytes_write.sum", "dram__bytes_read.sum", "gpu__time_duration.sum"]
CONFIGS = {
    "seed order (default)": SEED,
    "bytes first": BYTES + [m for m in SEED if m not in BYTES],
    "bytes and time only": BYTES,
    "writes only": ["dram__bytes_write.sum"],
}
SI = {"us": 1e-6, "Mbyte": 1e6, "Tbyte/s": 1e12}


def inline(build, metrics, tmp):
    out = tmp / "out"
    shutil.rmtree(out, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k != "LD_PRELOAD"}
    env.update(LD_PRELOAD=str(build / "liblingprobe_preload.so"), LINGPROBE_OUT=str(out), LINGPROBE_PROFILE="1",
               LINGPROBE_OPS="aten::linear,aten::mean", LINGPROBE_PROFILE_METRICS=",".join(metrics))
    p = subprocess.run([sys.executable, str(tmp / "job.py")], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = {}
    for d in sorted(out.glob("*/profiles/*")):
        ident = json.loads((d / "identity.json").read_text())
        op = json.loads(ident["signature_json"])["op"]
        (k,) = json.loads((d / "kernels.json").read_text())
        rows[op] = {"passes": ident.get("passes"),
                    **{m: k["metrics"][m]["value"] * SI.get(k["metrics"][m]["unit"], 1) for m in BYTES if m in k["metrics"]}}
    return rows


def ncu(tmp, cache):
    cmd = ["ncu", "--clock-control", "none", "--cache-control", cache, "--csv", "--page", "raw", "--print-units",
           "base", "-k", "regex:nvjet|reduce_kernel", "--metrics", ",".join(BYTES), sys.executable, str(tmp / "job.py")]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    lines = [l for l in p.stdout.splitlines() if l.startswith('"')]
    table = list(csv.reader(io.StringIO("\n".join(lines))))
    head, data = table[0], table[2:]
    rows = {}
    for r in data:
        rec = dict(zip(head, r))
        op = "aten.linear.default" if "nvjet" in rec["Kernel Name"] else "aten.mean.dim"
        rows[op] = {m: float(rec[m].replace(",", "")) * (1e-9 if m == "gpu__time_duration.sum" else 1) for m in BYTES}
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", type=pathlib.Path, required=True)
    ap.add_argument("--json", type=pathlib.Path)
    a = ap.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="lp-passes-"))
    (tmp / "job.py").write_text(JOB)
    results = {}
    for name, metrics in CONFIGS.items():
        results["inline: " + name] = inline(a.build.resolve(), metrics, tmp)
    if shutil.which("ncu"):
        for cache in ("none", "all"):
            results[f"ncu --cache-control {cache}"] = ncu(tmp, cache)
    for op in ("aten.linear.default", "aten.mean.dim"):
        print(f"{op}:  (DRAM write MB, read MB, time us, passes)")
        for name, rows in results.items():
            r = rows.get(op, {})
            print(f"  {name:34} {r.get('dram__bytes_write.sum', 0) / 1e6:9.2f} {r.get('dram__bytes_read.sum', 0) / 1e6:9.2f} "
                  f"{r.get('gpu__time_duration.sum', 0) * 1e6:9.1f}  {r.get('passes', '')}")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
