#include "format/canonical_json.h"

#include <algorithm>
#include <cmath>

#include "format/float_repr.h"
#include "format/sha256.h"

namespace lingprobe::format {
namespace {

const char kHex[] = "0123456789abcdef";

void write_u_escape(unsigned cp, std::string& out) {
  out += "\\u";
  out.push_back(kHex[(cp >> 12) & 0xF]);
  out.push_back(kHex[(cp >> 8) & 0xF]);
  out.push_back(kHex[(cp >> 4) & 0xF]);
  out.push_back(kHex[cp & 0xF]);
}

// Decodes one UTF-8 (or WTF-8) sequence at s[i]; returns the code point and
// advances i, or returns 0xFFFD and advances one byte on invalid input.
unsigned decode_utf8(const std::string& s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  int len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
  if (len == 0 || i + len > s.size()) {
    ++i;
    return 0xFFFD;
  }
  unsigned cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  static const unsigned kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF) {
    ++i;
    return 0xFFFD;
  }
  i += len;
  return cp;
}

void write_float(double d, std::string& out) {
  if (std::isnan(d)) {
    out += "NaN";
  } else if (std::isinf(d)) {
    out += d < 0 ? "-Infinity" : "Infinity";
  } else {
    out += python_float_repr(d);
  }
}

}  // namespace

void write_json_string(const std::string& utf8, std::string& out) {
  out.push_back('"');
  size_t i = 0;
  while (i < utf8.size()) {
    const auto c = static_cast<unsigned char>(utf8[i]);
    if (c >= 0x20 && c < 0x7F) {
      if (c == '"' || c == '\\') out.push_back('\\');
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    unsigned cp = decode_utf8(utf8, i);
    switch (cp) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp > 0xFFFF) {
          cp -= 0x10000;
          write_u_escape(0xD800 | (cp >> 10), out);
          write_u_escape(0xDC00 | (cp & 0x3FF), out);
        } else {
          write_u_escape(cp, out);
        }
    }
  }
  out.push_back('"');
}

void write_canonical_json(const JsonValue& value, std::string& out) {
  switch (value.kind()) {
    case JsonValue::Kind::Null: out += "null"; return;
    case JsonValue::Kind::Bool: out += value.as_bool() ? "true" : "false"; return;
    case JsonValue::Kind::Int: out += std::to_string(value.as_int()); return;
    case JsonValue::Kind::BigInt: out += value.as_string(); return;
    case JsonValue::Kind::Float: write_float(value.as_float(), out); return;
    case JsonValue::Kind::String: write_json_string(value.as_string(), out); return;
    case JsonValue::Kind::Array: {
      out.push_back('[');
      bool first = true;
      for (const auto& item : value.items()) {
        if (!first) out.push_back(',');
        first = false;
        write_canonical_json(item, out);
      }
      out.push_back(']');
      return;
    }
    case JsonValue::Kind::Object: {
      // Python sorts str keys by code point; byte order of UTF-8 agrees.
      std::vector<const JsonValue::Member*> sorted;
      sorted.reserve(value.members().size());
      for (const auto& m : value.members()) sorted.push_back(&m);
      std::sort(sorted.begin(), sorted.end(),
                [](const JsonValue::Member* a, const JsonValue::Member* b) { return a->first < b->first; });
      out.push_back('{');
      bool first = true;
      for (const auto* m : sorted) {
        if (!first) out.push_back(',');
        first = false;
        write_json_string(m->first, out);
        out.push_back(':');
        write_canonical_json(m->second, out);
      }
      out.push_back('}');
      return;
    }
  }
}

namespace {

void write_pretty(const JsonValue& value, std::string& out, int depth) {
  auto newline = [&](int d) {
    out.push_back('\n');
    out.append(static_cast<size_t>(d) * 2, ' ');
  };
  switch (value.kind()) {
    case JsonValue::Kind::Array: {
      if (value.items().empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      bool first = true;
      for (const auto& item : value.items()) {
        if (!first) out.push_back(',');
        first = false;
        newline(depth + 1);
        write_pretty(item, out, depth + 1);
      }
      newline(depth);
      out.push_back(']');
      return;
    }
    case JsonValue::Kind::Object: {
      if (value.members().empty()) {
        out += "{}";
        return;
      }
      out.push_back('{');
      bool first = true;
      for (const auto& m : value.members()) {
        if (!first) out.push_back(',');
        first = false;
        newline(depth + 1);
        write_json_string(m.first, out);
        out += ": ";
        write_pretty(m.second, out, depth + 1);
      }
      newline(depth);
      out.push_back('}');
      return;
    }
    default: write_canonical_json(value, out);
  }
}

}  // namespace

std::string pretty_json(const JsonValue& value) {
  std::string out;
  write_pretty(value, out, 0);
  return out;
}

std::string canonical_json(const JsonValue& value) {
  std::string out;
  write_canonical_json(value, out);
  return out;
}

std::string canonical_sha256(const JsonValue& value) { return sha256_hex(canonical_json(value)); }

}  // namespace lingprobe::format
