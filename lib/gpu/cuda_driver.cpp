#include "gpu/cuda_driver.h"

#include <dlfcn.h>
#include <link.h>

#include <chrono>
#include <thread>

#include <cstdio>
#include <cstring>
#include <type_traits>

namespace lingprobe::gpu {
namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUstream = void*;
using CUevent = void*;
using CUdeviceptr = unsigned long long;

constexpr int kCaptureStatusNone = 0;
constexpr int kNotReady = 600;  // CUDA_ERROR_NOT_READY
constexpr int kCaptureModeRelaxed = 2;
constexpr unsigned kEventDisableTiming = 0x2;
constexpr unsigned kStreamNonBlocking = 0x1;
constexpr unsigned kMemHostAllocPortable = 0x1;  // any context may copy into it

}  // namespace

struct CudaDriver::Api {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext*);
  CUresult (*cuStreamIsCapturing)(CUstream, int*);
  CUresult (*cuThreadExchangeStreamCaptureMode)(int*);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventQuery)(CUevent);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuMemHostAlloc)(void**, size_t, unsigned);
  CUresult (*cuMemFreeHost)(void*);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetUuid)(unsigned char*, CUdevice);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
};

namespace {
std::atomic<CudaDriver*> g_loaded{nullptr};
std::atomic<void (*)()> g_first_load_hook{nullptr};
}  // namespace

CudaDriver* CudaDriver::loaded() { return g_loaded.load(); }

void CudaDriver::on_first_load(void (*hook)()) { g_first_load_hook.store(hook); }

CudaDriver* CudaDriver::get(std::string* error) {
  if (CudaDriver* d = g_loaded.load()) return d;
  static std::mutex mu;
  static CudaDriver* driver = nullptr;
  static std::string load_error;
  std::lock_guard<std::mutex> lock(mu);
  if (!driver && load_error.empty()) {
    auto* d = new CudaDriver;
    if (d->load(load_error)) {
      driver = d;
      g_loaded.store(d);
      if (void (*hook)() = g_first_load_hook.load()) hook();
    } else {
      delete d;
    }
  }
  if (!driver && error) *error = load_error;
  return driver;
}

bool CudaDriver::load(std::string& error) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    error = std::string("libcuda.so.1 not loadable: ") + dlerror();
    return false;
  }
  auto* api = new Api;
  bool ok = true;
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn) {
      ok = false;
      error = std::string("libcuda.so.1 lacks ") + name;
    }
  };
  sym(api->cuInit, "cuInit");
  sym(api->cuDeviceGet, "cuDeviceGet");
  sym(api->cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  sym(api->cuCtxPushCurrent, "cuCtxPushCurrent_v2");
  sym(api->cuCtxPopCurrent, "cuCtxPopCurrent_v2");
  sym(api->cuStreamIsCapturing, "cuStreamIsCapturing");
  sym(api->cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode");
  sym(api->cuEventCreate, "cuEventCreate");
  sym(api->cuEventRecord, "cuEventRecord");
  sym(api->cuEventQuery, "cuEventQuery");
  sym(api->cuEventDestroy, "cuEventDestroy_v2");
  api->cuEventElapsedTime =
      reinterpret_cast<CUresult (*)(float*, CUevent, CUevent)>(dlsym(lib, "cuEventElapsedTime_v2"));
  if (!api->cuEventElapsedTime) sym(api->cuEventElapsedTime, "cuEventElapsedTime");
  sym(api->cuStreamCreate, "cuStreamCreate");
  sym(api->cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  sym(api->cuStreamSynchronize, "cuStreamSynchronize");
  sym(api->cuMemHostAlloc, "cuMemHostAlloc");
  sym(api->cuMemFreeHost, "cuMemFreeHost");
  sym(api->cuGetErrorString, "cuGetErrorString");
  sym(api->cuDeviceGetName, "cuDeviceGetName");
  sym(api->cuDriverGetVersion, "cuDriverGetVersion");
  sym(api->cuCtxSynchronize, "cuCtxSynchronize");
  sym(api->cuDeviceGetAttribute, "cuDeviceGetAttribute");
  // Optional: identity only.
  api->cuDeviceGetUuid = reinterpret_cast<CUresult (*)(unsigned char*, CUdevice)>(dlsym(lib, "cuDeviceGetUuid_v2"));
  if (!api->cuDeviceGetUuid)
    api->cuDeviceGetUuid = reinterpret_cast<CUresult (*)(unsigned char*, CUdevice)>(dlsym(lib, "cuDeviceGetUuid"));
  if (ok) {
    const CUresult r = api->cuInit(0);
    if (r != 0) {
      ok = false;
      error = "cuInit failed (" + std::to_string(r) + ")";
    }
  }
  if (!ok) {
    delete api;
    return false;
  }
  api_ = api;
  return true;
}

std::string CudaDriver::describe(int code) const {
  const char* s = nullptr;
  if (api_->cuGetErrorString(code, &s) == 0 && s) return s;
  return "CUDA error " + std::to_string(code);
}

void* CudaDriver::context(int device) {
  if (device < 0 || device >= 64) return nullptr;
  std::lock_guard<std::mutex> lock(context_mu_);
  if (!contexts_[device]) {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    if (api_->cuDeviceGet(&dev, device) == 0 && api_->cuDevicePrimaryCtxRetain(&ctx, dev) == 0) contexts_[device] = ctx;
  }
  return contexts_[device];
}

CudaDriver::Capture CudaDriver::stream_capture(void* stream) {
  int status = 0;
  if (api_->cuStreamIsCapturing(stream, &status) != 0) return Capture::Unknown;
  return status == kCaptureStatusNone ? Capture::None : Capture::Active;
}

int CudaDriver::relax_capture_mode() {
  int mode = kCaptureModeRelaxed;
  return api_->cuThreadExchangeStreamCaptureMode(&mode) == 0 ? mode : -1;
}

void CudaDriver::restore_capture_mode(int previous) {
  if (previous >= 0) api_->cuThreadExchangeStreamCaptureMode(&previous);
}

void* CudaDriver::record_event(int device, void* stream, std::string& error, bool timing) {
  CUcontext ctx = context(device);
  if (!ctx || api_->cuCtxPushCurrent(ctx) != 0) {
    error = "no context for device " + std::to_string(device);
    return nullptr;
  }
  CUevent ev = nullptr;
  CUresult r = api_->cuEventCreate(&ev, timing ? 0u : kEventDisableTiming);
  if (r == 0) r = api_->cuEventRecord(ev, stream);
  if (r != 0) {
    error = "event on the op's stream: " + describe(r);
    if (ev) api_->cuEventDestroy(ev);
    ev = nullptr;
  }
  CUcontext popped = nullptr;
  api_->cuCtxPopCurrent(&popped);
  return ev;
}

void* CudaDriver::allocate_pinned(int device, size_t nbytes, std::string& error) {
  CUcontext ctx = context(device);
  if (!ctx || api_->cuCtxPushCurrent(ctx) != 0) {
    error = "no context for device " + std::to_string(device);
    return nullptr;
  }
  void* host = nullptr;
  const int previous = relax_capture_mode();  // legal while another thread captures a graph in global mode
  const CUresult r = api_->cuMemHostAlloc(&host, nbytes, kMemHostAllocPortable);
  restore_capture_mode(previous);
  if (r != 0) {
    error = "pinned host memory of " + std::to_string(nbytes) + " bytes: " + describe(r);
    host = nullptr;
  }
  CUcontext popped = nullptr;
  api_->cuCtxPopCurrent(&popped);
  return host;
}

void CudaDriver::free_pinned(int device, void* host) {
  CUcontext ctx = context(device);
  if (!host || !ctx || api_->cuCtxPushCurrent(ctx) != 0) return;
  const int previous = relax_capture_mode();
  api_->cuMemFreeHost(host);
  restore_capture_mode(previous);
  CUcontext popped = nullptr;
  api_->cuCtxPopCurrent(&popped);
}

void* CudaDriver::copy_to_pinned(int device, void* stream, void* host, const void* device_ptr, size_t nbytes,
                                 bool& queued, std::string& error) {
  queued = false;
  CUcontext ctx = context(device);
  if (!ctx || api_->cuCtxPushCurrent(ctx) != 0) {
    error = "no context for device " + std::to_string(device);
    return nullptr;
  }
  const CUresult r = api_->cuMemcpyDtoHAsync(host, reinterpret_cast<CUdeviceptr>(device_ptr), nbytes, stream);
  CUcontext popped = nullptr;
  api_->cuCtxPopCurrent(&popped);
  if (r != 0) {
    error = "device-to-host copy on the op's stream: " + describe(r);
    return nullptr;
  }
  queued = true;
  return record_event(device, stream, error);
}

void CudaDriver::destroy_event(int device, void* event) {
  CUcontext ctx = context(device);
  if (!event || !ctx || api_->cuCtxPushCurrent(ctx) != 0) return;
  api_->cuEventDestroy(event);
  CUcontext popped = nullptr;
  api_->cuCtxPopCurrent(&popped);
}

CudaDriver::EventState CudaDriver::query_event(int device, void* event) {
  CUcontext ctx = context(device);
  if (!event || !ctx || api_->cuCtxPushCurrent(ctx) != 0) return EventState::Failed;
  const CUresult r = api_->cuEventQuery(event);
  CUcontext popped = nullptr;
  api_->cuCtxPopCurrent(&popped);
  return r == 0 ? EventState::Done : r == kNotReady ? EventState::Pending : EventState::Failed;
}

bool CudaDriver::elapsed_ms(int device, void* start, void* end, float& ms) {
  CUcontext ctx = context(device);
  if (!start || !end || !ctx || api_->cuCtxPushCurrent(ctx) != 0) return false;
  const bool ok = api_->cuEventElapsedTime(&ms, start, end) == 0;
  CUcontext popped = nullptr;
  api_->cuCtxPopCurrent(&popped);
  return ok;
}

void* CudaDriver::own_stream(int device) {
  if (!streams_[device]) {
    CUstream s = nullptr;
    if (api_->cuStreamCreate(&s, kStreamNonBlocking) == 0) streams_[device] = s;
  }
  return streams_[device];
}

// Polls `event` until it completes (capture-safe when this thread's capture mode is relaxed), with a deadline
// once the process is exiting. "" or why it stopped.
std::string CudaDriver::poll_event(void* event) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    const CUresult r = api_->cuEventQuery(event);
    if (r == 0) return "";
    if (r != kNotReady) return "waiting for the op's stream: " + describe(r);
    if (finishing_.load() && std::chrono::steady_clock::now() > deadline)
      return "the op's stream did not finish within 5 s of exit";
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

bool CudaDriver::wait_event(int device, void* event) {
  CUcontext ctx = context(device);
  if (!ctx || !event || api_->cuCtxPushCurrent(ctx) != 0) return false;
  const int previous = relax_capture_mode();
  const bool done = poll_event(event).empty();
  restore_capture_mode(previous);
  CUcontext popped = nullptr;
  api_->cuCtxPopCurrent(&popped);
  return done;
}

std::string CudaDriver::copy_to_host(int device, void* event, const void* device_ptr, size_t nbytes,
                                     const std::function<bool(const void*, size_t)>& out) {
  CUcontext ctx = context(device);
  if (!ctx) return "no context for device " + std::to_string(device);
  std::lock_guard<std::mutex> lock(copy_mu_);  // one staging buffer; never a lock the calling thread takes
  if (api_->cuCtxPushCurrent(ctx) != 0) return "cannot make device " + std::to_string(device) + "'s context current";
  std::string err;
  const int previous = relax_capture_mode();
  err = poll_event(event);  // the op's stream must have made the copy
  CUstream s = err.empty() ? own_stream(device) : nullptr;
  if (err.empty() && !staging_ && api_->cuMemHostAlloc(&staging_, kStagingBytes, 0) != 0) staging_ = nullptr;
  if (!err.empty()) {
  } else if (!s) {
    err = "cannot create a stream";
  } else if (!staging_) {
    err = "cannot allocate pinned staging";
  }
  for (size_t off = 0; err.empty() && off < nbytes; off += kStagingBytes) {
    const size_t n = nbytes - off < kStagingBytes ? nbytes - off : kStagingBytes;
    CUresult r = api_->cuMemcpyDtoHAsync(staging_, reinterpret_cast<CUdeviceptr>(device_ptr) + off, n, s);
    if (r == 0) r = api_->cuStreamSynchronize(s);
    if (r != 0)
      err = "device-to-host copy: " + describe(r);
    else if (!out(staging_, n))
      err = "write failed";
  }
  restore_capture_mode(previous);
  CUcontext popped = nullptr;
  api_->cuCtxPopCurrent(&popped);
  return err;
}

}  // namespace lingprobe::gpu

namespace lingprobe::gpu {

std::string CudaDriver::device_name(int device) {
  CUdevice dev = 0;
  char name[256] = {0};
  if (api_->cuDeviceGet(&dev, device) != 0 || api_->cuDeviceGetName(name, sizeof name - 1, dev) != 0) return "";
  return name;
}

std::string CudaDriver::device_uuid(int device) {
  CUdevice dev = 0;
  unsigned char u[16];
  if (!api_->cuDeviceGetUuid || api_->cuDeviceGet(&dev, device) != 0 || api_->cuDeviceGetUuid(u, dev) != 0) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
                u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
  return buf;
}

int CudaDriver::driver_version() {
  int v = 0;
  return api_->cuDriverGetVersion(&v) == 0 ? v : 0;
}

int CudaDriver::runtime_version() {
  // The loaded libcudart, by its path among the process's objects (torch loads it RTLD_LOCAL).
  std::string path;
  dl_iterate_phdr(
      [](struct dl_phdr_info* info, size_t, void* out) {
        const char* name = info->dlpi_name;
        if (name && std::strstr(name, "/libcudart.so")) {
          *static_cast<std::string*>(out) = name;
          return 1;
        }
        return 0;
      },
      &path);
  if (path.empty()) return -1;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (!lib) return -1;
  auto fn = reinterpret_cast<int (*)(int*)>(dlsym(lib, "cudaRuntimeGetVersion"));
  int v = -1;
  if (!fn || fn(&v) != 0) v = -1;
  dlclose(lib);  // drops only the reference NOLOAD took
  return v;
}

}  // namespace lingprobe::gpu

namespace lingprobe::gpu {

bool CudaDriver::synchronize(void* ctx) {
  if (!ctx || api_->cuCtxPushCurrent(ctx) != 0) return false;
  const bool ok = api_->cuCtxSynchronize() == 0;
  void* popped = nullptr;
  api_->cuCtxPopCurrent(&popped);
  return ok;
}

std::string CudaDriver::compute_capability(int device) {
  constexpr int kMajor = 75, kMinor = 76;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR / _MINOR
  CUdevice dev = 0;
  int major = 0, minor = 0;
  if (api_->cuDeviceGet(&dev, device) != 0 || api_->cuDeviceGetAttribute(&major, kMajor, dev) != 0 ||
      api_->cuDeviceGetAttribute(&minor, kMinor, dev) != 0)
    return "";
  return std::to_string(major) + "." + std::to_string(minor);
}

int CudaDriver::clock_rate_khz(int device) {
  constexpr int kClockRate = 13;  // CU_DEVICE_ATTRIBUTE_CLOCK_RATE
  CUdevice dev = 0;
  int khz = 0;
  return api_->cuDeviceGet(&dev, device) == 0 && api_->cuDeviceGetAttribute(&khz, kClockRate, dev) == 0 ? khz : 0;
}

}  // namespace lingprobe::gpu
