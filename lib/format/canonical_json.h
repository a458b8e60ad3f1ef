// Canonical JSON text, byte-identical to Python's
//   json.dumps(value, sort_keys=True, separators=(",", ":"))
// (ensure_ascii on: every code point outside ' '..'~' is written as a \uXXXX
// escape with lowercase hex, astral ones as surrogate pairs; floats as repr;
// NaN/Infinity/-Infinity bare, as Python writes them). This text is what
// signature_sha256 hashes (SPEC section 3).
#pragma once

#include <string>

#include "format/json_value.h"

namespace lingprobe::format {

// Appends the canonical text of `value` to `out`.
void write_canonical_json(const JsonValue& value, std::string& out);
std::string canonical_json(const JsonValue& value);

// Appends `utf8` as a JSON string literal (quotes included), escaped as
// Python's ensure_ascii does. Invalid UTF-8 bytes are written as \ufffd.
void write_json_string(const std::string& utf8, std::string& out);

// Python's json.dumps(value, indent=2) (ensure_ascii, keys in insertion
// order): the layout of the seed reports. Ends without a newline.
std::string pretty_json(const JsonValue& value);

// Hex SHA-256 of the canonical text of `value`.
std::string canonical_sha256(const JsonValue& value);

}  // namespace lingprobe::format
