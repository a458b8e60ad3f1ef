// Leaves a GPU's L2 cache without dirty lines and without the job's data, on
// request, before a counter window (LINGPROBE_PROFILE_CACHE=flush): the state
// Nsight Compute's default `--cache-control all` gives a kernel. Without it a
// kernel's DRAM writes include the write-backs of lines earlier kernels left
// dirty, and its reads miss less where its input was just written: figures of
// the run's history as much as of the kernel (docs/COUNTERS.md).
//
// How: the context is synchronised (the job's queued kernels finish), then a
// kernel of lingprobe's own (PTX, JIT-compiled by the driver: no nvcc at build
// time) reads a device buffer four times the L2's size once on the op's
// stream, which evicts every line (dirty ones are written back now) and
// leaves clean lines of that buffer; the context is synchronised again. It
// runs inside the window, after CUPTI's Start, which itself leaves ~16 MB of
// written lines in L2 (measured on the H200: bench/counter_passes.py); the
// window's first range is then this kernel, which the profile leaves out.
// Under kernel replay only the first pass starts from the flushed cache: the
// later passes start from CUPTI's restore of device memory, so a cold
// measurement is exact for single-pass metric sets (docs/COUNTERS.md). The
// buffer is allocated with the
// driver on first use per device and kept (4x L2: 200 MB on an H100/H200),
// outside torch's caching allocator. libcuda is the process's (loaded by
// torch); nothing at link time. Not thread-safe: one window at a time.
#pragma once

#include <cstddef>
#include <string>

namespace lingprobe::gpu {

class L2Flush {
 public:
  static constexpr const char* kKernelName = "lingprobe_l2_flush";
  // Flushes the L2 of CUDA device `device` whose primary context is `ctx`,
  // the kernel queued on `stream` (a CUstream). "" or what failed (the
  // window then measures the live cache state).
  std::string flush(int device, void* ctx, void* stream);
  // Bytes read per flush on `device` (0 before its first flush).
  size_t buffer_bytes(int device) const { return device >= 0 && device < 64 ? bytes_[device] : 0; }

 private:
  struct Api;
  std::string load();
  Api* api_ = nullptr;
  std::string load_error_;
  void* function_[64] = {};
  unsigned long long buffer_[64] = {};
  size_t bytes_[64] = {};
};

}  // namespace lingprobe::gpu
