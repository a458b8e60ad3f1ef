#include "capture/signature_key.h"

#include "capture/key_table.h"

#include <cstring>
#include <string>

namespace lingprobe::capture {
namespace {

constexpr uint64_t kNoSizes = 0xFF;  // nested or symbolic sizes: the JSON form writes null

void append_bytes(const std::string& s, KeyBuffer& key) {
  const size_t n = (s.size() + 7) / 8;
  uint64_t* w = key.reserve(n);
  if (n) w[n - 1] = 0;
  std::memcpy(w, s.data(), s.size());
  key.commit(n);
}

void append_tensor(const at::Tensor& t, KeyBuffer& key) {
  if (!t.defined()) {
    key.push(kKeyUndefined);
    return;
  }
  const uint64_t head =
      kKeyTensor | static_cast<uint64_t>(t.scalar_type()) << 8 | static_cast<uint64_t>(t.layout()) << 16;
  c10::IntArrayRef sizes, strides;
  try {
    sizes = t.sizes();
    if (t.layout() == c10::kStrided) strides = t.strides();
  } catch (const std::exception&) {
    key.push(head | kNoSizes << 24);
    return;
  }
  const size_t dim = sizes.size();
  uint64_t* w = key.reserve(1 + dim + strides.size());
  w[0] = head | static_cast<uint64_t>(dim) << 24 | static_cast<uint64_t>(!strides.empty()) << 56;
  for (size_t i = 0; i < dim; ++i) w[1 + i] = static_cast<uint64_t>(sizes[i]);
  for (size_t i = 0; i < strides.size(); ++i) w[1 + dim + i] = static_cast<uint64_t>(strides[i]);
  key.commit(1 + dim + strides.size());
}

}  // namespace

void append_other_key(const c10::IValue& v, KeyBuffer& key) {
  if (v.isTensor()) {
    append_tensor(v.toTensor(), key);
  } else if (v.isNone()) {
    key.push(kKeyNone);
  } else if (v.isDouble()) {
    const double d = v.toDouble();
    uint64_t* w = key.reserve(2);
    w[0] = kKeyDouble;
    std::memcpy(&w[1], &d, sizeof d);
    key.commit(2);
  } else if (v.isBool()) {
    key.push(kKeyBool | static_cast<uint64_t>(v.toBool()) << 8);
  } else if (v.isString()) {
    const std::string& s = v.toStringRef();
    key.push(kKeyString | static_cast<uint64_t>(s.size()) << 8);
    append_bytes(s, key);
  } else if (v.isList()) {
    const auto items = v.toListRef();
    key.push(kKeyList | static_cast<uint64_t>(items.size()) << 8);
    for (const auto& item : items) append_keys(&item, 1, key);
  } else if (v.isTuple()) {
    const auto& items = v.toTupleRef().elements();
    key.push(kKeyTuple | static_cast<uint64_t>(items.size()) << 8);
    for (const auto& item : items) append_keys(&item, 1, key);
  } else if (v.isDevice()) {
    key.push(kKeyDevice | static_cast<uint64_t>(v.toDevice().type()) << 8);
  } else {
    // Written as the fallback string "<Kind>" (or a dict): key on the tag
    // name; dicts are rare enough to key by their kind and size.
    const std::string kind = v.tagKind();
    key.push(kKeyOther | static_cast<uint64_t>(kind.size()) << 8 |
             static_cast<uint64_t>(v.isGenericDict() ? v.toGenericDict().size() : 0) << 32);
    append_bytes(kind, key);
  }
}

bool other_key_matches(const c10::IValue& value, const uint64_t*& p, const uint64_t* end, KeyBuffer& scratch) {
  if (value.isList()) {  // as append_other_key keys it: its size, then each item's key
    const auto items = value.toListRef();
    if (p == end || *p != (kKeyList | static_cast<uint64_t>(items.size()) << 8)) return false;
    ++p;
    return keys_match_scanning<false>(items.data(), items.size(), p, end, scratch, nullptr);
  }
  if (value.isNone() || value.isBool()) {
    const uint64_t word = value.isNone() ? kKeyNone : kKeyBool | static_cast<uint64_t>(value.toBool()) << 8;
    if (p == end || *p != word) return false;
    ++p;
    return true;
  }
  const size_t mark = scratch.size();
  append_other_key(value, scratch);
  const size_t n = scratch.size() - mark;
  const bool same = static_cast<size_t>(end - p) >= n && same_words(scratch.data() + mark, p, n);
  scratch.truncate(mark);
  if (same) p += n;
  return same;
}

void append_folded_keys(const c10::IValue* values, size_t count, uint64_t fold, KeyBuffer& key) {
  for (size_t i = 0; i < count; ++i) {
    const c10::IValue& value = values[i];
    if (i < 64 && (fold >> i & 1) && (value.isInt() || value.isDouble())) {
      key.push(value.isInt() ? kKeyInt : kKeyDouble);
      continue;
    }
    append_keys(&value, 1, key);
  }
}

}  // namespace lingprobe::capture
