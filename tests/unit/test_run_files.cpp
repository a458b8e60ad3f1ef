// The run directory's shared file helpers (sink/run_directory): the sorted
// metadata listing that audit, report and replay read, and replace_file.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "sink/run_directory.h"
#include "test_support.h"

using namespace lingprobe;

TEST_CASE("run files: metadata_files lists metadata/*.jsonl sorted, nothing else", "[run_directory]") {
  const std::string run = test::temp_dir("lprunfiles");
  CHECK(sink::metadata_files(run).empty());  // no metadata/ at all
  REQUIRE(sink::make_directories(run + "/metadata").empty());
  for (const char* n : {"metadata_rank1.jsonl", "metadata_rank0.jsonl", "notes.txt", ".jsonl", "x.jsonl.tmp123"})
    std::ofstream(run + "/metadata/" + n) << "{}\n";
  const auto files = sink::metadata_files(run);
  REQUIRE(files.size() == 2);
  CHECK(files[0] == run + "/metadata/metadata_rank0.jsonl");
  CHECK(files[1] == run + "/metadata/metadata_rank1.jsonl");
}

TEST_CASE("run files: replace_file replaces whole, leaves no temporary, says why it cannot", "[run_directory]") {
  const std::string dir = test::temp_dir("lprunfiles");
  const std::string path = dir + "/report.json";
  CHECK(sink::replace_file(path, "first, a longer text\n").empty());
  CHECK(sink::replace_file(path, "second\n").empty());
  CHECK(test::read_file(path) == "second\n");
  CHECK(sink::metadata_files(dir).empty());
  struct stat st;
  CHECK(::stat((path + ".tmp" + std::to_string(::getpid())).c_str(), &st) != 0);
  const std::string err = sink::replace_file(dir + "/missing/report.json", "x");
  CHECK(err.find("cannot write " + dir + "/missing/report.json") == 0);
}
