#include "capture/signature_key.h"

#include <cstring>

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace lingprobe::capture {
namespace {

inline void put(std::string& key, const void* p, size_t n) { key.append(static_cast<const char*>(p), n); }
inline void put_byte(std::string& key, uint8_t b) { key.push_back(static_cast<char>(b)); }

enum : uint8_t { kNone = 1, kTensor, kUndefined, kInt, kDouble, kBool, kString, kList, kTuple, kDevice, kOther };

}  // namespace

void append_key_u64(uint64_t value, std::string& key) { put(key, &value, sizeof value); }

void append_key(const c10::IValue& v, std::string& key) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      put_byte(key, kUndefined);
      return;
    }
    put_byte(key, kTensor);
    put_byte(key, static_cast<uint8_t>(t.scalar_type()));
    put_byte(key, static_cast<uint8_t>(t.layout()));
    try {
      const auto sizes = t.sizes();
      put_byte(key, static_cast<uint8_t>(sizes.size()));
      put(key, sizes.data(), sizes.size() * sizeof(int64_t));
      if (t.layout() == c10::kStrided) put(key, t.strides().data(), sizes.size() * sizeof(int64_t));
    } catch (const std::exception&) {
      put_byte(key, 0xFF);  // nested or symbolic sizes: the JSON form writes null
    }
    return;
  }
  if (v.isNone()) {
    put_byte(key, kNone);
  } else if (v.isInt()) {
    put_byte(key, kInt);
    append_key_u64(static_cast<uint64_t>(v.toInt()), key);
  } else if (v.isDouble()) {
    put_byte(key, kDouble);
    double d = v.toDouble();
    put(key, &d, sizeof d);
  } else if (v.isBool()) {
    put_byte(key, kBool);
    put_byte(key, v.toBool() ? 1 : 0);
  } else if (v.isString()) {
    put_byte(key, kString);
    const std::string& s = v.toStringRef();
    append_key_u64(s.size(), key);
    key.append(s);
  } else if (v.isList()) {
    put_byte(key, kList);
    const auto items = v.toListRef();
    append_key_u64(items.size(), key);
    for (const auto& item : items) append_key(item, key);
  } else if (v.isTuple()) {
    put_byte(key, kTuple);
    const auto& items = v.toTupleRef().elements();
    append_key_u64(items.size(), key);
    for (const auto& item : items) append_key(item, key);
  } else if (v.isDevice()) {
    put_byte(key, kDevice);
    put_byte(key, static_cast<uint8_t>(v.toDevice().type()));
  } else {
    // Written as the fallback string "<Kind>" (or a dict): key on the tag
    // name; dicts are rare enough to key by their kind and size.
    put_byte(key, kOther);
    const std::string kind = v.tagKind();
    append_key_u64(kind.size(), key);
    key.append(kind);
    if (v.isGenericDict()) append_key_u64(v.toGenericDict().size(), key);
  }
}

uint64_t hash_key(const char* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace lingprobe::capture
