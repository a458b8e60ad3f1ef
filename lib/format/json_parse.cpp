#include "format/json_parse.h"

#include <fstream>
#include <limits>
#include <sstream>
#include <cstdlib>
#include <cerrno>
#include <locale.h>

namespace lingprobe::format {
namespace {

constexpr int kMaxDepth = 512;

void append_utf8(unsigned cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {  // includes lone surrogates (WTF-8)
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

double parse_c_double(const std::string& literal) {
  static locale_t c_locale = newlocale(LC_ALL_MASK, "C", nullptr);
  return strtod_l(literal.c_str(), nullptr, c_locale);
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  JsonParseResult run() {
    JsonParseResult r;
    skip_ws();
    if (!parse_value(r.value, 0)) {
      r.status = Status(code_, error_);
      r.offset = pos_;
      return r;
    }
    skip_ws();
    if (pos_ != s_.size()) {
      r.status = Status(StatusCode::kBadInput, "extra data after the JSON value");
      r.offset = pos_;
      return r;
    }
    return r;
  }

 private:
  bool fail(const char* what, StatusCode code = StatusCode::kBadInput) {
    error_ = what;
    code_ = code;
    return false;
  }
  bool at_end() const { return pos_ >= s_.size(); }
  char peek() const { return at_end() ? '\0' : s_[pos_]; }
  void skip_ws() {
    while (!at_end() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool consume_word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }

  bool parse_value(JsonValue& out, int depth) {
    if (depth > kMaxDepth) return fail("nesting deeper than 512 levels", StatusCode::kTooLarge);
    switch (peek()) {
      case '{': return parse_object(out, depth);
      case '[': return parse_array(out, depth);
      case '"': {
        std::string s;
        if (!parse_string(s)) return false;
        out = JsonValue::string(std::move(s));
        return true;
      }
      case 't':
        if (consume_word("true")) {
          out = JsonValue::boolean(true);
          return true;
        }
        break;
      case 'f':
        if (consume_word("false")) {
          out = JsonValue::boolean(false);
          return true;
        }
        break;
      case 'n':
        if (consume_word("null")) {
          out = JsonValue::null();
          return true;
        }
        break;
      case 'N':
        if (consume_word("NaN")) {
          out = JsonValue::floating(std::numeric_limits<double>::quiet_NaN());
          return true;
        }
        break;
      case 'I':
        if (consume_word("Infinity")) {
          out = JsonValue::floating(std::numeric_limits<double>::infinity());
          return true;
        }
        break;
      case '-':
        if (consume_word("-Infinity")) {
          out = JsonValue::floating(-std::numeric_limits<double>::infinity());
          return true;
        }
        return parse_number(out);
      default:
        if (peek() >= '0' && peek() <= '9') return parse_number(out);
    }
    return fail("expecting a value");
  }

  bool parse_number(JsonValue& out) {
    const size_t start = pos_;
    auto digit = [&] { return !at_end() && s_[pos_] >= '0' && s_[pos_] <= '9'; };
    if (peek() == '-') ++pos_;
    if (!digit()) return fail("expecting a value");
    if (s_[pos_] == '0') {
      ++pos_;
    } else {
      while (digit()) ++pos_;
    }
    bool is_float = false;
    if (peek() == '.' && pos_ + 1 < s_.size() && s_[pos_ + 1] >= '0' && s_[pos_ + 1] <= '9') {
      is_float = true;
      ++pos_;
      while (digit()) ++pos_;
    }
    if (peek() == 'e' || peek() == 'E') {
      size_t save = pos_;
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      if (digit()) {
        is_float = true;
        while (digit()) ++pos_;
      } else {
        pos_ = save;  // Python leaves a dangling 'e' as extra data
      }
    }
    std::string literal(s_.substr(start, pos_ - start));
    if (is_float) {
      out = JsonValue::floating(parse_c_double(literal));
      return true;
    }
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(literal.c_str(), &end, 10);
    if (errno == ERANGE) {
      out = JsonValue::big_integer(literal);
    } else {
      out = JsonValue::integer(v);
    }
    return true;
  }

  bool parse_hex4(unsigned& cp) {
    if (pos_ + 4 > s_.size()) return fail("truncated \\u escape");
    cp = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_ + i];
      cp <<= 4;
      if (c >= '0' && c <= '9')
        cp |= c - '0';
      else if (c >= 'a' && c <= 'f')
        cp |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        cp |= c - 'A' + 10;
      else
        return fail("invalid \\u escape");
    }
    pos_ += 4;
    return true;
  }

  bool copy_utf8_sequence(std::string& out) {
    const auto b0 = static_cast<unsigned char>(s_[pos_]);
    int len = (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || pos_ + len > s_.size()) return fail("invalid UTF-8");
    unsigned cp = len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s_[pos_ + k]);
      if ((b & 0xC0) != 0x80) return fail("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    static const unsigned kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return fail("invalid UTF-8");
    out.append(s_.substr(pos_, len));
    pos_ += len;
    return true;
  }

  bool parse_string(std::string& out) {
    ++pos_;  // opening quote
    for (;;) {
      if (at_end()) return fail("unterminated string");
      const auto c = static_cast<unsigned char>(s_[pos_]);
      if (c == '"') {
        ++pos_;
        return true;
      }
      if (c < 0x20) return fail("invalid control character in string");
      if (c >= 0x80) {
        if (!copy_utf8_sequence(out)) return false;
        continue;
      }
      if (c != '\\') {
        out.push_back(static_cast<char>(c));
        ++pos_;
        continue;
      }
      ++pos_;
      if (at_end()) return fail("unterminated string");
      char e = s_[pos_++];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          unsigned cp;
          if (!parse_hex4(cp)) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF && s_.substr(pos_, 2) == "\\u") {
            size_t save = pos_;
            pos_ += 2;
            unsigned lo;
            if (!parse_hex4(lo)) return false;
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            } else {
              pos_ = save;  // lone high surrogate; the next escape stands alone
            }
          }
          append_utf8(cp, out);
          break;
        }
        default: --pos_; return fail("invalid escape in string");
      }
    }
  }

  bool parse_array(JsonValue& out, int depth) {
    ++pos_;
    out = JsonValue::array();
    skip_ws();
    if (peek() == ']') {
      ++pos_;
      return true;
    }
    for (;;) {
      skip_ws();
      JsonValue item;
      if (!parse_value(item, depth + 1)) return false;
      out.push_back(std::move(item));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return true;
      }
      return fail("expecting ',' or ']' in array");
    }
  }

  bool parse_object(JsonValue& out, int depth) {
    ++pos_;
    out = JsonValue::object();
    skip_ws();
    if (peek() == '}') {
      ++pos_;
      return true;
    }
    for (;;) {
      skip_ws();
      if (peek() != '"') return fail("expecting a property name in double quotes");
      std::string key;
      if (!parse_string(key)) return false;
      skip_ws();
      if (peek() != ':') return fail("expecting ':' after object key");
      ++pos_;
      skip_ws();
      JsonValue value;
      if (!parse_value(value, depth + 1)) return false;
      out.set(std::move(key), std::move(value));
      skip_ws();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        return true;
      }
      return fail("expecting ',' or '}' in object");
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
  std::string error_;
  StatusCode code_ = StatusCode::kBadInput;
};

}  // namespace

JsonParseResult parse_json(std::string_view text) { return Parser(text).run(); }

bool parse_json_file(const std::string& path, JsonValue& out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  JsonParseResult r = parse_json(ss.str());
  if (!r.status.ok()) return false;
  out = std::move(r.value);
  return true;
}

}  // namespace lingprobe::format
