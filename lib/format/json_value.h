// A small JSON document model with exactly the value kinds Python's json
// module round-trips: null, bool, int (arbitrary size), float (incl. NaN and
// +-Infinity), string, array, object. Used for signatures (built once per
// first sighting) and for re-canonicalising JSON read from files. Not used on
// the per-call hot path.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lingprobe::format {

class JsonValue {
 public:
  enum class Kind { Null, Bool, Int, BigInt, Float, String, Array, Object };
  using Member = std::pair<std::string, JsonValue>;

  JsonValue() = default;  // null
  static JsonValue null() { return {}; }
  static JsonValue boolean(bool b);
  static JsonValue integer(int64_t i);
  // Decimal digits of an integer outside int64 (as Python keeps them),
  // optionally with a leading '-'. The caller guarantees the form.
  static JsonValue big_integer(std::string digits);
  static JsonValue floating(double d);
  static JsonValue string(std::string utf8);
  static JsonValue array(std::vector<JsonValue> items = {});
  static JsonValue object(std::vector<Member> members = {});

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::Null; }
  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }
  double as_float() const { return float_; }
  // String contents (Kind::String) or digits (Kind::BigInt). Strings are
  // UTF-8, or WTF-8 where JSON input carried a lone surrogate escape.
  const std::string& as_string() const { return text_; }
  const std::vector<JsonValue>& items() const { return items_; }
  std::vector<JsonValue>& items() { return items_; }
  const std::vector<Member>& members() const { return members_; }

  // Object access: sets (replacing an existing key, as a Python dict does)
  // or finds a member; find returns nullptr when absent or not an object.
  void set(std::string key, JsonValue value);
  const JsonValue* find(const std::string& key) const;
  void push_back(JsonValue value) { items_.push_back(std::move(value)); }

  friend bool operator==(const JsonValue& a, const JsonValue& b);
  friend bool operator!=(const JsonValue& a, const JsonValue& b) { return !(a == b); }

 private:
  Kind kind_ = Kind::Null;
  bool bool_ = false;
  int64_t int_ = 0;
  double float_ = 0.0;
  std::string text_;
  std::vector<JsonValue> items_;
  std::vector<Member> members_;
};

}  // namespace lingprobe::format
