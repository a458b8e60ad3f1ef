// Helpers shared by the unit tests: reading the golden seed files.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

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

}  // namespace lingprobe::test
