// The CUDA driver API (libcuda.so.1), loaded at run time on first use, for
// what lingprobe does on a GPU outside torch: ask whether a stream is being
// captured (legal during capture), relax this thread's capture mode around
// its own calls, and copy device memory to the host on a stream of its own,
// ordered after an event on the op's stream, through pinned staging that is
// allocated once. No CUDA headers and no link-time dependency: a machine
// without a driver simply has no GPU access (every call says so).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace lingprobe::gpu {

class CudaDriver {
 public:
  // The process's driver, loaded on first call; nullptr (with `error`) when
  // libcuda.so.1 cannot be loaded or initialised.
  static CudaDriver* get(std::string* error = nullptr);

  enum class Capture { None, Active, Unknown };
  Capture stream_capture(void* stream);
  // Sets this thread's capture mode to relaxed; returns the previous mode (-1 on failure).
  int relax_capture_mode();
  void restore_capture_mode(int previous);

  // An event recorded on `stream` (of device `device`) now; nullptr on failure.
  void* record_event(int device, void* stream, std::string& error);
  void destroy_event(int device, void* event);
  // Waits for `event` on lingprobe's own stream of `device`, then copies
  // `nbytes` from `device_ptr` to the host in chunks of the pinned staging
  // buffer, handing each chunk to `out`. The calling thread waits; the job's
  // streams do not. "" or the error.
  std::string copy_to_host(int device, void* event, const void* device_ptr, size_t nbytes,
                           const std::function<bool(const void*, size_t)>& out);

  // Identity of a device (CUDA ordinal as this process sees it): its name,
  // "GPU-xxxxxxxx-..." UUID as nvidia-smi prints it; the driver's version (13000).
  std::string device_name(int device);
  std::string device_uuid(int device);
  int driver_version();

  static constexpr size_t kStagingBytes = 64u << 20;

 private:
  CudaDriver() = default;
  bool load(std::string& error);
  void* context(int device);   // the device's primary context (retained once)
  void* own_stream(int device);
  std::string describe(int code) const;

  struct Api;
  Api* api_ = nullptr;
  std::mutex mu_;  // contexts, streams, staging
  void* contexts_[64] = {};
  void* streams_[64] = {};
  void* staging_ = nullptr;
};

}  // namespace lingprobe::gpu
