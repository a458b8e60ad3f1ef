#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "format/canonical_json.h"
#include "format/json_parse.h"
#include "format/sha256.h"
#include "test_support.h"

using namespace lingprobe::format;

TEST_CASE("canonical JSON equals Python's json.dumps(sort_keys, compact) on generated cases", "[format][json]") {
  // tests/data/canonical_cases.jsonl was written by make_canonical_cases.py
  // with Python's json module: input text, its canonical text and sha256.
  std::ifstream in(lingprobe::test::data_path("canonical_cases.jsonl"));
  REQUIRE(in);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    auto record = parse_json(line);
    REQUIRE(record.status.ok());
    const std::string input = record.value.find("input")->as_string();
    const std::string expected = record.value.find("canonical")->as_string();
    auto parsed = parse_json(input);
    INFO("input: " << input << " error: " << parsed.status.message());
    REQUIRE(parsed.status.ok());
    CHECK(canonical_json(parsed.value) == expected);
    CHECK(canonical_sha256(parsed.value) == record.value.find("sha256")->as_string());
    ++n;
  }
  CHECK(n >= 12);
}

TEST_CASE("canonical JSON of a built signature sorts keys and writes compactly", "[format][json]") {
  JsonValue tensor = JsonValue::object({{"stride", JsonValue::array({JsonValue::integer(1)})},
                                        {"shape", JsonValue::array({JsonValue::integer(4)})},
                                        {"dtype", JsonValue::string("torch.float32")}});
  JsonValue sig = JsonValue::object({{"stage", JsonValue::string("unstaged")},
                                     {"op", JsonValue::string("aten.add.Tensor")},
                                     {"args", JsonValue::array({tensor, JsonValue::floating(0.5)})},
                                     {"kwargs", JsonValue::object()},
                                     {"output", tensor}});
  CHECK(canonical_json(sig) ==
        R"({"args":[{"dtype":"torch.float32","shape":[4],"stride":[1]},0.5],"kwargs":{},"op":"aten.add.Tensor",)"
        R"("output":{"dtype":"torch.float32","shape":[4],"stride":[1]},"stage":"unstaged"})");
}

TEST_CASE("strings are escaped as ensure_ascii does; invalid UTF-8 becomes U+FFFD", "[format][json]") {
  std::string out;
  write_json_string(std::string("a\"b\\c\x01\x7f\xc3\xa9\xf0\x9f\x98\x80", 13), out);
  CHECK(out == R"("a\"b\\c\u0001\u007f\u00e9\ud83d\ude00")");
  out.clear();
  write_json_string(std::string("x\xff", 2), out);
  CHECK(out == R"("x\ufffd")");
}

TEST_CASE("sha256_hex matches known digests", "[format][sha256]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

namespace {
int g_first_digest_calls = 0;
}  // namespace

TEST_CASE("the first digest's callback runs once, at once when a digest was taken before", "[format][sha256]") {
  // The session registers finalize again from it, after libcrypto's own exit handler (test_cpp_example.py's
  // program without finalize crashed at exit before).
  lingprobe::format::on_first_digest([] { ++g_first_digest_calls; });
  (void)sha256_hex("abc");
  (void)sha256_hex("abc");
  CHECK(g_first_digest_calls == 1);
  lingprobe::format::on_first_digest([] { ++g_first_digest_calls; });  // digests were taken: at once
  CHECK(g_first_digest_calls == 2);
  lingprobe::format::on_first_digest(nullptr);
}
