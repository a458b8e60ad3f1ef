"""Does lingprobe's L2 flush kernel (lib/gpu/l2_flush.cpp's PTX) read what it should?
Launches it through libcuda from a torch process (the primary context torch uses),
times it with CUDA events, then runs the GEMV of bench/counter_passes.py after
dirtying L2, with and without the flush: run under
  ncu --cache-control none -k regex:nvjet --metrics dram__bytes_write.sum python3 bench/l2_flush_ptx_check.py
"""
import ctypes, pathlib, re, torch, torch.nn.functional as F

src = (pathlib.Path(__file__).resolve().parents[1] / "lib/gpu/l2_flush.cpp").read_text()
ptx = re.search(r'R"\((.*?)\)"', src, re.S).group(1).encode() + b"\0"
torch.zeros(1, device="cuda")
cu = ctypes.CDLL("libcuda.so.1")
ctx = ctypes.c_void_p()
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxPushCurrent_v2(ctx) == 0
mod, fn = ctypes.c_void_p(), ctypes.c_void_p()
assert cu.cuModuleLoadData(ctypes.byref(mod), ptx) == 0
assert cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"lingprobe_l2_flush") == 0
l2 = ctypes.c_int()
cu.cuDeviceGetAttribute(ctypes.byref(l2), 38, 0)
nbytes = l2.value * 4
buf = torch.zeros(nbytes // 4 + 4, device="cuda")
p_buf, p_n, p_sink = ctypes.c_uint64(buf.data_ptr()), ctypes.c_uint64(nbytes // 16), ctypes.c_uint64(buf.data_ptr() + nbytes)
args = (ctypes.c_void_p * 3)(*[ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in (p_buf, p_n, p_sink)])

def flush():
    torch.cuda.synchronize()
    r = cu.cuLaunchKernel(fn, 132 * 4, 1, 1, 512, 1, 1, 0, None, args, None)
    assert r == 0, r
    assert cu.cuCtxSynchronize() == 0

w = torch.randn(5120, 5120, device="cuda", dtype=torch.bfloat16)
b = torch.randn(5120, device="cuda", dtype=torch.bfloat16)
x = torch.randn(3, 5120, device="cuda", dtype=torch.bfloat16)
big = torch.empty(1, 10560, 5120, device="cuda")
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record(); flush(); e.record(); torch.cuda.synchronize()
print(f"L2 {l2.value} B, flush reads {nbytes} B, took {s.elapsed_time(e) * 1e3:.1f} us (with two synchronisations)")
for with_flush in (False, True, False, True):
    big.normal_(); torch.cuda.synchronize()
    if with_flush:
        flush()
    F.linear(x, w, b); torch.cuda.synchronize()
print("order: no flush, flush, no flush, flush")
