#include "format/glob.h"

namespace lingprobe::format {

bool glob_match(const char* p, const char* t) {
  const char* star = nullptr;
  const char* retry = nullptr;
  while (*t) {
    if (*p == '*') {
      star = p++;
      retry = t;
    } else if (*p == '?' || *p == *t) {
      ++p;
      ++t;
    } else if (star) {
      p = star + 1;
      t = ++retry;
    } else {
      return false;
    }
  }
  while (*p == '*') ++p;
  return *p == '\0';
}

}  // namespace lingprobe::format
