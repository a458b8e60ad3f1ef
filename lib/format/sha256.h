// SHA-256 (OpenSSL libcrypto) as lowercase hex: the signature_sha256 of
// canonical text, and the sha256 of files listed in reports.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lingprobe::format {

std::string sha256_hex(std::string_view bytes);

// Initialises libcrypto now. Its own exit handler (OPENSSL_cleanup, which
// frees the digests' locks) is registered at its first use; exit handlers run
// in reverse order, so an exit handler that hashes must be registered after
// this call, or it meets a torn-down libcrypto (a crash at exit). Any thread;
// idempotent.
void sha256_ready_before_exit_handlers();

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
