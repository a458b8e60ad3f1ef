#include <catch2/catch.hpp>

#include <cmath>

#include "format/json_parse.h"

using namespace lingprobe::format;

TEST_CASE("parse_json reads Python's json extensions", "[format][parse]") {
  auto r = parse_json(R"([NaN, Infinity, -Infinity, 1, 1.0, 1e2, -0, 99999999999999999999])");
  REQUIRE(r.status.ok());
  const auto& items = r.value.items();
  CHECK(std::isnan(items[0].as_float()));
  CHECK(items[1].as_float() == INFINITY);
  CHECK(items[2].as_float() == -INFINITY);
  CHECK(items[3].kind() == JsonValue::Kind::Int);
  CHECK(items[4].kind() == JsonValue::Kind::Float);
  CHECK(items[5].as_float() == 100.0);
  CHECK(items[6].as_int() == 0);
  CHECK(items[7].kind() == JsonValue::Kind::BigInt);
  CHECK(items[7].as_string() == "99999999999999999999");
}

TEST_CASE("parse_json keeps the last of duplicate keys", "[format][parse]") {
  auto r = parse_json(R"({"a":1,"a":2})");
  REQUIRE(r.status.ok());
  CHECK(r.value.members().size() == 1);
  CHECK(r.value.find("a")->as_int() == 2);
}

TEST_CASE("parse_json rejects malformed input with a position", "[format][parse]") {
  struct Case {
    const char* text;
    size_t offset;
  };
  const Case cases[] = {
      {"", 0},        {"{", 1},   {"{\"a\":}", 5}, {"[1,]", 3},        {"{\"a\" 1}", 5},
      {"01", 1},      {"1.", 1},  {"\"abc", 4},    {"\"a\tb\"", 2},    {"[1] x", 4},
      {"{'a':1}", 1}, {"tru", 0}, {"\"\\x\"", 2},  {"\"\\u12G4\"", 3}, {"nan", 0},
  };
  for (const auto& c : cases) {
    INFO("text: " << c.text);
    auto r = parse_json(c.text);
    CHECK_FALSE(r.status.ok());
    CHECK_FALSE(r.status.message().empty());
    CHECK(r.status.code() == StatusCode::kBadInput);
    CHECK(r.offset == c.offset);
  }
}

TEST_CASE("parse_json rejects invalid UTF-8 and runaway nesting", "[format][parse]") {
  CHECK_FALSE(parse_json("\"\xff\"").status.ok());
  CHECK_FALSE(parse_json("\"\xed\xa0\x80\"").status.ok());  // an encoded surrogate is not UTF-8
  CHECK_FALSE(parse_json(std::string(2000, '[') + std::string(2000, ']')).status.ok());
  CHECK(parse_json(std::string(2000, '[') + std::string(2000, ']')).status.code() == StatusCode::kTooLarge);
  CHECK(parse_json(std::string(100, '[') + std::string(100, ']')).status.ok());
}
