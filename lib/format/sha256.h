// SHA-256 (OpenSSL libcrypto) as lowercase hex: the signature_sha256 of
// canonical text, and the sha256 of files listed in reports.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lingprobe::format {

std::string sha256_hex(std::string_view bytes);

// `callback` runs once, right after the process's first digest (at once if
// one was taken already; twice if one races with this call). libcrypto
// registers its exit-time cleanup, which frees the digests' locks, during its
// first use, and exit handlers run in reverse order: an exit handler that
// hashes must be registered (again) from `callback`, or it meets a torn-down
// libcrypto at exit. Any thread.
void on_first_digest(void (*callback)());

// Hash of a whole file, streamed; returns false (and leaves `hex` empty) when
// the file cannot be read.
bool sha256_file_hex(const std::string& path, std::string& hex);

// SHA-256 of bytes given piece by piece (a file as it is read or written).
// One thread at a time; hex() ends it.
class Sha256Stream {
 public:
  Sha256Stream();
  ~Sha256Stream();
  Sha256Stream(const Sha256Stream&) = delete;
  Sha256Stream& operator=(const Sha256Stream&) = delete;
  void update(const void* data, size_t n);
  std::string hex();

 private:
  void* ctx_;  // EVP_MD_CTX, kept out of this header
};

}  // namespace lingprobe::format
