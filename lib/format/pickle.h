// The subset of Python's pickle (protocol 2) that a torch.save file's
// data.pkl needs and that torch.load(weights_only=True) accepts on torch 1.13
// and 2.x alike: dicts with string keys, lists, tuples, str, int (any size),
// bool, None, and tensors rebuilt by torch._utils._rebuild_tensor_v2 from a
// typed storage (persistent id ('storage', torch.<Type>Storage, key, 'cpu',
// numel)). No floats (torch 1.13's weights_only unpickler rejects BINFLOAT),
// no dtype objects, no custom classes, no memo. The reader parses exactly
// what the writer writes, with limits; anything else is an error.
// Pure: no torch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "format/status.h"

namespace lingprobe::format {

struct PickleTensor {
  std::string storage_class;  // "FloatStorage", "BFloat16Storage", "ByteStorage", ...
  std::string storage_key;    // the archive's data/{key} record
  int64_t storage_numel = 0;  // elements of the storage
  int64_t storage_offset = 0;
  std::vector<int64_t> size, stride;
};

class PickleValue {
 public:
  enum class Kind { None, Bool, Int, String, List, Tuple, Dict, Tensor };
  using Item = std::pair<std::string, PickleValue>;

  PickleValue() = default;
  static PickleValue none() { return {}; }
  static PickleValue boolean(bool b);
  static PickleValue integer(int64_t i);
  static PickleValue string(std::string s);
  static PickleValue list(std::vector<PickleValue> items = {});
  static PickleValue tuple(std::vector<PickleValue> items = {});
  static PickleValue dict(std::vector<Item> items = {});
  static PickleValue tensor(PickleTensor t);

  Kind kind() const { return kind_; }
  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  const std::string& as_string() const { return s_; }
  const std::vector<PickleValue>& items() const { return items_; }
  std::vector<PickleValue>& items() { return items_; }
  const std::vector<Item>& entries() const { return entries_; }
  const PickleTensor& as_tensor() const { return *tensor_; }

  void set(std::string key, PickleValue v);  // dicts
  const PickleValue* find(const std::string& key) const;
  void push_back(PickleValue v) { items_.push_back(std::move(v)); }

 private:
  Kind kind_ = Kind::None;
  bool b_ = false;
  int64_t i_ = 0;
  std::string s_;
  std::vector<PickleValue> items_;
  std::vector<Item> entries_;
  std::shared_ptr<PickleTensor> tensor_;
};

// Appends the pickle of `value` (PROTO 2 ... STOP) to `out`.
void write_pickle(const PickleValue& value, std::string& out);

// Parses a pickle written by write_pickle. Returns ok, or the error (with the
// byte offset): kTooLarge over a limit, kBadInput otherwise. Limits: 64 levels
// of nesting (of marks and of containers), 10^7 items, strings up to 256 MiB.
Status read_pickle(const std::string& bytes, PickleValue& out);

}  // namespace lingprobe::format
