"""Which way of evicting L2 before a kernel makes its DRAM writes those of ncu
--cache-control all? (docs/COUNTERS.md, "Can a cold cache close the gap?")
A GEMV ([3,5120] x [5120,5120], 30 KB out) after a 216 MB normal_ has left
dirty lines in L2, once per way of evicting them; run it under ncu:

    ncu --clock-control none --cache-control none --csv --page raw --print-units base -k regex:nvjet \
        --metrics dram__bytes_write.sum,dram__bytes_read.sum,gpu__time_duration.sum python3 bench/l2_flush_probe.py

(docs/gpu/l2-flush-torch-variants-h200.txt: reading 400 MB takes the writes from 15 MB to 0.02 MB, writing
400 MB leaves 18 MB.)"""
import torch, torch.nn.functional as F
dev = torch.device("cuda")
torch.manual_seed(0)
w = torch.randn(5120, 5120, device=dev, dtype=torch.bfloat16)
b = torch.randn(5120, device=dev, dtype=torch.bfloat16)
x = torch.randn(3, 5120, device=dev, dtype=torch.bfloat16)
big = torch.empty(1, 10560, 5120, device=dev)
fl = torch.zeros(100 << 20, device=dev)  # 400 MB
small = torch.zeros(16 << 20, device=dev)  # 64 MB
def dirty():
    big.normal_()
    torch.cuda.synchronize()
variants = {
  "none": lambda: None,
  "read400": lambda: fl.sum(),
  "read400x3": lambda: [fl.sum() for _ in range(3)],
  "write400": lambda: fl.zero_(),
  "write400+read400": lambda: (fl.zero_(), fl.sum()),
  "read64x8": lambda: [small.sum() for _ in range(8)],
  "write64+read64x8": lambda: (small.zero_(), [small.sum() for _ in range(8)]),
}
order = list(variants)
print("ORDER", ",".join(order))
for name in order:
    dirty()
    variants[name]()
    torch.cuda.synchronize()
    F.linear(x, w, b)
    torch.cuda.synchronize()
