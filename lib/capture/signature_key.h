// The hot-path form of a signature (SPEC section 3): a compact key of 64-bit
// words holding everything the canonical JSON depends on (op, stage, IValue
// tags, dtypes, layouts, sizes, strides, scalar bits, string bytes). Equal
// keys give equal canonical JSON. Keys are written into a per-thread
// KeyBuffer that grows only when a call has more words than any call before.
#pragma once

#include "capture/torch_guard.h"

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <vector>

namespace lingprobe::capture {

class KeyBuffer {
 public:
  KeyBuffer() : words_(1024) {}
  // Room for n more words at the end; write them, then commit(n).
  uint64_t* reserve(size_t n) {
    if (size_ + n > words_.size()) words_.resize(2 * (size_ + n));
    return words_.data() + size_;
  }
  void commit(size_t n) { size_ += n; }
  void push(uint64_t w) {
    *reserve(1) = w;
    ++size_;
  }
  const uint64_t* data() const { return words_.data(); }
  size_t size() const { return size_; }
  void truncate(size_t n) { size_ = n; }

 private:
  std::vector<uint64_t> words_;
  size_t size_ = 0;
};

void append_key(const c10::IValue& value, KeyBuffer& key);

}  // namespace lingprobe::capture
