#include <catch2/catch.hpp>

#include "format/canonical_json.h"
#include "format/json_parse.h"
#include "test_support.h"

using namespace lingprobe::format;

TEST_CASE("all 31 seed signatures hash to their signature_sha256", "[format][seed]") {
  auto parsed = parse_json(lingprobe::test::read_file(lingprobe::test::seed_path("coverage_audit.seed.json")));
  REQUIRE(parsed.status.ok());
  const JsonValue* rows = parsed.value.find("rows");
  REQUIRE(rows);
  REQUIRE(rows->items().size() == 31);
  for (const auto& row : rows->items()) {
    const std::string expected = row.find("signature_sha256")->as_string();
    INFO("row " << expected);
    CHECK(canonical_sha256(*row.find("signature")) == expected);
  }
}
