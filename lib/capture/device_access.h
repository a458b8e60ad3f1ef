// What the snapshot capture needs from a GPU, without CUDA headers here: the
// capture status of a stream, the stream-capture mode relaxed around
// lingprobe's own calls, and device-to-host transfers that run on a writer
// thread (ordered after an event recorded on the op's stream) through pinned
// staging, or, for a call too large for the device budget, into pinned host
// memory on the op's stream. api implements it over the CUDA driver
// (lib/gpu); a CPU-only process has none.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "format/profile_files.h"

namespace lingprobe::capture {

// An open counter or timing window (inline CUPTI) around one op call.
class CounterWindow {
 public:
  virtual ~CounterWindow() = default;
  // At the op's end, on its thread, before close(): what must end with the
  // op ends, nothing waits (a timing window stops naming launches); close()
  // may then run on another thread. A counter window does all in close().
  virtual void stop() {}
  // After the op: stop, wait for the device, evaluate. Always returns data
  // (its status says passed, failed, abandoned, contaminated, counters_unavailable).
  virtual format::ProfileData close() = 0;
};

// The stage clock (GPU time per stage, lib/gpu/stage_clock): the recorder
// tells it, before the op runs, of a thread's first op with a CUDA tensor
// after each change of the thread's stage.
class StageTiming {
 public:
  virtual ~StageTiming() = default;
  virtual void begin(uint16_t stage, int device, void* stream) = 0;
};

class DeviceTransfer {
 public:
  virtual ~DeviceTransfer() = default;
  // Copies the bytes to the host in chunks, in order; "" or the error.
  virtual std::string stream(const std::function<bool(const void*, size_t)>& out) = 0;
};

// Pinned host memory that the device copies of a call too large for the
// device budget go to, on the op's stream (docs/SNAPSHOTS.md, "Large
// tensors"). Used by the one sampled call that took it, on its thread.
class HostBuffer {
 public:
  virtual ~HostBuffer() = default;
  virtual uint64_t size() const = 0;  // the buffer's bytes: a call's device copies must fit them together
  // Queues a copy of `nbytes` at `device_ptr` into the buffer on `stream` (the
  // op's: the calling thread does not wait) and returns its transfer, which
  // hands the bytes on once the stream has made the copy. nullptr and `error`:
  // no room, or a CUDA error.
  virtual std::unique_ptr<DeviceTransfer> copy(int device, void* stream, const void* device_ptr, size_t nbytes,
                                               std::string& error) = 0;
};

class DeviceAccess {
 public:
  virtual ~DeviceAccess() = default;
  enum class Capture { None, Active, Unknown };
  // Whether work queued on `stream` (a cudaStream_t) is being captured into a graph.
  virtual Capture stream_capture(void* stream) = 0;
  // Relaxes this thread's stream-capture mode until the returned guard dies,
  // so that lingprobe's own CUDA calls stay legal while another thread captures.
  virtual std::shared_ptr<void> relax_capture_mode() = 0;
  // Records an event on `stream` now (after the copies queued there) and
  // returns a transfer of `nbytes` at `device_ptr` that waits for it.
  virtual std::unique_ptr<DeviceTransfer> transfer(int device, void* stream, const void* device_ptr, size_t nbytes,
                                                   std::string& error) = 0;
  // Asks for pinned host memory of `nbytes` for a later call of a key whose
  // copies (from `device`) could never fit the device budget; allocated off
  // the calling thread. Any thread, never waits. None without a GPU.
  virtual void want_host_buffer(int /*device*/, uint64_t /*nbytes*/) {}
  // A ready pinned buffer of at least `nbytes`, or nullptr (none asked for, or
  // not allocated yet). Any thread, never waits.
  virtual std::shared_ptr<HostBuffer> take_host_buffer(uint64_t /*nbytes*/) { return nullptr; }
  // Opens a counter window on `device`'s primary context for kernels queued
  // on `stream`, just before the op; nullptr and `reason` when none opens
  // (counters unavailable, held by another tool, another window open...).
  virtual std::unique_ptr<CounterWindow> open_counters(int device, void* stream, std::string& reason) = 0;
  // Opens a timing window on `device` for the kernels the calling thread
  // launches until stop() (CUPTI Activity alone: they run as without
  // lingprobe), on `stream` (the op's current stream) and others; its
  // profile has the one metric gpu__time_duration.sum. nullptr and `reason`
  // as for counters.
  virtual std::unique_ptr<CounterWindow> open_timing(int device, void* stream, std::string& reason) = 0;
  // A counter window's call on `device` has ended: lingprobe's own work at
  // its end done, the program about to go on. Any thread.
  virtual void counter_call_ended(int device) = 0;
  // Did a counter window's call on `device` end so recently that a call timed
  // now would start on the GPU it left (idle, its L2 as the replay left it)?
  virtual bool settling_after_window(int device) const = 0;
};

}  // namespace lingprobe::capture
