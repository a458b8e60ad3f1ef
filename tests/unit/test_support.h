// Helpers shared by the unit tests: reading the golden seed files, temporary directories.
#pragma once

#include <stdlib.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "remove_at_exit.h"

namespace lingprobe::test {

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f)
    throw std::runtime_error("cannot read " + path +
                             " (the seeds live in ../shared/seeds beside the checkout; "
                             "configure with -DLINGPROBE_SEEDS_DIR=... if they are elsewhere)");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline std::string seed_path(const char* name) { return std::string(LINGPROBE_SEEDS_DIR) + "/" + name; }
inline std::string data_path(const char* name) { return std::string(LINGPROBE_TEST_DATA_DIR) + "/" + name; }

// A fresh directory /tmp/{prefix}XXXXXX, removed with what it holds when the test program exits.
inline std::string temp_dir(const char* prefix) {
  std::string path = std::string("/tmp/") + prefix + "XXXXXX";
  if (!mkdtemp(path.data())) throw std::runtime_error("cannot make a directory " + path);
  remove_at_exit(path);
  return path;
}

}  // namespace lingprobe::test
