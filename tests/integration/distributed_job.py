"""A real multi-rank job for the integration test (gloo, CPU). Every rank makes
a known number of calls per stage and writes what it did to
expected_rank{R}.json. Stages are marked three ways, as users do:
  rank 2     no marking in the code: the stage map (module classes DitBlock /
             VaeDecoder and the function job_outputs:save_video) does it;
  rank 1     NVTX ranges (real nvtxRangePushA/Ex through the NVTX3 C API);
  ranks 0, 3 the Python shim (lingprobe.stage).
Each rank also runs 8 threads with their own stages, and a child process
that does not use torch."""
import contextlib
import ctypes
import json
import os
import subprocess
import sys
import threading

import torch
import torch.distributed as dist
import torch.nn.functional as F

import lingprobe
from job_outputs import save_video

out = sys.argv[1]
dist.init_process_group("gloo")
rank = dist.get_rank()
mode = {1: "nvtx", 2: "stage_map"}.get(rank, "shim")
nvtx = ctypes.CDLL(os.environ["LPTEST_NVTX_HELPER"]) if mode == "nvtx" else None


@contextlib.contextmanager
def marked(stage, nvtx_name):
    if mode == "shim":
        with lingprobe.stage(stage):
            yield
    elif mode == "nvtx":
        nvtx.helper_range_push(nvtx_name.encode())
        nvtx.helper_range_push_ex(b"an unmapped inner range")  # leaves the stage unchanged
        try:
            yield
        finally:
            nvtx.helper_range_pop()
            nvtx.helper_range_pop()
    else:
        yield


class DitBlock(torch.nn.Module):
    def __init__(self, w, b):
        super().__init__()
        self.w, self.b = w, b

    def forward(self, x):
        return F.linear(x, self.w, self.b)


class VaeDecoder(torch.nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, v):
        return F.conv3d(v, self.k)


torch.manual_seed(rank)
x, w, b = torch.randn(8, 16), torch.randn(32, 16), torch.randn(32)
v, k = torch.randn(1, 2, 3, 8, 8), torch.randn(4, 2, 3, 3, 3)
dit, vae = DitBlock(w, b), VaeDecoder(k)
expected = {}

with marked("dit", "transformer_block"):
    for _ in range(10 + rank):  # a different count per rank
        dit(x) if mode == "stage_map" else F.linear(x, w, b)
expected["dit/aten.linear.default"] = 10 + rank

with marked("vae", "vae_decode"):
    for _ in range(3):
        vae(v) if mode == "stage_map" else F.conv3d(v, k)
expected["vae/aten.conv3d.default"] = 3

with marked("output", "output_write"):
    for _ in range(2):
        save_video(x) if mode == "stage_map" else x.to(torch.uint8)
expected["output/aten.to.dtype"] = 2

F.linear(x, w)  # outside every stage
expected["unstaged/aten.linear.default"] = 1


def worker(n, name):
    with lingprobe.stage(name):
        for _ in range(n):
            F.linear(x, w)


threads = [threading.Thread(target=worker, args=(50 + i, f"thread{i}")) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for i in range(8):
    expected[f"thread{i}/aten.linear.default"] = 50 + i

subprocess.run(["sh", "-c", "true"], check=True)  # a child without torch
dist.barrier()
with open(os.path.join(out, f"expected_rank{rank}.json"), "w") as f:
    json.dump(expected, f)
dist.destroy_process_group()
