// The snapshot file (SPEC section 4, docs/SNAPSHOTS.md): a torch.save-format
// ZIP that torch.load(path, weights_only=True) opens on torch 1.13 and 2.x,
// holding one dict of plain types and tensors:
//
//   format "lingprobe.snapshot/1", op ("aten.linear.default"), name
//   ("aten::linear"), overload, schema (text), signature (canonical JSON text),
//   signature_sha256, input_sha256, stage, rank, seq, run_id, pid,
//   torch_version, math_policy {name: text}, written_args [indices],
//   args [value...] (every positional argument, defaults included),
//   kwargs {name: value} (every keyword-only argument), output (value).
//
// A value is None, bool, int, str, a list of values, or a dict with "kind":
//   tensor: dtype, shape, stride, storage_offset (the original view's),
//           device ("cuda:0"), alignment (of its data pointer), layout
//           ("compact": data holds the view's elements in row-major order;
//           "span": data holds the storage elements the view covers, for
//           overlapping views), requires_grad, data (a CPU tensor of the
//           same dtype; raw: true and uint8 bytes for dtypes torch 1.13 has
//           no storage class for), wrapped_number: true only for a Python
//           number the dispatcher wrapped into a 0-dim tensor (`x * 0.5`): it
//           takes part in type promotion as a number, not as a tensor;
//   float (repr: Python's repr, e.g. "1e-06", "-inf"), complex (real, imag),
//   dtype / layout / memory_format (repr: "torch.float32"), device (repr:
//   "cuda:0"), tuple (items), generator, unsupported (repr).
// Non-tensor values are text because torch 1.13's weights_only loader
// rejects Python floats and dtype objects. Pure: no torch.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "format/pickle.h"
#include "format/profile_files.h"
#include "format/status.h"
#include "format/zip_archive.h"

namespace lingprobe::format {

constexpr const char* kSnapshotFormat = "lingprobe.snapshot/1";

// Bytes of one element of a dtype ("torch.bfloat16" -> 2); 0 if unknown.
int64_t dtype_element_size(const std::string& dtype);
// torch's storage class for a dtype ("FloatStorage"), "" where torch 1.13 has none.
std::string dtype_storage_class(const std::string& dtype);

// One tensor's stored bytes, produced by whoever captured it (a CPU copy, a
// device copy streamed through pinned staging, ...).
class BlobSource {
 public:
  virtual ~BlobSource() = default;
  virtual uint64_t nbytes() const = 0;
  // Writes the bytes to `out` in order; "" or what went wrong.
  virtual std::string stream(const std::function<bool(const void*, size_t)>& out) = 0;
};

// The tensor value dict for a captured tensor whose data is blob `index`.
struct TensorMeta {
  std::string dtype;
  std::vector<int64_t> shape, stride;
  int64_t storage_offset = 0;
  std::string device = "cpu";
  int64_t alignment = 0;
  bool span = false;  // layout "span" (else "compact")
  bool requires_grad = false;
  bool wrapped_number = false;  // a Python number wrapped by the dispatcher (0-dim): written only when true
};
PickleValue tensor_value(const TensorMeta& meta, size_t blob_index, int64_t stored_numel);
PickleValue typed_value(const std::string& kind, const std::string& repr);

// Writes the archive: data.pkl (the document), data/{i} for blob i, version,
// byteorder. Ok, or the zip's code (kIoFailed, kTooLarge, ...), kFailed for a blob's own failure.
Status write_snapshot_archive(const PickleValue& document, const std::vector<BlobSource*>& blobs, ZipWriter& zip);

// A snapshot file opened for reading (replay): the document, validated, and
// its tensors' bytes on demand.
class SnapshotReader {
 public:
  // Ok or one clear error: not a ZIP, not a lingprobe snapshot, a malformed
  // document, a tensor whose bytes do not match its metadata, ...
  // kIoFailed (cannot open), kTooLarge (data.pkl or the pickle over a limit), kBadInput.
  Status open(const std::string& path);
  Status open_memory(const std::string& bytes);  // for tests and fuzzing
  const PickleValue& document() const { return doc_; }
  // The stored bytes of a tensor value's "data" (CRC checked).
  std::string read_data(const PickleValue& tensor_value, std::string& bytes) const;

 private:
  Status parse();
  std::unique_ptr<ByteSource> source_;
  std::string memory_;
  ZipReader zip_;
  std::string prefix_;  // "archive/"
  PickleValue doc_;
};

// Checks a document's shape (keys, kinds, every tensor's fields and sizes);
// ok, or kBadInput with the first problem, with its path ("args[0].shape").
Status validate_snapshot_document(const PickleValue& doc);

}  // namespace lingprobe::format
