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
#include <atomic>
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
  // The driver if something loaded it already, else nullptr (never loads).
  static CudaDriver* loaded();
  // `hook` runs once, on the thread of the first get() that loads the driver, right after cuInit. The driver
  // tears itself down at exit in a handler it registers with atexit when it initialises (seen on the H200:
  // CUDA_ERROR_DEINITIALIZED on every call after it); atexit handlers run in reverse order of registration, so a
  // handler registered from `hook` runs while the driver still answers. Set it before the first get().
  static void on_first_load(void (*hook)());

  enum class Capture { None, Active, Unknown };
  Capture stream_capture(void* stream);
  // Sets this thread's capture mode to relaxed; returns the previous mode (-1 on failure).
  int relax_capture_mode();
  void restore_capture_mode(int previous);

  // An event recorded on `stream` (of device `device`) now; nullptr on failure.
  // `timing`: one cuEventElapsedTime can measure (else the cheaper kind without timing).
  void* record_event(int device, void* stream, std::string& error, bool timing = false);
  void destroy_event(int device, void* event);
  enum class EventState { Done, Pending, Failed };
  EventState query_event(int device, void* event);
  // Waits for `event` by polling it in relaxed capture mode (legal while another thread captures a graph, where a
  // context synchronisation would invalidate the capture); once the process is finishing, for at most 5 s. False on
  // error or that deadline.
  bool wait_event(int device, void* event);
  // Milliseconds between two completed timing events of `device`; false on error.
  bool elapsed_ms(int device, void* start, void* end, float& ms);
  // Pinned host memory (portable: a copy in any context may land in it) for copies of calls too large for the
  // device budget (gpu/pinned_reserve); nullptr and `error` on failure. Allocating and freeing it take long and
  // hold the driver's lock: the evidence writer's thread does it, never a calling thread, in relaxed capture mode.
  void* allocate_pinned(int device, size_t nbytes, std::string& error);
  void free_pinned(int device, void* host);
  // Queues a copy of `nbytes` at `device_ptr` into pinned `host` memory on `stream` (the op's own: the calling
  // thread does not wait, the stream runs it in its order) and records an event after it: the event, or nullptr
  // and `error`; `queued` says whether the copy was queued (then it may be in flight without an event).
  void* copy_to_pinned(int device, void* stream, void* host, const void* device_ptr, size_t nbytes, bool& queued,
                       std::string& error);
  // Waits for `event` on lingprobe's own stream of `device`, then copies
  // `nbytes` from `device_ptr` to the host in chunks of the pinned staging
  // buffer, handing each chunk to `out`. The calling thread waits; the job's
  // streams do not. "" or the error.
  std::string copy_to_host(int device, void* event, const void* device_ptr, size_t nbytes,
                           const std::function<bool(const void*, size_t)>& out);

  // The device's primary context (retained once for the process); nullptr if none.
  void* primary_context(int device) { return context(device); }
  // Waits until `ctx` has finished all its work; false on error.
  bool synchronize(void* ctx);
  // "9.0"; the SM clock rate in kHz as the driver reports it.
  std::string compute_capability(int device);
  int clock_rate_khz(int device);

  // Identity of a device (CUDA ordinal as this process sees it): its name,
  // "GPU-xxxxxxxx-..." UUID as nvidia-smi prints it; the driver's version (13000).
  std::string device_name(int device);
  std::string device_uuid(int device);
  int driver_version();
  // The CUDA runtime the process loaded (torch's libcudart), cudaRuntimeGetVersion (13000); -1 if none is loaded.
  static int runtime_version();

  static constexpr size_t kStagingBytes = 64u << 20;
  // At exit: copies still waiting for their op's stream give up after a few
  // seconds (a peer's NCCL op that never completes must not hang the exit).
  void set_finishing() { finishing_.store(true); }

 private:
  CudaDriver() = default;
  bool load(std::string& error);
  void* context(int device);  // the device's primary context (retained once)
  std::string poll_event(void* event);
  void* own_stream(int device);
  std::string describe(int code) const;

  struct Api;
  Api* api_ = nullptr;
  std::mutex context_mu_;  // contexts_: held only to look one up (the calling thread needs it)
  std::mutex copy_mu_;     // streams_, staging_: held through a whole copy (writer threads only)
  void* contexts_[64] = {};
  void* streams_[64] = {};
  void* staging_ = nullptr;
  std::atomic<bool> finishing_{false};
};

}  // namespace lingprobe::gpu
