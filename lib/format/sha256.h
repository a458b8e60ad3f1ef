// SHA-256 (OpenSSL libcrypto) as lowercase hex: the signature_sha256 of
// canonical text, and the sha256 of files listed in reports.
#pragma once

#include <string>
#include <string_view>

namespace lingprobe::format {

std::string sha256_hex(std::string_view bytes);

// Hash of a whole file, streamed; returns false (and leaves `hex` empty) when
// the file cannot be read.
bool sha256_file_hex(const std::string& path, std::string& hex);

}  // namespace lingprobe::format
