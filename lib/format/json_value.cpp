#include "format/json_value.h"

namespace lingprobe::format {

JsonValue JsonValue::boolean(bool b) {
  JsonValue v;
  v.kind_ = Kind::Bool;
  v.bool_ = b;
  return v;
}

JsonValue JsonValue::integer(int64_t i) {
  JsonValue v;
  v.kind_ = Kind::Int;
  v.int_ = i;
  return v;
}

JsonValue JsonValue::big_integer(std::string digits) {
  JsonValue v;
  v.kind_ = Kind::BigInt;
  v.text_ = std::move(digits);
  return v;
}

JsonValue JsonValue::floating(double d) {
  JsonValue v;
  v.kind_ = Kind::Float;
  v.float_ = d;
  return v;
}

JsonValue JsonValue::string(std::string utf8) {
  JsonValue v;
  v.kind_ = Kind::String;
  v.text_ = std::move(utf8);
  return v;
}

JsonValue JsonValue::array(std::vector<JsonValue> items) {
  JsonValue v;
  v.kind_ = Kind::Array;
  v.items_ = std::move(items);
  return v;
}

JsonValue JsonValue::object(std::vector<Member> members) {
  JsonValue v;
  v.kind_ = Kind::Object;
  for (auto& m : members) v.set(std::move(m.first), std::move(m.second));
  return v;
}

void JsonValue::set(std::string key, JsonValue value) {
  for (auto& m : members_) {
    if (m.first == key) {
      m.second = std::move(value);
      return;
    }
  }
  members_.emplace_back(std::move(key), std::move(value));
}

const JsonValue* JsonValue::find(const std::string& key) const {
  if (kind_ != Kind::Object) return nullptr;
  for (const auto& m : members_)
    if (m.first == key) return &m.second;
  return nullptr;
}

bool operator==(const JsonValue& a, const JsonValue& b) {
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case JsonValue::Kind::Null: return true;
    case JsonValue::Kind::Bool: return a.bool_ == b.bool_;
    case JsonValue::Kind::Int: return a.int_ == b.int_;
    case JsonValue::Kind::Float: return a.float_ == b.float_ || (a.float_ != a.float_ && b.float_ != b.float_);
    case JsonValue::Kind::BigInt:
    case JsonValue::Kind::String: return a.text_ == b.text_;
    case JsonValue::Kind::Array: return a.items_ == b.items_;
    case JsonValue::Kind::Object: {
      if (a.members_.size() != b.members_.size()) return false;
      for (const auto& m : a.members_) {
        const JsonValue* other = b.find(m.first);
        if (!other || !(*other == m.second)) return false;
      }
      return true;
    }
  }
  return false;
}

}  // namespace lingprobe::format
