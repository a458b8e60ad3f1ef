#include "gpu/l2_flush.h"

#include <dlfcn.h>

#include <type_traits>

namespace lingprobe::gpu {
namespace {

using CUresult = int;
using CUdeviceptr = unsigned long long;

constexpr int kAttrMultiprocessors = 16;  // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
constexpr int kAttrL2Bytes = 38;          // CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE

// Reads n 16-byte vectors with ld.global.cg (cached in L2 only) in a
// grid-stride loop and folds them into a register that is stored only if it
// equals a value a zeroed buffer never gives: the loads cannot be dropped and
// nothing is written.
constexpr const char* kPtx = R"(
.version 6.0
.target sm_60
.address_size 64
.visible .entry lingprobe_l2_flush(.param .u64 p_buf, .param .u64 p_n, .param .u64 p_sink)
{
  .reg .pred %p<3>;
  .reg .b32 %r<12>;
  .reg .b64 %rd<12>;
  ld.param.u64 %rd1, [p_buf];
  ld.param.u64 %rd2, [p_n];
  ld.param.u64 %rd3, [p_sink];
  mov.u32 %r1, %ctaid.x;
  mov.u32 %r2, %ntid.x;
  mov.u32 %r3, %tid.x;
  mov.u32 %r4, %nctaid.x;
  mul.wide.u32 %rd4, %r1, %r2;
  cvt.u64.u32 %rd5, %r3;
  add.u64 %rd4, %rd4, %rd5;
  mul.wide.u32 %rd6, %r4, %r2;
  mov.u32 %r5, 0;
LOOP:
  setp.ge.u64 %p1, %rd4, %rd2;
  @%p1 bra DONE;
  shl.b64 %rd7, %rd4, 4;
  add.u64 %rd8, %rd1, %rd7;
  ld.global.cg.v4.u32 {%r6, %r7, %r8, %r9}, [%rd8];
  xor.b32 %r5, %r5, %r6;
  xor.b32 %r5, %r5, %r7;
  xor.b32 %r5, %r5, %r8;
  xor.b32 %r5, %r5, %r9;
  add.u64 %rd4, %rd4, %rd6;
  bra LOOP;
DONE:
  setp.ne.u32 %p2, %r5, 2654435769;
  @%p2 bra END;
  st.global.u32 [%rd3], %r5;
END:
  ret;
}
)";

}  // namespace

struct L2Flush::Api {
  CUresult (*cuCtxPushCurrent)(void*);
  CUresult (*cuCtxPopCurrent)(void**);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuDeviceGet)(int*, int);
  CUresult (*cuDeviceGetAttribute)(int*, int, int);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuModuleLoadData)(void**, const void*);
  CUresult (*cuModuleGetFunction)(void**, void*, const char*);
  CUresult (*cuLaunchKernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                             void**, void**);
};

std::string L2Flush::load() {
  if (api_ || !load_error_.empty()) return load_error_;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) return load_error_ = std::string("libcuda.so.1 not loadable: ") + dlerror();
  auto* api = new Api;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn && load_error_.empty()) load_error_ = std::string("libcuda.so.1 lacks ") + name;
  };
  sym(api->cuCtxPushCurrent, "cuCtxPushCurrent_v2");
  sym(api->cuCtxPopCurrent, "cuCtxPopCurrent_v2");
  sym(api->cuCtxSynchronize, "cuCtxSynchronize");
  sym(api->cuDeviceGet, "cuDeviceGet");
  sym(api->cuDeviceGetAttribute, "cuDeviceGetAttribute");
  sym(api->cuMemAlloc, "cuMemAlloc_v2");
  sym(api->cuMemsetD8, "cuMemsetD8_v2");
  sym(api->cuModuleLoadData, "cuModuleLoadData");
  sym(api->cuModuleGetFunction, "cuModuleGetFunction");
  sym(api->cuLaunchKernel, "cuLaunchKernel");
  if (!load_error_.empty()) {
    delete api;
    return load_error_;
  }
  api_ = api;
  return "";
}

std::string L2Flush::flush(int device, void* ctx, void* stream) {
  if (device < 0 || device >= 64 || !ctx) return "no context for device " + std::to_string(device);
  if (std::string err = load(); !err.empty()) return err;
  if (api_->cuCtxPushCurrent(ctx) != 0) return "cannot make device " + std::to_string(device) + "'s context current";
  std::string err;
  auto step = [&](CUresult r, const char* what) {
    if (r != 0 && err.empty()) err = std::string(what) + " failed (CUDA error " + std::to_string(r) + ")";
    return err.empty();
  };
  int dev = 0, sms = 0, l2 = 0;
  if (!function_[device] && step(api_->cuDeviceGet(&dev, device), "cuDeviceGet") &&
      step(api_->cuDeviceGetAttribute(&l2, kAttrL2Bytes, dev), "L2 size") &&
      step(l2 > 0 ? 0 : -1, "L2 size (none reported)")) {
    const size_t bytes = static_cast<size_t>(l2) * 4;
    void* module = nullptr;
    void* fn = nullptr;
    CUdeviceptr buf = 0;
    if (step(api_->cuModuleLoadData(&module, kPtx), "loading the flush kernel (PTX JIT)") &&
        step(api_->cuModuleGetFunction(&fn, module, kKernelName), "cuModuleGetFunction") &&
        step(api_->cuMemAlloc(&buf, bytes + 16), "allocating the flush buffer") &&
        step(api_->cuMemsetD8(buf, 0, bytes + 16), "zeroing the flush buffer")) {
      function_[device] = fn;
      buffer_[device] = buf;
      bytes_[device] = bytes;
    }
  }
  if (err.empty() && step(api_->cuDeviceGet(&dev, device), "cuDeviceGet") &&
      step(api_->cuDeviceGetAttribute(&sms, kAttrMultiprocessors, dev), "SM count") &&
      step(api_->cuCtxSynchronize(), "synchronising before the flush")) {
    CUdeviceptr buf = buffer_[device];
    unsigned long long n = bytes_[device] / 16;
    CUdeviceptr sink = buf + bytes_[device];
    void* args[] = {&buf, &n, &sink};
    const unsigned blocks = static_cast<unsigned>(sms > 0 ? sms * 4 : 512);
    if (step(api_->cuLaunchKernel(function_[device], blocks, 1, 1, 512, 1, 1, 0, stream, args, nullptr),
             "launching the flush kernel"))
      step(api_->cuCtxSynchronize(), "synchronising after the flush");
  }
  void* popped = nullptr;
  api_->cuCtxPopCurrent(&popped);
  return err;
}

}  // namespace lingprobe::gpu
