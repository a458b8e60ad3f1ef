"""A 2-rank gloo job (CPU) whose ranks make the same calls in the stage
"work", except that rank 1 is slow before each collective (so rank 0 waits
for it inside all_reduce) and makes one extra call (a signature rank 0
lacks). A barrier before the stage absorbs the ranks' start-up skew.
STRAGGLER_SLEEP_S=0: balanced. Run under `lingprobe run`;
test_reading_a_run.py checks the audit's rank view."""
import os
import time

import torch
import torch.distributed as dist

import lingprobe  # the shim `lingprobe run` puts on the path

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
x = torch.randn(128, 128)
dist.barrier()
with lingprobe.stage("work"):
    for _ in range(6):
        y = torch.mm(x, x)
        if rank == 1:
            time.sleep(float(os.environ.get("STRAGGLER_SLEEP_S", "0.08")))  # outside any op: rank 1 is the straggler
        dist.all_reduce(y)
    if rank == 1:
        torch.relu(x)
dist.barrier()
dist.destroy_process_group()
