#include "format/zip_archive.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "format/crc32.h"

namespace lingprobe::format {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50, kCentralSig = 0x02014b50, kEndSig = 0x06054b50, kDescriptorSig = 0x08074b50;
constexpr uint16_t kFlagDescriptor = 1u << 3, kFlagUtf8 = 1u << 11;
constexpr uint64_t kAlign = 64;
constexpr uint64_t kZip32Max = 0xFFFFFFFFull;

void put16(std::string& s, uint16_t v) {
  s.push_back(static_cast<char>(v & 0xFF));
  s.push_back(static_cast<char>(v >> 8));
}
void put32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
uint16_t get16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t get32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace

bool ZipWriter::fail(StatusCode code, const char* message) {
  if (status_.ok()) {
    status_ = Status(code, message);
  }
  return false;
}

bool ZipWriter::emit(const void* data, size_t n) {
  if (n == 0) return true;
  if (!out_(data, n)) return fail(StatusCode::kIoFailed, "write failed");
  offset_ += n;
  return true;
}

bool ZipWriter::begin_entry(const std::string& name) {
  if (open_ || finished_ || !status_.ok()) return false;
  if (name.empty() || name.size() > 0xFFFF) return fail(StatusCode::kBadInput, "bad entry name");
  Entry e;
  e.name = name;
  e.header_offset = offset_;
  // Pad with an extra field so that the data starts on a 64-byte boundary.
  const uint64_t fixed = 30 + name.size();
  uint64_t pad = (kAlign - (offset_ + fixed + 4) % kAlign) % kAlign;
  std::string h;
  put32(h, kLocalSig);
  put16(h, 20);  // version needed
  put16(h, kFlagDescriptor | kFlagUtf8);
  put16(h, 0);     // stored
  put16(h, 0);     // time
  put16(h, 0x21);  // date: 1980-01-01
  put32(h, 0);     // crc, sizes: in the data descriptor
  put32(h, 0);
  put32(h, 0);
  put16(h, static_cast<uint16_t>(name.size()));
  put16(h, static_cast<uint16_t>(4 + pad));
  h += name;
  put16(h, 0x4b46);  // "FK": the padding field PyTorch's writer uses too
  put16(h, static_cast<uint16_t>(pad));
  h.append(pad, 'Z');
  if (!emit(h.data(), h.size())) return false;
  entries_.push_back(std::move(e));
  open_ = true;
  return true;
}

bool ZipWriter::write(const void* data, size_t n) {
  if (!open_ || !status_.ok()) return false;
  Entry& e = entries_.back();
  // Refused before any byte is read or written: the archive has no ZIP64.
  if (e.size + n > kZip32Max || offset_ + n > kZip32Max)
    return fail(StatusCode::kTooLarge, "archive larger than 4 GiB (no ZIP64)");
  e.crc = crc32_update(e.crc, data, n);
  e.size += n;
  return emit(data, n);
}

bool ZipWriter::end_entry() {
  if (!open_ || !status_.ok()) return false;
  open_ = false;
  const Entry& e = entries_.back();
  std::string d;
  put32(d, kDescriptorSig);
  put32(d, e.crc);
  put32(d, static_cast<uint32_t>(e.size));
  put32(d, static_cast<uint32_t>(e.size));
  return emit(d.data(), d.size());
}

bool ZipWriter::add(const std::string& name, const void* data, size_t n) {
  return begin_entry(name) && write(data, n) && end_entry();
}

bool ZipWriter::finish() {
  if (open_ || finished_ || !status_.ok()) return false;
  const uint64_t cd_start = offset_;
  std::string cd;
  for (const Entry& e : entries_) {
    put32(cd, kCentralSig);
    put16(cd, 20);  // version made by
    put16(cd, 20);
    put16(cd, kFlagDescriptor | kFlagUtf8);
    put16(cd, 0);
    put16(cd, 0);
    put16(cd, 0x21);
    put32(cd, e.crc);
    put32(cd, static_cast<uint32_t>(e.size));
    put32(cd, static_cast<uint32_t>(e.size));
    put16(cd, static_cast<uint16_t>(e.name.size()));
    put16(cd, 0);  // extra
    put16(cd, 0);  // comment
    put16(cd, 0);  // disk
    put16(cd, 0);  // internal attributes
    put32(cd, 0);  // external attributes
    put32(cd, static_cast<uint32_t>(e.header_offset));
    cd += e.name;
  }
  if (entries_.size() > 0xFFFF || cd_start + cd.size() > kZip32Max)
    return fail(StatusCode::kTooLarge, "too many entries or archive too large (no ZIP64)");
  put32(cd, kEndSig);
  put16(cd, 0);
  put16(cd, 0);
  put16(cd, static_cast<uint16_t>(entries_.size()));
  put16(cd, static_cast<uint16_t>(entries_.size()));
  put32(cd, static_cast<uint32_t>(cd.size() - 0));  // patched below
  put32(cd, static_cast<uint32_t>(cd_start));
  put16(cd, 0);
  const uint32_t cd_size = static_cast<uint32_t>(cd.size() - 22);
  std::memcpy(&cd[cd.size() - 10], &cd_size, 4);  // little-endian host
  finished_ = true;
  return emit(cd.data(), cd.size());
}

bool MemorySource::read(uint64_t offset, void* dst, size_t n) const {
  if (offset > n_ || n > n_ - offset) return false;
  std::memcpy(dst, data_ + offset, n);
  return true;
}

FileSource::FileSource(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st;
  if (fd_ >= 0 && ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) {
    size_ = static_cast<uint64_t>(st.st_size);
  } else if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

FileSource::~FileSource() {
  if (fd_ >= 0) ::close(fd_);
}

bool FileSource::read(uint64_t offset, void* dst, size_t n) const {
  if (offset > size_ || n > size_ - offset) return false;
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<size_t>(got);
  }
  return true;
}

std::string ZipReader::open(const ByteSource& source) {
  source_ = &source;
  entries_.clear();
  const uint64_t size = source.size();
  if (size < 22) return "not a ZIP archive (too short)";
  // The end record: the last 22 bytes (we write no comment); search a little back for others'.
  const uint64_t window = size < 22 + 0xFFFF ? size : 22 + 0xFFFF;
  std::string tail(window, '\0');
  if (!source.read(size - window, tail.data(), window)) return "cannot read the archive";
  int64_t end_at = -1;
  for (int64_t i = static_cast<int64_t>(window) - 22; i >= 0; --i)
    if (get32(reinterpret_cast<const unsigned char*>(tail.data()) + i) == kEndSig) {
      end_at = i;
      break;
    }
  if (end_at < 0) return "not a ZIP archive (no end-of-central-directory record)";
  const unsigned char* e = reinterpret_cast<const unsigned char*>(tail.data()) + end_at;
  const uint16_t count = get16(e + 10);
  const uint32_t cd_size = get32(e + 12), cd_offset = get32(e + 16);
  if (cd_offset == 0xFFFFFFFFu || count == 0xFFFF) return "ZIP64 archives are not supported";
  if (static_cast<uint64_t>(cd_offset) + cd_size > size) return "central directory lies outside the file (truncated?)";
  std::string cd(cd_size, '\0');
  if (!source.read(cd_offset, cd.data(), cd_size)) return "cannot read the central directory";
  const unsigned char* p = reinterpret_cast<const unsigned char*>(cd.data());
  size_t pos = 0;
  for (uint16_t i = 0; i < count; ++i) {
    if (pos + 46 > cd.size() || get32(p + pos) != kCentralSig) return "malformed central directory";
    const uint16_t method = get16(p + pos + 10);
    ZipEntry entry;
    entry.crc = get32(p + pos + 16);
    const uint32_t csize = get32(p + pos + 20), usize = get32(p + pos + 24);
    const uint16_t nlen = get16(p + pos + 28), xlen = get16(p + pos + 30), clen = get16(p + pos + 32);
    const uint32_t local = get32(p + pos + 42);
    if (pos + 46 + nlen + xlen + clen > cd.size()) return "malformed central directory";
    entry.name.assign(reinterpret_cast<const char*>(p + pos + 46), nlen);
    pos += 46 + nlen + xlen + clen;
    if (method != 0 || csize != usize) return "entry '" + entry.name + "' is compressed (only stored entries are read)";
    unsigned char lh[30];
    if (!source.read(local, lh, 30) || get32(lh) != kLocalSig) return "entry '" + entry.name + "': bad local header";
    entry.data_offset = static_cast<uint64_t>(local) + 30 + get16(lh + 26) + get16(lh + 28);
    entry.size = usize;
    if (entry.data_offset > size || entry.size > size - entry.data_offset)
      return "entry '" + entry.name + "' lies outside the file (truncated?)";
    entries_.push_back(std::move(entry));
  }
  return "";
}

const ZipEntry* ZipReader::find(const std::string& name) const {
  for (const auto& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

std::string ZipReader::stream_entry(const ZipEntry& entry, const std::function<bool(const void*, size_t)>& sink) const {
  std::string buf(std::min<uint64_t>(entry.size, 8u << 20), '\0');
  uint32_t crc = 0;
  for (uint64_t off = 0; off < entry.size;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(buf.size(), entry.size - off));
    if (!source_->read(entry.data_offset + off, buf.data(), n)) return "entry '" + entry.name + "': read failed";
    crc = crc32_update(crc, buf.data(), n);
    if (!sink(buf.data(), n)) return "entry '" + entry.name + "': consumer failed";
    off += n;
  }
  if (crc != entry.crc) return "entry '" + entry.name + "': CRC mismatch (the file was altered or damaged)";
  return "";
}

std::string ZipReader::read_entry(const ZipEntry& entry, std::string& out, uint64_t limit) const {
  if (entry.size > limit) return "entry '" + entry.name + "' is larger than " + std::to_string(limit) + " bytes";
  out.clear();
  out.reserve(static_cast<size_t>(entry.size));
  return stream_entry(entry, [&](const void* d, size_t n) {
    out.append(static_cast<const char*>(d), n);
    return true;
  });
}

}  // namespace lingprobe::format
