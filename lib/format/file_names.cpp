#include "format/file_names.h"

namespace lingprobe::format {

std::string safe_name_part(const std::string& text, size_t max_length) {
  std::string out;
  for (char c : text.substr(0, max_length)) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    out += ok ? c : '_';
  }
  return out;
}

}  // namespace lingprobe::format
