#include "format/pickle.h"

#include <algorithm>
#include <cstring>

namespace lingprobe::format {
namespace {

// Opcodes (pickletools' names).
constexpr char PROTO = '\x80', STOP = '.', MARK = '(', EMPTY_DICT = '}', EMPTY_LIST = ']', EMPTY_TUPLE = ')',
               SETITEMS = 'u', SETITEM = 's', APPENDS = 'e', APPEND = 'a', TUPLE = 't', TUPLE1 = '\x85',
               TUPLE2 = '\x86', TUPLE3 = '\x87', BININT = 'J', BININT1 = 'K', BININT2 = 'M', LONG1 = '\x8a',
               NEWTRUE = '\x88', NEWFALSE = '\x89', NONE = 'N', BINUNICODE = 'X', GLOBAL = 'c', REDUCE = 'R',
               BINPERSID = 'Q', BINPUT = 'q', LONG_BINPUT = 'r', BINGET = 'h', LONG_BINGET = 'j';

void put_int(std::string& out, int64_t v) {
  if (v >= 0 && v < 256) {
    out.push_back(BININT1);
    out.push_back(static_cast<char>(v));
  } else if (v >= 0 && v < 65536) {
    out.push_back(BININT2);
    out.push_back(static_cast<char>(v & 0xFF));
    out.push_back(static_cast<char>(v >> 8));
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out.push_back(BININT);
    const uint32_t u = static_cast<uint32_t>(static_cast<int32_t>(v));
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
  } else {
    // LONG1: little-endian two's complement, as few bytes as keep the sign.
    unsigned char bytes[9];
    int n = 0;
    uint64_t u = static_cast<uint64_t>(v);
    for (int i = 0; i < 8; ++i) bytes[n++] = static_cast<unsigned char>((u >> (8 * i)) & 0xFF);
    while (n > 1 &&
           ((bytes[n - 1] == 0x00 && !(bytes[n - 2] & 0x80)) || (bytes[n - 1] == 0xFF && (bytes[n - 2] & 0x80))))
      --n;
    out.push_back(LONG1);
    out.push_back(static_cast<char>(n));
    out.append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(n));
  }
}

void put_str(std::string& out, const std::string& s) {
  out.push_back(BINUNICODE);
  const uint32_t n = static_cast<uint32_t>(s.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xFF));
  out += s;
}

void put_global(std::string& out, const char* module, const std::string& name) {
  out.push_back(GLOBAL);
  out += module;
  out.push_back('\n');
  out += name;
  out.push_back('\n');
}

void put_int_tuple(std::string& out, const std::vector<int64_t>& v) {
  if (v.empty()) {
    out.push_back(EMPTY_TUPLE);
    return;
  }
  if (v.size() > 3) out.push_back(MARK);
  for (int64_t x : v) put_int(out, x);
  if (v.size() == 1)
    out.push_back(TUPLE1);
  else if (v.size() == 2)
    out.push_back(TUPLE2);
  else if (v.size() == 3)
    out.push_back(TUPLE3);
  else
    out.push_back(TUPLE);
}

void put(std::string& out, const PickleValue& v) {
  switch (v.kind()) {
    case PickleValue::Kind::None: out.push_back(NONE); break;
    case PickleValue::Kind::Bool: out.push_back(v.as_bool() ? NEWTRUE : NEWFALSE); break;
    case PickleValue::Kind::Int: put_int(out, v.as_int()); break;
    case PickleValue::Kind::String: put_str(out, v.as_string()); break;
    case PickleValue::Kind::List:
      out.push_back(EMPTY_LIST);
      if (!v.items().empty()) {
        out.push_back(MARK);
        for (const auto& x : v.items()) put(out, x);
        out.push_back(APPENDS);
      }
      break;
    case PickleValue::Kind::Tuple:
      if (v.items().empty()) {
        out.push_back(EMPTY_TUPLE);
      } else {
        out.push_back(MARK);
        for (const auto& x : v.items()) put(out, x);
        out.push_back(TUPLE);
      }
      break;
    case PickleValue::Kind::Dict:
      out.push_back(EMPTY_DICT);
      if (!v.entries().empty()) {
        out.push_back(MARK);
        for (const auto& [k, x] : v.entries()) {
          put_str(out, k);
          put(out, x);
        }
        out.push_back(SETITEMS);
      }
      break;
    case PickleValue::Kind::Tensor: {
      const PickleTensor& t = v.as_tensor();
      put_global(out, "torch._utils", "_rebuild_tensor_v2");
      out.push_back(MARK);
      out.push_back(MARK);  // the persistent id
      put_str(out, "storage");
      put_global(out, "torch", t.storage_class);
      put_str(out, t.storage_key);
      put_str(out, "cpu");
      put_int(out, t.storage_numel);
      out.push_back(TUPLE);
      out.push_back(BINPERSID);
      put_int(out, t.storage_offset);
      put_int_tuple(out, t.size);
      put_int_tuple(out, t.stride);
      out.push_back(NEWFALSE);  // requires_grad
      put_global(out, "collections", "OrderedDict");
      out.push_back(EMPTY_TUPLE);
      out.push_back(REDUCE);  // backward hooks: OrderedDict()
      out.push_back(TUPLE);
      out.push_back(REDUCE);
      break;
    }
  }
}

// ---- reader -------------------------------------------------------------------

struct Global {
  std::string module, name;
};

// A stack cell: a value, a global, or a persistent storage reference.
struct Cell {
  enum class Kind { Value, Global, Storage, Mark } kind = Kind::Value;
  PickleValue value;
  int depth = 0;  // of nested containers in `value` (bounded: the destructor recurses)
  Global global;
  PickleTensor storage;  // storage_class, key, numel
};

class Reader {
 public:
  explicit Reader(const std::string& b) : b_(b) {}

  Status run(PickleValue& out) {
    if (b_.size() < 2 || b_[0] != PROTO) return Status(StatusCode::kBadInput, "not a pickle (no PROTO opcode)");
    pos_ = 2;
    while (pos_ < b_.size()) {
      const size_t at = pos_;
      const char op = b_[pos_++];
      if (std::string err = step(op, out); !err.empty())
        return Status(over_limit_ ? StatusCode::kTooLarge : StatusCode::kBadInput,
                      "pickle offset " + std::to_string(at) + ": " + err);
      if (stopped_) return Status::Ok();
    }
    return Status(StatusCode::kBadInput, "truncated (no STOP)");
  }

 private:
  const char* over_limit(const char* what) {  // a limit's error: kTooLarge
    over_limit_ = true;
    return what;
  }
  bool need(size_t n) { return pos_ <= b_.size() && n <= b_.size() - pos_; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<unsigned char>(b_[pos_ + i])) << (8 * i);
    pos_ += 4;
    return v;
  }
  std::string line(std::string& out) {
    const size_t nl = b_.find('\n', pos_);
    if (nl == std::string::npos || nl - pos_ > 256) return "malformed GLOBAL";
    out = b_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return "";
  }
  std::string push(PickleValue v, int depth = 0) {
    if (++count_ > 10000000) return over_limit("too many items");
    if (depth > kMaxDepth) return over_limit("nested too deeply");
    Cell c;
    c.value = std::move(v);
    c.depth = depth;
    stack_.push_back(std::move(c));
    return "";
  }
  static constexpr int kMaxDepth = 64;
  std::string pop_mark(std::vector<Cell>& items) {
    size_t m = stack_.size();
    while (m > 0 && stack_[m - 1].kind != Cell::Kind::Mark) --m;
    if (m == 0) return "no MARK";
    items.assign(std::make_move_iterator(stack_.begin() + static_cast<long>(m)), std::make_move_iterator(stack_.end()));
    stack_.resize(m - 1);
    --marks_;
    return "";
  }
  std::string top_value(PickleValue*& v) {
    if (stack_.empty() || stack_.back().kind != Cell::Kind::Value) return "stack underflow";
    v = &stack_.back().value;
    return "";
  }
  static bool int_tuple(const PickleValue& v, std::vector<int64_t>& out) {
    if (v.kind() != PickleValue::Kind::Tuple) return false;
    out.clear();
    for (const auto& x : v.items()) {
      if (x.kind() != PickleValue::Kind::Int) return false;
      out.push_back(x.as_int());
    }
    return true;
  }

  std::string step(char op, PickleValue& out) {
    switch (op) {
      case STOP:
        if (stack_.size() != 1 || stack_[0].kind != Cell::Kind::Value) return "STOP with a malformed stack";
        out = std::move(stack_[0].value);
        stopped_ = true;
        return "";
      case MARK: {
        if (++marks_ > 64) return over_limit("nested too deeply");
        Cell c;
        c.kind = Cell::Kind::Mark;
        stack_.push_back(std::move(c));
        return "";
      }
      case EMPTY_DICT: return push(PickleValue::dict());
      case EMPTY_LIST: return push(PickleValue::list());
      case EMPTY_TUPLE: return push(PickleValue::tuple());
      case NONE: return push(PickleValue::none());
      case NEWTRUE: return push(PickleValue::boolean(true));
      case NEWFALSE: return push(PickleValue::boolean(false));
      case BININT1:
        if (!need(1)) return "truncated";
        return push(PickleValue::integer(static_cast<unsigned char>(b_[pos_++])));
      case BININT2: {
        if (!need(2)) return "truncated";
        const int v = static_cast<unsigned char>(b_[pos_]) | (static_cast<unsigned char>(b_[pos_ + 1]) << 8);
        pos_ += 2;
        return push(PickleValue::integer(v));
      }
      case BININT:
        if (!need(4)) return "truncated";
        return push(PickleValue::integer(static_cast<int32_t>(u32())));
      case LONG1: {
        if (!need(1)) return "truncated";
        const size_t n = static_cast<unsigned char>(b_[pos_++]);
        if (n > 8 || !need(n)) return n > 8 ? "integer wider than 64 bits" : "truncated";
        uint64_t u = 0;
        for (size_t i = 0; i < n; ++i) u |= static_cast<uint64_t>(static_cast<unsigned char>(b_[pos_ + i])) << (8 * i);
        if (n > 0 && n < 8 && (static_cast<unsigned char>(b_[pos_ + n - 1]) & 0x80)) u |= ~0ull << (8 * n);
        pos_ += n;
        return push(PickleValue::integer(static_cast<int64_t>(u)));
      }
      case BINUNICODE: {
        if (!need(4)) return "truncated";
        const uint32_t n = u32();
        if (n > (256u << 20)) return over_limit("string too long or truncated");
        if (!need(n)) return "string too long or truncated";
        std::string s = b_.substr(pos_, n);
        pos_ += n;
        return push(PickleValue::string(std::move(s)));
      }
      case GLOBAL: {
        Cell c;
        c.kind = Cell::Kind::Global;
        if (auto e = line(c.global.module); !e.empty()) return e;
        if (auto e = line(c.global.name); !e.empty()) return e;
        stack_.push_back(std::move(c));
        return "";
      }
      case TUPLE1:
      case TUPLE2:
      case TUPLE3: {
        const size_t n = static_cast<size_t>(op - TUPLE1 + 1);
        if (stack_.size() < n) return "stack underflow";
        std::vector<PickleValue> items;
        int depth = 0;
        for (size_t i = stack_.size() - n; i < stack_.size(); ++i) {
          if (stack_[i].kind != Cell::Kind::Value) return "tuple of non-values";
          depth = std::max(depth, stack_[i].depth + 1);
          items.push_back(std::move(stack_[i].value));
        }
        stack_.resize(stack_.size() - n);
        return push(PickleValue::tuple(std::move(items)), depth);
      }
      case TUPLE: {
        std::vector<Cell> cells;
        if (auto e = pop_mark(cells); !e.empty()) return e;
        // A persistent id: ('storage', GLOBAL torch.<Type>Storage, key, location, numel).
        if (cells.size() == 5 && cells[1].kind == Cell::Kind::Global) {
          Cell c;
          c.kind = Cell::Kind::Storage;
          const auto& v = cells;
          auto is = [&](size_t i, PickleValue::Kind k) {
            return v[i].kind == Cell::Kind::Value && v[i].value.kind() == k;
          };
          if (!is(0, PickleValue::Kind::String) || v[0].value.as_string() != "storage" ||
              v[1].global.module != "torch" || !is(2, PickleValue::Kind::String) || !is(3, PickleValue::Kind::String) ||
              !is(4, PickleValue::Kind::Int) || v[4].value.as_int() < 0)
            return "malformed storage reference";
          c.storage.storage_class = v[1].global.name;
          c.storage.storage_key = v[2].value.as_string();
          c.storage.storage_numel = v[4].value.as_int();
          stack_.push_back(std::move(c));
          return "";
        }
        std::vector<PickleValue> items;
        int depth = 0;
        for (auto& c : cells) {
          depth = std::max(depth, c.depth + 1);
          if (c.kind == Cell::Kind::Value)
            items.push_back(std::move(c.value));
          else if (c.kind == Cell::Kind::Storage) {
            // inside the arguments of _rebuild_tensor_v2: keep as a tensor placeholder
            items.push_back(PickleValue::tensor(c.storage));
          } else if (c.kind == Cell::Kind::Global) {
            PickleValue g = PickleValue::string(c.global.module + "." + c.global.name);
            items.push_back(PickleValue::dict({{"__global__", std::move(g)}}));
          } else {
            return "malformed tuple";
          }
        }
        return push(PickleValue::tuple(std::move(items)), depth);
      }
      case BINPERSID: {
        if (stack_.empty() || stack_.back().kind != Cell::Kind::Storage) return "persistent id is not a storage";
        return "";  // the storage cell stays: _rebuild_tensor_v2's first argument
      }
      case REDUCE: {
        if (stack_.size() < 2) return "stack underflow";
        Cell args = std::move(stack_.back());
        stack_.pop_back();
        Cell fn = std::move(stack_.back());
        stack_.pop_back();
        if (fn.kind != Cell::Kind::Global || args.kind != Cell::Kind::Value ||
            args.value.kind() != PickleValue::Kind::Tuple)
          return "REDUCE of a non-global";
        const std::string name = fn.global.module + "." + fn.global.name;
        if (name == "collections.OrderedDict") {
          if (!args.value.items().empty()) return "OrderedDict with arguments";
          return push(PickleValue::dict());
        }
        if (name != "torch._utils._rebuild_tensor_v2") return "call of " + name + " (not a tensor rebuild)";
        const auto& a = args.value.items();
        if (a.size() < 6 || a[0].kind() != PickleValue::Kind::Tensor || a[1].kind() != PickleValue::Kind::Int)
          return "malformed _rebuild_tensor_v2 arguments";
        PickleTensor t = a[0].as_tensor();
        t.storage_offset = a[1].as_int();
        if (!int_tuple(a[2], t.size) || !int_tuple(a[3], t.stride) || t.size.size() != t.stride.size())
          return "malformed tensor size or stride";
        return push(PickleValue::tensor(std::move(t)));
      }
      case APPEND: {
        if (stack_.size() < 2 || stack_.back().kind != Cell::Kind::Value) return "stack underflow";
        const int depth = stack_.back().depth + 1;
        PickleValue item = std::move(stack_.back().value);
        stack_.pop_back();
        PickleValue* list = nullptr;
        if (auto e = top_value(list); !e.empty()) return e;
        if (list->kind() != PickleValue::Kind::List) return "APPEND to a non-list";
        if (depth > kMaxDepth) return over_limit("nested too deeply");
        stack_.back().depth = std::max(stack_.back().depth, depth);
        list->push_back(std::move(item));
        return "";
      }
      case APPENDS: {
        std::vector<Cell> cells;
        if (auto e = pop_mark(cells); !e.empty()) return e;
        PickleValue* list = nullptr;
        if (auto e = top_value(list); !e.empty()) return e;
        if (list->kind() != PickleValue::Kind::List) return "APPENDS to a non-list";
        for (auto& c : cells) {
          if (c.kind != Cell::Kind::Value) return "APPENDS of a non-value";
          if (c.depth + 1 > kMaxDepth) return over_limit("nested too deeply");
          stack_.back().depth = std::max(stack_.back().depth, c.depth + 1);
          list->push_back(std::move(c.value));
        }
        return "";
      }
      case SETITEM:
      case SETITEMS: {
        std::vector<Cell> cells;
        if (op == SETITEMS) {
          if (auto e = pop_mark(cells); !e.empty()) return e;
        } else {
          if (stack_.size() < 3) return "stack underflow";
          cells.assign(std::make_move_iterator(stack_.end() - 2), std::make_move_iterator(stack_.end()));
          stack_.resize(stack_.size() - 2);
        }
        if (cells.size() % 2) return "odd number of dict items";
        PickleValue* dict = nullptr;
        if (auto e = top_value(dict); !e.empty()) return e;
        if (dict->kind() != PickleValue::Kind::Dict) return "SETITEMS on a non-dict";
        for (size_t i = 0; i < cells.size(); i += 2) {
          if (cells[i].kind != Cell::Kind::Value || cells[i].value.kind() != PickleValue::Kind::String ||
              cells[i + 1].kind != Cell::Kind::Value)
            return "dict key is not a string";
          if (cells[i + 1].depth + 1 > kMaxDepth) return over_limit("nested too deeply");
          stack_.back().depth = std::max(stack_.back().depth, cells[i + 1].depth + 1);
          dict->set(cells[i].value.as_string(), std::move(cells[i + 1].value));
        }
        return "";
      }
      default: {
        char buf[64];
        std::snprintf(buf, sizeof buf, "unsupported opcode 0x%02x", static_cast<unsigned char>(op));
        return buf;
      }
    }
  }

  const std::string& b_;
  size_t pos_ = 0;
  bool stopped_ = false;     // STOP read: the value is out
  bool over_limit_ = false;  // the error is a limit's (kTooLarge)
  size_t count_ = 0;
  int marks_ = 0;
  std::vector<Cell> stack_;
};

}  // namespace

PickleValue PickleValue::boolean(bool b) {
  PickleValue v;
  v.kind_ = Kind::Bool;
  v.b_ = b;
  return v;
}
PickleValue PickleValue::integer(int64_t i) {
  PickleValue v;
  v.kind_ = Kind::Int;
  v.i_ = i;
  return v;
}
PickleValue PickleValue::string(std::string s) {
  PickleValue v;
  v.kind_ = Kind::String;
  v.s_ = std::move(s);
  return v;
}
PickleValue PickleValue::list(std::vector<PickleValue> items) {
  PickleValue v;
  v.kind_ = Kind::List;
  v.items_ = std::move(items);
  return v;
}
PickleValue PickleValue::tuple(std::vector<PickleValue> items) {
  PickleValue v;
  v.kind_ = Kind::Tuple;
  v.items_ = std::move(items);
  return v;
}
PickleValue PickleValue::dict(std::vector<Item> items) {
  PickleValue v;
  v.kind_ = Kind::Dict;
  v.entries_ = std::move(items);
  return v;
}
PickleValue PickleValue::tensor(PickleTensor t) {
  PickleValue v;
  v.kind_ = Kind::Tensor;
  v.tensor_ = std::make_shared<PickleTensor>(std::move(t));
  return v;
}

void PickleValue::set(std::string key, PickleValue value) {
  for (auto& [k, x] : entries_)
    if (k == key) {
      x = std::move(value);
      return;
    }
  entries_.emplace_back(std::move(key), std::move(value));
}

const PickleValue* PickleValue::find(const std::string& key) const {
  if (kind_ != Kind::Dict) return nullptr;
  for (const auto& [k, x] : entries_)
    if (k == key) return &x;
  return nullptr;
}

void write_pickle(const PickleValue& value, std::string& out) {
  out.push_back(PROTO);
  out.push_back('\x02');
  put(out, value);
  out.push_back(STOP);
}

Status read_pickle(const std::string& bytes, PickleValue& out) { return Reader(bytes).run(out); }

}  // namespace lingprobe::format
