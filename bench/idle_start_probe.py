"""Does a kernel that starts on an idle GPU run as long as the same kernel queued behind the one before it?

A timed call (docs/COUNTERS.md) synchronizes when it closes, so the next op's kernels start on an idle GPU, where
torch.profiler's unprofiled trace has them queued back to back. This measures that difference alone, without
lingprobe: the issue-26 gate's Llama program (two sequence lengths, bf16 autocast) under torch.profiler, its
forwards run plainly and with a synchronize after every ATen call (a TorchDispatchMode), alternated, the kernels
paired by their order. "plain vs plain" is the method's own noise.

    python3 bench/idle_start_probe.py [--json OUT]      # GPU machine: transformers on CUDA
"""
import argparse
import json
import os
import statistics
import sys
import tempfile

import torch
import transformers
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

MIN_US = 20.0


class SynchronizeAfterEachCall(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        torch.cuda.synchronize()
        return out


def kernels(model, ids, synchronize):
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            for x in ids:
                if synchronize:
                    with SynchronizeAfterEachCall():
                        model(x)
                else:
                    model(x)
        torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    ks = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    return [(e["name"][:60], float(e["dur"])) for e in ks]


def compare(a, b):
    if [n for n, _ in a] != [n for n, _ in b]:
        return None
    rel = [(db - da) / da for (_, da), (_, db) in zip(a, b) if da >= MIN_US]
    return {"kernels": len(rel), "median": statistics.median(rel), "mean": statistics.fmean(rel),
            "within_3pct": sum(abs(r) <= 0.03 for r in rel), "max": max(rel), "min": min(rel)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    args = ap.parse_args()
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=2,
                                   num_attention_heads=16, num_key_value_heads=8, vocab_size=32000)
    model = transformers.LlamaForCausalLM(cfg).cuda().eval()
    ids = [torch.randint(0, 32000, (1, n), device="cuda") for n in (2048, 3072)]
    kernels(model, ids, False)  # warm-up: cuBLAS, cuDNN, the autocast cache
    runs = {"plain": [], "synchronized": []}
    for _ in range(3):
        for mode in runs:
            runs[mode].append(kernels(model, ids, mode == "synchronized"))
    result = {"min_kernel_us": MIN_US,
              "plain vs plain": [compare(runs["plain"][0], p) for p in runs["plain"][1:]],
              "synchronized vs plain": [compare(p, s) for p, s in zip(runs["plain"], runs["synchronized"])]}
    per_kernel = []
    for i, (name, d) in enumerate(runs["plain"][0]):
        if d >= MIN_US and all(len(s) == len(runs["plain"][0]) for s in runs["synchronized"]):
            plain = statistics.median(p[i][1] for p in runs["plain"])
            sync = statistics.median(s[i][1] for s in runs["synchronized"])
            per_kernel.append({"index": i, "kernel": name, "plain_us": plain, "synchronized_us": sync,
                               "relative": (sync - plain) / plain})
    result["per_kernel_median_of_3"] = per_kernel
    print(json.dumps({k: v for k, v in result.items() if k != "per_kernel_median_of_3"}, indent=1))
    for r in per_kernel:
        print(f"{r['index']:4d} {r['plain_us']:9.2f} {r['synchronized_us']:9.2f} {100 * r['relative']:+6.2f}%  {r['kernel']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
