// The writer's call-record lines: canonical JSON (sorted keys, no spaces),
// at the extremes of every field; and a whole file written by the writer.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <limits>
#include <string>

#include "format/canonical_json.h"
#include "format/json_parse.h"
#include "sink/metadata_writer.h"

using namespace lingprobe;

namespace {
std::string line_of(const format::CallRecord& r) {
  char buf[192];
  return std::string(buf, sink::format_call_record(r, buf));
}
}  // namespace

TEST_CASE("call record lines are canonical JSON", "[sink]") {
  CHECK(line_of({7, 100, 250, 3, 4242, 0}) ==
        "{\"depth\":0,\"id\":3,\"kind\":\"call\",\"seq\":7,\"t0_ns\":100,\"t1_ns\":250,\"tid\":4242}\n");
  const format::CallRecord extreme{std::numeric_limits<uint64_t>::max(), std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::max(), 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
  const std::string text = line_of(extreme);
  REQUIRE(text.back() == '\n');
  auto parsed = format::parse_json(text.substr(0, text.size() - 1));
  REQUIRE(parsed.ok);
  CHECK(format::canonical_json(parsed.value) + "\n" == text);
  CHECK(text.find("\"seq\":18446744073709551615") != std::string::npos);
  CHECK(text.find("\"t0_ns\":-9223372036854775808") != std::string::npos);
}

TEST_CASE("the writer writes header, signature, calls and final counts in order", "[sink]") {
  char dir[] = "/tmp/lingprobe-writer-XXXXXX";
  REQUIRE(mkdtemp(dir));
  const std::string path = std::string(dir) + "/sub/m.jsonl";
  {
    sink::MetadataWriter w({path, "{\"kind\":\"header\"}", 10000}, [] {
      format::CountsSnapshot s;
      s.calls.emplace_back(0, 3);
      return s;
    });
    auto* b = w.register_buffer(16);
    w.add_signature(0, "ab", "{\"op\":\"aten.add.Tensor\"}");
    for (uint64_t i = 0; i < 3; ++i) REQUIRE(b->push({i, 1, 2, 0, 9, 0}) != format::RecordBuffer::Push::kFull);
    w.finalize();
  }
  std::ifstream f(path);
  std::string line;
  std::vector<std::string> kinds;
  while (std::getline(f, line)) {
    auto r = format::parse_json(line);
    REQUIRE(r.ok);
    kinds.push_back(r.value.find("kind")->as_string());
  }
  CHECK(kinds == std::vector<std::string>{"header", "signature", "call", "call", "call", "counts"});
  std::remove(path.c_str());
}
