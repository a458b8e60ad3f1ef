// A sampled call's tensors copied for its snapshot, and its values turned
// into the snapshot's document (SPEC section 4, format/snapshot_file.h): a
// tensor is copied compactly (its elements), or as the storage span it covers
// when its elements overlap, on the current stream; a device copy is counted
// against the device budget while it lives and reaches the host later,
// through DeviceAccess, on the writer thread (or, for a call too large for
// that budget, goes straight into pinned host memory on the stream).
#pragma once

#include "capture/torch_guard.h"

#include <ATen/ATen.h>
#include <ATen/core/function_schema.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "capture/device_access.h"
#include "format/pickle.h"
#include "format/snapshot_file.h"
#include "format/tensor_layout.h"

namespace lingprobe::capture {

// A tensor copied for a snapshot: its metadata and the copy (compact or span).
// Counts a device copy's bytes while it lives (the device budget).
class DeviceHold {
 public:
  DeviceHold(std::atomic<uint64_t>* counter, uint64_t n) : counter_(counter), n_(n) { counter_->fetch_add(n_); }
  ~DeviceHold() { counter_->fetch_sub(n_); }
  DeviceHold(const DeviceHold&) = delete;
  DeviceHold& operator=(const DeviceHold&) = delete;

 private:
  std::atomic<uint64_t>* counter_;
  uint64_t n_;
};

struct CopiedTensor {
  format::TensorMeta meta;
  at::Tensor copy;
  int64_t stored_numel = 0;
  uint64_t nbytes = 0;
  std::unique_ptr<DeviceTransfer> transfer;  // device tensors: the host copy, later
  std::unique_ptr<DeviceHold> hold;          // device tensors: counted while the copy lives
};

class TensorBlob : public format::BlobSource {
 public:
  explicit TensorBlob(CopiedTensor t) : t_(std::move(t)) {}
  uint64_t nbytes() const override { return t_.nbytes; }
  // Writes the bytes to `out` (a device copy from the host, once it arrived); frees the copy.
  std::string stream(const std::function<bool(const void*, size_t)>& out) override;

 private:
  CopiedTensor t_;
};

// The bytes a snapshot stores for t (its elements, or its span).
uint64_t stored_bytes(const at::Tensor& t);

// Walks the tensors of an IValue (lists, tuples, optionals).
template <typename Fn>
void for_each_tensor(const c10::IValue& v, Fn&& fn) {
  if (v.isTensor())
    fn(v.toTensor());
  else if (v.isList())
    for (const auto& x : v.toListRef()) for_each_tensor(x, fn);
  else if (v.isTuple())
    for (const auto& x : v.toTupleRef().elements()) for_each_tensor(x, fn);
}

// Whether the schema marks the argument as written by the op.
bool is_written(const c10::Argument& a);

// Copies one tensor (compactly, or its span if its elements overlap) on the
// current stream: a device tensor into a device copy counted in
// `device_bytes`, or, with `host`, into that pinned host memory. Throws
// c10::Error (OOM included), std::runtime_error (a transfer).
CopiedTensor copy_tensor(const at::Tensor& t, DeviceAccess* device, std::atomic<uint64_t>* device_bytes,
                         HostBuffer* host = nullptr);

// Why a tensor cannot be snapshotted ("" if it can).
std::string unsupported(const at::Tensor& t);

// Whether a snapshot holds the value as one a replay rebuilds (what ValueWriter writes other than "unsupported"):
// false for a Storage (a DataLoader's batch arriving by `set_` from a worker's shared memory), an object, a
// capsule, a future, anywhere in a list or tuple.
bool replayable_value(const c10::IValue& v);

// IValue -> snapshot value; tensors become blobs. Throws std::runtime_error
// for values a snapshot cannot hold.
struct ValueWriter {
  std::vector<std::unique_ptr<format::BlobSource>>* blobs;
  std::atomic<uint64_t>* device_bytes;
  DeviceAccess* device;
  HostBuffer* host = nullptr;  // a call too large for the device budget: its device copies go here

  format::PickleValue tensor(CopiedTensor c);
  // `copied`: tensors already copied (written arguments), taken in order before copying any other.
  format::PickleValue operator()(const c10::IValue& v, const c10::TypePtr& type, std::vector<CopiedTensor>* copied);
  // An op's outputs against its schema's returns: the one value, or a list of them.
  format::PickleValue outputs(c10::ArrayRef<const c10::IValue> values, const std::vector<c10::Argument>& returns);
};

}  // namespace lingprobe::capture
