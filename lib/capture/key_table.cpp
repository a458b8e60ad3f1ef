#include "capture/key_table.h"

namespace lingprobe::capture {

KeyTable::KeyTable() : slots_(64, Slot{0, 0, kEmpty, 0}), mask_(63) {}

uint64_t KeyTable::insert(uint64_t hash, const uint64_t* key, size_t n, uint32_t value) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const uint64_t offset = keys_.size();
  keys_.insert(keys_.end(), key, key + n);
  size_t i = hash & mask_;
  while (slots_[i].words != kEmpty) i = (i + 1) & mask_;
  slots_[i] = Slot{hash, offset, static_cast<uint32_t>(n), value};
  ++size_;
  return offset;
}

void KeyTable::grow() {
  std::vector<Slot> old(slots_.size() * 2, Slot{0, 0, kEmpty, 0});
  old.swap(slots_);
  mask_ = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.words == kEmpty) continue;
    size_t i = s.hash & mask_;
    while (slots_[i].words != kEmpty) i = (i + 1) & mask_;
    slots_[i] = s;
  }
}

}  // namespace lingprobe::capture
