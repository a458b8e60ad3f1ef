# Which way of "flushing" L2 before a kernel makes its DRAM writes those of ncu --cache-control all?
import torch, torch.nn.functional as F, sys
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
