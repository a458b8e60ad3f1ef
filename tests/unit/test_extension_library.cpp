#include <catch2/catch.hpp>

#include <string>

#include "sink/extension_library.h"

using lingprobe::sink::extension_library;

TEST_CASE("an extension's namespace finds the loaded library named for it; torch's own namespaces none",
          "[sink][replay]") {
  // libc is loaded in every process: the namespace "c" names it by "lib{ns}.so"
  const std::string libc = extension_library("c");
  CHECK(libc.find("/libc.so") != std::string::npos);
  CHECK(extension_library("aten").empty());  // torch's own: the replay process has them
  CHECK(extension_library("prim").empty());
  CHECK(extension_library("").empty());
  CHECK(extension_library("lingprobe_no_such_extension").empty());
}
