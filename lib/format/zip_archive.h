// The ZIP container of torch.save's format (what torch.load opens): entries
// STORED (no compression), each entry's data 64-byte aligned as PyTorch's own
// writer aligns it, CRC-32 and sizes in a data descriptor after the data so
// that the file is written strictly front to back (its SHA-256 computed on
// the way), no ZIP64 (entries and the archive stay under 4 GiB). The reader
// accepts what the writer writes and checks every offset and size against
// the file, so a truncated or foreign file is an error, never a crash.
// Pure: no torch, no threads.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "format/status.h"

namespace lingprobe::format {

class ZipWriter {
 public:
  // `out(bytes, n)` receives the archive in order; returns false on a write error.
  using Output = std::function<bool(const void*, size_t)>;
  explicit ZipWriter(Output out) : out_(std::move(out)) {}

  bool begin_entry(const std::string& name);
  bool write(const void* data, size_t n);
  bool end_entry();
  // Whole entry at once.
  bool add(const std::string& name, const void* data, size_t n);
  // The central directory and its end record; afterwards nothing may be added.
  bool finish();

  uint64_t bytes_written() const { return offset_; }
  // Why the first failed call failed (kTooLarge: over ZIP's 4 GiB, kIoFailed: `out` refused, kBadInput: an entry
  // name); ok while none did. Later calls fail and keep it.
  const Status& status() const { return status_; }

 private:
  bool emit(const void* data, size_t n);
  struct Entry {
    std::string name;
    uint64_t header_offset = 0;
    uint32_t crc = 0;
    uint64_t size = 0;
  };
  Output out_;
  std::vector<Entry> entries_;
  bool open_ = false, finished_ = false;
  uint64_t offset_ = 0;
  Status status_;
  bool fail(StatusCode code, const char* message);
};

// Random access to the archive's bytes.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  virtual bool read(uint64_t offset, void* dst, size_t n) const = 0;
};

class MemorySource : public ByteSource {
 public:
  MemorySource(const void* data, size_t n) : data_(static_cast<const unsigned char*>(data)), n_(n) {}
  uint64_t size() const override { return n_; }
  bool read(uint64_t offset, void* dst, size_t n) const override;

 private:
  const unsigned char* data_;
  size_t n_;
};

class FileSource : public ByteSource {
 public:
  explicit FileSource(const std::string& path);
  ~FileSource() override;
  bool ok() const { return fd_ >= 0; }
  uint64_t size() const override { return size_; }
  bool read(uint64_t offset, void* dst, size_t n) const override;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
};

struct ZipEntry {
  std::string name;
  uint64_t data_offset = 0;  // where the stored bytes start
  uint64_t size = 0;
  uint32_t crc = 0;
};

class ZipReader {
 public:
  // Parses the central directory; "" or what is wrong with the archive.
  std::string open(const ByteSource& source);
  const std::vector<ZipEntry>& entries() const { return entries_; }
  const ZipEntry* find(const std::string& name) const;
  // Reads a whole entry (at most `limit` bytes) and checks its CRC.
  std::string read_entry(const ZipEntry& entry, std::string& out, uint64_t limit = 1ull << 32) const;
  // Streams an entry in chunks to `sink(data, n)` and checks its CRC.
  std::string stream_entry(const ZipEntry& entry, const std::function<bool(const void*, size_t)>& sink) const;

 private:
  const ByteSource* source_ = nullptr;
  std::vector<ZipEntry> entries_;
};

}  // namespace lingprobe::format
