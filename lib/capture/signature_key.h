// The hot-path form of a signature (SPEC section 3): a compact key of 64-bit
// words holding everything the canonical JSON depends on (op, stage, IValue
// tags, dtypes, layouts, sizes, strides, scalar bits, string bytes). Equal
// keys give equal canonical JSON. Keys are written into a per-thread
// KeyBuffer that grows only when a call has more words than any call before.
#pragma once

#include "capture/torch_guard.h"

#include <ATen/core/ivalue.h>

#include "capture/compile_tracing.h"

#include <cstdint>
#include <vector>

namespace lingprobe::capture {

class KeyBuffer {
 public:
  KeyBuffer() : words_(1024), capacity_(words_.size()) {}
  KeyBuffer(const KeyBuffer&) = delete;  // capacity_ caches words_.size(): one buffer per thread, never moved
  KeyBuffer& operator=(const KeyBuffer&) = delete;
  // Room for n more words at the end; write them, then commit(n).
  uint64_t* reserve(size_t n) {
    if (C10_UNLIKELY(size_ + n > capacity_)) {
      words_.resize(2 * (size_ + n));
      capacity_ = words_.size();
    }
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
  size_t capacity_;  // words_.size(), kept: no division per reserve
  size_t size_ = 0;
};

// Tags: the low byte of the first word of every value.
enum KeyTag : uint64_t {
  kKeyNone = 1,
  kKeyTensor,
  kKeyUndefined,
  kKeyInt,
  kKeyDouble,
  kKeyBool,
  kKeyString,
  kKeyList,
  kKeyTuple,
  kKeyDevice,
  kKeyOther
};

// Everything but ints and defined strided tensors (the hot cases, inline below).
void append_other_key(const c10::IValue& value, KeyBuffer& key);

// What the pass over a call's inputs saw besides their key (append_input_keys):
// a fake tensor (compile-time tracing: capture/compile_tracing) and a defined
// tensor (else the call is a factory), as has_fake_tensor tells them.
struct InputScan {
  bool fake = false;
  bool tensor = false;
};

// A defined strided tensor's first word: tag | dtype << 8 | layout << 16 | dim << 24 | has strides << 56.
inline uint64_t strided_tensor_head(c10::ScalarType dtype, size_t dim) {
  return kKeyTensor | static_cast<uint64_t>(dtype) << 8 | static_cast<uint64_t>(c10::kStrided) << 16 |
         static_cast<uint64_t>(dim) << 24 | uint64_t{1} << 56;
}

// A strided tensor's sizes and strides, or false where asking throws (nested or symbolic sizes: keyed by
// append_other_key).
C10_ALWAYS_INLINE bool plain_sizes_and_strides(const c10::TensorImpl* impl, c10::IntArrayRef& sizes,
                                               c10::IntArrayRef& strides) {
  try {
    sizes = impl->sizes();
    strides = impl->strides();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

template <bool kScan>
inline void append_keys_scanning(const c10::IValue* values, size_t count, KeyBuffer& key, InputScan* scan) {
  for (const c10::IValue* end = values + count; values != end; ++values) {
    const c10::IValue& value = *values;
    if (value.isInt()) {
      uint64_t* w = key.reserve(2);
      w[0] = kKeyInt;
      w[1] = static_cast<uint64_t>(value.toInt());
      key.commit(2);
      continue;
    }
    if (!value.isTensor()) {
      if (kScan && value.isList() &&
          C10_UNLIKELY(has_fake_tensor(c10::ArrayRef<c10::IValue>(&value, 1), &scan->tensor)))
        scan->fake = true;
      append_other_key(value, key);
      continue;
    }
    const at::Tensor& t = value.toTensor();
    if (kScan && t.defined()) {
      scan->tensor = true;
      if (C10_UNLIKELY(is_fake_tensor(t))) scan->fake = true;
    }
    if (!t.defined() || t.layout() != c10::kStrided) {
      append_other_key(value, key);
      continue;
    }
    c10::IntArrayRef sizes, strides;
    if (!plain_sizes_and_strides(t.unsafeGetTensorImpl(), sizes, strides)) {
      append_other_key(value, key);
      continue;
    }
    const size_t dim = sizes.size();
    uint64_t* w = key.reserve(1 + 2 * dim);
    w[0] = strided_tensor_head(t.scalar_type(), dim);
    for (size_t i = 0; i < dim; ++i) {
      w[1 + i] = static_cast<uint64_t>(sizes[i]);
      w[1 + dim + i] = static_cast<uint64_t>(strides[i]);
    }
    key.commit(1 + 2 * dim);
  }
}

// As keys_match_scanning (below) for one value append_other_key keys (out
// of line: the tensors' and ints' loop stays short): lists, None and bools
// compared word by word, the rest keyed at `scratch`'s end and compared there.
bool other_key_matches(const c10::IValue& value, const uint64_t*& p, const uint64_t* end, KeyBuffer& scratch);

// Whether the keys append_keys_scanning would write for `values` are the
// words from `p` on (before `end`), compared in place: nothing written. On
// true, `p` is past them (on false, unspecified); the values append_other_key keys
// are compared by other_key_matches (`scratch` left as it was). `scan` as
// append_input_keys; meaningful only when they match.
// The fast path of a repeated call against its guessed entry's stored key.
template <bool kScan>
inline bool keys_match_scanning(const c10::IValue* values, size_t count, const uint64_t*& p, const uint64_t* end,
                                KeyBuffer& scratch, InputScan* scan) {
  const uint64_t* q = p;  // in a register: `p` is written back only where other_key_matches reads it, and at the end
  for (const c10::IValue* last = values + count; values != last; ++values) {
    const c10::IValue& value = *values;
    if (value.isTensor()) {
      const c10::TensorImpl* impl = value.unsafeToTensorImpl();
      c10::IntArrayRef sizes, strides;
      if (impl != c10::UndefinedTensorImpl::singleton()) {
        if (kScan) {
          scan->tensor = true;
          if (C10_UNLIKELY(is_fake_tensor(value.toTensor()))) scan->fake = true;
        }
        if (C10_LIKELY(impl->layout() == c10::kStrided) && plain_sizes_and_strides(impl, sizes, strides)) {
          const size_t dim = sizes.size();
          if (static_cast<size_t>(end - q) < 1 + 2 * dim ||
              q[0] != strided_tensor_head(c10::typeMetaToScalarType(impl->dtype()), dim))
            return false;
          const int64_t* size = sizes.data();
          const int64_t* stride = strides.data();
          const uint64_t* stored_sizes = q + 1;
          const uint64_t* stored_strides = q + 1 + dim;
          for (size_t i = 0; i < dim; ++i)
            if ((stored_sizes[i] ^ static_cast<uint64_t>(size[i])) |
                (stored_strides[i] ^ static_cast<uint64_t>(stride[i])))
              return false;
          q += 1 + 2 * dim;
          continue;
        }
      }
    } else if (value.isInt()) {
      if (end - q < 2 || q[0] != kKeyInt || q[1] != static_cast<uint64_t>(value.toInt())) return false;
      q += 2;
      continue;
    } else if (kScan && value.isList() &&
               C10_UNLIKELY(has_fake_tensor(c10::ArrayRef<c10::IValue>(&value, 1), &scan->tensor))) {
      scan->fake = true;
    }
    p = q;
    if (!other_key_matches(value, p, end, scratch)) return false;
    q = p;
  }
  p = q;
  return true;
}

// Appends the key of every value (strided tensors and ints inline, the rest
// through append_other_key). Tensor: tag | dtype << 8 | layout << 16 |
// dim << 24 | has strides << 56, then the sizes, then the strides.
inline void append_keys(const c10::IValue* values, size_t count, KeyBuffer& key) {
  append_keys_scanning<false>(values, count, key, nullptr);
}

// As append_keys, for a call's inputs: the same pass also looks for a fake
// tensor and a defined one (`scan`), so that the recorder needs no pass of its
// own before it (the fake check costs a dispatch-key test per tensor).
inline void append_input_keys(const c10::IValue* values, size_t count, KeyBuffer& key, InputScan& scan) {
  append_keys_scanning<true>(values, count, key, &scan);
}

// As append_keys, with the int and float values of the positions `fold` marks
// (ScalarFold) keyed by their tag alone: one key for every value
// (LINGPROBE_FOLD_SCALARS). Out of line: the unfolded path stays as it was.
void append_folded_keys(const c10::IValue* values, size_t count, uint64_t fold, KeyBuffer& key);

// A call's input key: the op's word, then (stage, argument count), then the
// inputs' keys (folded where `fold` marks, LINGPROBE_FOLD_SCALARS); `scan` as
// append_input_keys, on the folded path by has_fake_tensor's own pass.
inline void append_call_input_key(KeyBuffer& key, uint64_t op_word, uint64_t stage, const c10::IValue* inputs,
                                  size_t count, uint64_t fold, InputScan& scan) {
  uint64_t* head = key.reserve(2);
  head[0] = op_word;
  head[1] = stage | static_cast<uint64_t>(count) << 16;
  key.commit(2);
  if (C10_UNLIKELY(fold != 0)) {
    scan.fake = has_fake_tensor(c10::ArrayRef<c10::IValue>(inputs, count), &scan.tensor);
    append_folded_keys(inputs, count, fold, key);
  } else {
    append_input_keys(inputs, count, key, scan);
  }
}

}  // namespace lingprobe::capture
