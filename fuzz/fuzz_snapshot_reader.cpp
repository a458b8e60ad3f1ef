// libFuzzer: replay's snapshot reader (lingprobe's own ZIP and pickle reader,
// lib/format/snapshot_file) on any bytes as a .pt file: open, validate the
// document, read every tensor's bytes. Errors are fine; crashes are not.
#include <cstddef>
#include <cstdint>
#include <string>

#include "format/snapshot_file.h"

namespace {
void read_tensors(const lingprobe::format::SnapshotReader& r, const lingprobe::format::PickleValue& v, int depth) {
  using lingprobe::format::PickleValue;
  if (depth > 64) return;
  if (v.kind() == PickleValue::Kind::Dict) {
    if (v.find("data")) {
      std::string bytes;
      (void)r.read_data(v, bytes);
    }
    for (const auto& item : v.entries()) read_tensors(r, item.second, depth + 1);
  } else if (v.kind() == PickleValue::Kind::List || v.kind() == PickleValue::Kind::Tuple) {
    for (const auto& item : v.items()) read_tensors(r, item, depth + 1);
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lingprobe::format::SnapshotReader reader;
  if (!reader.open_memory(std::string(reinterpret_cast<const char*>(data), size)).ok()) return 0;
  if (!lingprobe::format::validate_snapshot_document(reader.document()).ok()) return 0;
  read_tensors(reader, reader.document(), 0);
  return 0;
}
