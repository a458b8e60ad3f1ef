// A LibTorch program that records through the C ABI and returns from main
// without lingprobe_finalize(): finalize then runs at exit by itself, while
// the snapshot writer still hashes the copies of the last calls, each a new
// shape (a server whose last request was new, with no shutdown path).
// test_cpp_example.py runs it with LINGPROBE_SNAPSHOTS=1 and checks its files.
//
//   exit_without_finalize OUT_DIR
//
// Prints the metadata file's path; exit status 0 unless init failed.
#include <ATen/ATen.h>

#include <cstdio>

#include "lingprobe/lingprobe.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  lingprobe_options options = {};
  options.struct_size = sizeof options;
  options.use_environment = 1;
  options.out_dir = argv[1];
  if (lingprobe_init(&options) != LINGPROBE_OK) {
    std::fprintf(stderr, "lingprobe: %s\n", lingprobe_last_error());
    return 1;
  }
  const at::Tensor w = at::randn({256, 256}), b = at::randn({256});
  for (int64_t rows = 1; rows <= 16; ++rows) at::relu(at::linear(at::randn({rows, 256}), w, b));
  char path[4096] = {0};
  lingprobe_get_metadata_path(path, sizeof path);
  std::printf("%s\n", path);
  return 0;
}
