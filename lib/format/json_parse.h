// A JSON reader with Python json.loads semantics, so that text re-written by
// canonical_json() hashes exactly as Python would hash it: NaN, Infinity and
// -Infinity are accepted; integers keep arbitrary size; a number with a
// fraction or exponent is a float (correctly rounded, overflow to +-inf);
// duplicate keys keep the last value; \uD83D\uDE00 pairs join, lone
// surrogates are kept (WTF-8); raw control characters in strings and invalid
// UTF-8 are errors. Used at first sightings and in tools, never per call.
#pragma once

#include <string>
#include <string_view>

#include "format/json_value.h"
#include "format/status.h"

namespace lingprobe::format {

struct JsonParseResult {
  JsonValue value;
  // ok, or what was wrong, e.g. "expecting ':' after object key": kBadInput, kTooLarge (nested over 512 levels)
  Status status;
  size_t offset = 0;  // byte offset of the error in the input
};

// Parses exactly one JSON value surrounded by optional whitespace.
JsonParseResult parse_json(std::string_view text);

// A whole file as one JSON value into `out`; false (out unchanged) when it
// cannot be read or does not parse.
bool parse_json_file(const std::string& path, JsonValue& out);

}  // namespace lingprobe::format
