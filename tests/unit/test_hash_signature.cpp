#include <catch2/catch.hpp>

#include <sstream>

#include "format/canonical_json.h"
#include "format/json_parse.h"
#include "format/sha256.h"
#include "hash_signature.h"
#include "test_support.h"

using lingprobe::tools::hash_signature;

TEST_CASE("hash-signature hashes each line in order, any key order and spacing", "[tools]") {
  std::istringstream in("{\"b\": 1, \"a\": 2}\n\n  {\"a\":2,\"b\":1}  \r\n{\"x\":[NaN]}");
  std::ostringstream out, err;
  CHECK(hash_signature(in, out, err) == 0);
  const std::string h = lingprobe::format::sha256_hex(R"({"a":2,"b":1})");
  CHECK(out.str() == h + "\n" + h + "\n" + lingprobe::format::sha256_hex(R"({"x":[NaN]})") + "\n");
  CHECK(err.str().empty());
}

TEST_CASE("hash-signature stops at the first malformed line, naming it, exit 2", "[tools]") {
  std::istringstream in("{\"a\":1}\n{\"a\":2}\n{\"a\":\n{\"a\":3}\n");
  std::ostringstream out, err;
  CHECK(hash_signature(in, out, err) == 2);
  CHECK(out.str() ==
        lingprobe::format::sha256_hex(R"({"a":1})") + "\n" + lingprobe::format::sha256_hex(R"({"a":2})") + "\n");
  CHECK(err.str().find("line 3") != std::string::npos);
}

TEST_CASE("hash-signature refuses a JSON value that is not an object", "[tools]") {
  std::istringstream in("[1,2]\n");
  std::ostringstream out, err;
  CHECK(hash_signature(in, out, err) == 2);
  CHECK(out.str().empty());
  CHECK(err.str().find("line 1") != std::string::npos);
  CHECK(err.str().find("JSON object") != std::string::npos);
}

TEST_CASE("hash-signature reproduces every seed signature_sha256", "[tools][seed]") {
  auto seed =
      lingprobe::format::parse_json(lingprobe::test::read_file(lingprobe::test::seed_path("coverage_audit.seed.json")));
  REQUIRE(seed.status.ok());
  std::string input, expected;
  for (const auto& row : seed.value.find("rows")->items()) {
    // Pretty-printed with a different key order: the tool must not care.
    std::string line;
    lingprobe::format::write_canonical_json(*row.find("signature"), line);
    for (auto& c : line)
      if (c == ',') c = ';';  // placeholder so we can add spaces below
    std::string spaced;
    for (char c : line)
      spaced += (c == ';') ? std::string(" ,  ") : (c == ':' ? std::string(" : ") : std::string(1, c));
    input += spaced + "\n";
    expected += row.find("signature_sha256")->as_string() + "\n";
  }
  std::istringstream in(input);
  std::ostringstream out, err;
  CHECK(hash_signature(in, out, err) == 0);
  CHECK(out.str() == expected);
}
