// Temporary directories of a test or fuzz program, removed with what they hold when the program exits (the unit
// tests' test::temp_dir and the fuzz targets' run directories; either left hundreds in /tmp before).
#pragma once

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace lingprobe::test {

// Removes `path` and what it holds at the program's exit. Not thread-safe: call it from one thread.
inline void remove_at_exit(const std::string& path) {
  struct Paths {
    std::vector<std::string> list;
    ~Paths() {
      for (const std::string& p : list) {
        std::error_code ignored;
        std::filesystem::remove_all(p, ignored);
      }
    }
  };
  static Paths paths;  // made at the first call, before the directory's users: destroyed after them
  paths.list.push_back(path);
}

}  // namespace lingprobe::test
