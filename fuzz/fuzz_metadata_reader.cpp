// libFuzzer: the audit's metadata reader (lib/audit/metadata_reader) on any
// bytes as a metadata JSONL file. It must return an error or a summary, never
// crash, hang or read out of bounds.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "audit/metadata_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("lingprobe-fuzz-metadata", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  lingprobe::audit::FileSummary summary;
  (void)lingprobe::audit::read_metadata_file("/proc/self/fd/" + std::to_string(fd), summary);
  return 0;
}
