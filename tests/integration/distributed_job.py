"""A real multi-rank job for the integration test (gloo, CPU). Each rank makes
a known number of calls per stage, marks stages through the Python shim,
starts a child process that does not use torch, and writes what it did to
expected_rank{R}.json for the test to compare against lingprobe's files."""
import json
import os
import subprocess
import sys
import threading

import torch
import torch.distributed as dist

import lingprobe

out = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
x = torch.randn(8, 16)
w = torch.randn(32, 16)
b = torch.randn(32)
expected = {}

with lingprobe.stage("dit"):
    for _ in range(10 + rank):  # a different count per rank
        torch.nn.functional.linear(x, w, b)
expected["dit/aten.linear.default"] = 10 + rank

with lingprobe.stage("vae"):
    v = torch.randn(1, 2, 3, 8, 8)
    k = torch.randn(4, 2, 3, 3, 3)
    for _ in range(3):
        torch.nn.functional.conv3d(v, k)
expected["vae/aten.conv3d.default"] = 3


def worker(n, name):
    with lingprobe.stage(name):
        for _ in range(n):
            torch.nn.functional.linear(x, w)


threads = [threading.Thread(target=worker, args=(50 + i, f"thread{i}")) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for i in range(8):
    expected[f"thread{i}/aten.linear.default"] = 50 + i

if rank == 0:
    with lingprobe.stage("output"):
        for _ in range(2):
            x.to(torch.uint8)
    expected["output/aten.to.dtype"] = 2

subprocess.run(["sh", "-c", "true"], check=True)  # a child without torch
dist.barrier()
with open(os.path.join(out, f"expected_rank{rank}.json"), "w") as f:
    json.dump(expected, f)
dist.destroy_process_group()
