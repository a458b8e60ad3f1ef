// The hot path's signature lookup: keys are runs of 64-bit words (see
// signature_key.h), hashed word by word and found in a per-thread open
// addressing table that keeps its own copy of every key and compares whole
// keys, so a hash collision can never merge two signatures. Lookups neither
// lock nor allocate; inserts (first sightings) may allocate. Pure C++.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace lingprobe::capture {

// Not cryptographic: the table compares whole keys. Two words per step.
inline uint64_t hash_words(const uint64_t* words, size_t n) {
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ULL;
  uint64_t a = 0x243F6A8885A308D3ULL ^ n, b = 0x13198A2E03707344ULL;
  size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    a = (a ^ words[i]) * kMul;
    b = (b ^ words[i + 1]) * kMul;
  }
  if (i < n) a = (a ^ words[i]) * kMul;
  uint64_t h = a ^ ((b << 31) | (b >> 33));
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ULL;
  return h ^ (h >> 29);
}

// Whether two keys of n words are equal (inline: short keys, no call).
inline bool same_words(const uint64_t* a, const uint64_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

class KeyTable {
 public:
  KeyTable();

  // The value stored under this key, or nullptr.
  const uint32_t* find(uint64_t hash, const uint64_t* key, size_t n) const {
    for (size_t i = hash & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.words == kEmpty) return nullptr;
      if (s.hash == hash && s.words == n && same(&keys_[s.offset], key, n)) return &s.value;
    }
  }

  // Stores a copy of the key (which must not be present yet); where it is kept (stored_equals' offset).
  uint64_t insert(uint64_t hash, const uint64_t* key, size_t n, uint32_t value);
  // Whether the key stored at `offset` (`words` words: insert's) equals `key` of n words.
  bool stored_equals(uint64_t offset, size_t words, const uint64_t* key, size_t n) const {
    return words == n && same(&keys_[offset], key, n);
  }
  // The stored key at `offset` (insert's), valid until the next insert.
  const uint64_t* stored(uint64_t offset) const { return &keys_[offset]; }
  size_t size() const { return size_; }

 private:
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  struct Slot {
    uint64_t hash;
    uint64_t offset;  // into keys_
    uint32_t words;   // key length, kEmpty: free slot
    uint32_t value;
  };
  static bool same(const uint64_t* a, const uint64_t* b, size_t n) {
    return std::memcmp(a, b, n * sizeof(uint64_t)) == 0;
  }
  void grow();

  std::vector<Slot> slots_;
  std::vector<uint64_t> keys_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace lingprobe::capture
