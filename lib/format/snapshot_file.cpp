#include "format/snapshot_file.h"

#include <cstring>

#include "format/tensor_layout.h"

namespace lingprobe::format {
namespace {

struct DtypeInfo {
  const char* name;
  int64_t size;
  const char* storage;  // "" : stored raw (uint8)
};
constexpr DtypeInfo kDtypes[] = {
    {"torch.float32", 4, "FloatStorage"},
    {"torch.float64", 8, "DoubleStorage"},
    {"torch.float16", 2, "HalfStorage"},
    {"torch.bfloat16", 2, "BFloat16Storage"},
    {"torch.int64", 8, "LongStorage"},
    {"torch.int32", 4, "IntStorage"},
    {"torch.int16", 2, "ShortStorage"},
    {"torch.int8", 1, "CharStorage"},
    {"torch.uint8", 1, "ByteStorage"},
    {"torch.bool", 1, "BoolStorage"},
    {"torch.complex64", 8, "ComplexFloatStorage"},
    {"torch.complex128", 16, "ComplexDoubleStorage"},
    {"torch.complex32", 4, ""},
    {"torch.float8_e4m3fn", 1, ""},
    {"torch.float8_e5m2", 1, ""},
    {"torch.float8_e4m3fnuz", 1, ""},
    {"torch.float8_e5m2fnuz", 1, ""},
    {"torch.uint16", 2, ""},
    {"torch.uint32", 4, ""},
    {"torch.uint64", 8, ""},
};

const DtypeInfo* dtype_info(const std::string& d) {
  for (const auto& e : kDtypes)
    if (d == e.name) return &e;
  return nullptr;
}

PickleValue int_list(const std::vector<int64_t>& v) {
  PickleValue l = PickleValue::list();
  for (int64_t x : v) l.push_back(PickleValue::integer(x));
  return l;
}

bool read_int_list(const PickleValue* v, std::vector<int64_t>& out) {
  if (!v || v->kind() != PickleValue::Kind::List) return false;
  out.clear();
  for (const auto& x : v->items()) {
    if (x.kind() != PickleValue::Kind::Int) return false;
    out.push_back(x.as_int());
  }
  return true;
}

std::string check_tensor(const PickleValue& v, const std::string& path) {
  auto str = [&](const char* k) {
    const PickleValue* x = v.find(k);
    return x && x->kind() == PickleValue::Kind::String ? x : nullptr;
  };
  auto integer = [&](const char* k) {
    const PickleValue* x = v.find(k);
    return x && x->kind() == PickleValue::Kind::Int ? x : nullptr;
  };
  const PickleValue* dtype = str("dtype");
  if (!dtype || !dtype_info(dtype->as_string()))
    return path + ".dtype: " + (dtype ? "'" + dtype->as_string() + "' is not a dtype this build knows" : "missing");
  std::vector<int64_t> shape, stride;
  if (!read_int_list(v.find("shape"), shape) || !read_int_list(v.find("stride"), stride) ||
      shape.size() != stride.size())
    return path + ": shape and stride must be integer lists of one length";
  if (shape.size() > 64) return path + ": more than 64 dimensions";
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] < 0 || stride[i] < 0 || shape[i] > (int64_t(1) << 40) || stride[i] > (int64_t(1) << 48))
      return path + ": negative or absurd shape or stride";
  const PickleValue* offset = integer("storage_offset");
  const PickleValue* align = integer("alignment");
  const PickleValue* layout = str("layout");
  if (!offset || offset->as_int() < 0 || !align || align->as_int() < 0 || !str("device") || !layout ||
      (layout->as_string() != "compact" && layout->as_string() != "span"))
    return path + ": storage_offset, alignment, device and layout (compact or span) are required";
  if (const PickleValue* w = v.find("wrapped_number"); w && (w->kind() != PickleValue::Kind::Bool || !shape.empty()))
    return path + ".wrapped_number: a bool, and only on a 0-dim tensor";
  const PickleValue* data = v.find("data");
  if (!data || data->kind() != PickleValue::Kind::Tensor) return path + ".data: not a tensor";
  const PickleTensor& t = data->as_tensor();
  const bool raw = v.find("raw") && v.find("raw")->kind() == PickleValue::Kind::Bool && v.find("raw")->as_bool();
  const DtypeInfo* di = dtype_info(dtype->as_string());
  const std::string want_class = raw ? "ByteStorage" : di->storage;
  if (want_class.empty()) return path + ": dtype " + dtype->as_string() + " must be stored raw";
  if (t.storage_class != want_class) return path + ".data: storage " + t.storage_class + ", expected " + want_class;
  const int64_t stored = layout->as_string() == "span" ? span_of(shape, stride) : numel_of(shape);
  int64_t want_numel = stored;
  if (stored < 0 || numel_of(t.size) < 0 || (raw && __builtin_mul_overflow(stored, di->size, &want_numel)) ||
      format::span_of(shape, stride) < 0 || offset->as_int() > (int64_t(1) << 48))
    return path + ": its size overflows";
  if (t.storage_numel != want_numel || t.storage_offset != 0 || numel_of(t.size) != want_numel)
    return path + ".data: holds " + std::to_string(t.storage_numel) + " elements, the metadata says " +
           std::to_string(want_numel);
  return "";
}

std::string check_value(const PickleValue& v, const std::string& path, int depth) {
  if (depth > 32) return path + ": nested too deeply";
  switch (v.kind()) {
    case PickleValue::Kind::None:
    case PickleValue::Kind::Bool:
    case PickleValue::Kind::Int:
    case PickleValue::Kind::String: return "";
    case PickleValue::Kind::List:
      for (size_t i = 0; i < v.items().size(); ++i)
        if (auto e = check_value(v.items()[i], path + "[" + std::to_string(i) + "]", depth + 1); !e.empty()) return e;
      return "";
    case PickleValue::Kind::Dict: {
      const PickleValue* kind = v.find("kind");
      if (!kind || kind->kind() != PickleValue::Kind::String) return path + ": a dict value without a kind";
      const std::string& k = kind->as_string();
      if (k == "tensor") return check_tensor(v, path);
      if (k == "tuple") {
        const PickleValue* items = v.find("items");
        if (!items || items->kind() != PickleValue::Kind::List) return path + ": tuple without items";
        return check_value(*items, path + ".items", depth + 1);
      }
      if (k == "float" || k == "dtype" || k == "layout" || k == "memory_format" || k == "device" ||
          k == "unsupported") {
        const PickleValue* r = v.find("repr");
        return r && r->kind() == PickleValue::Kind::String ? "" : path + ": " + k + " without repr";
      }
      if (k == "complex") {
        const PickleValue *re = v.find("real"), *im = v.find("imag");
        return re && im && re->kind() == PickleValue::Kind::String && im->kind() == PickleValue::Kind::String
                   ? ""
                   : path + ": complex without real and imag";
      }
      if (k == "generator") return "";
      return path + ": unknown value kind '" + k + "'";
    }
    default: return path + ": unexpected " + (v.kind() == PickleValue::Kind::Tensor ? "bare tensor" : "tuple");
  }
}

}  // namespace

int64_t dtype_element_size(const std::string& dtype) {
  const DtypeInfo* d = dtype_info(dtype);
  return d ? d->size : 0;
}

std::string dtype_storage_class(const std::string& dtype) {
  const DtypeInfo* d = dtype_info(dtype);
  return d ? d->storage : "";
}

PickleValue typed_value(const std::string& kind, const std::string& repr) {
  return PickleValue::dict({{"kind", PickleValue::string(kind)}, {"repr", PickleValue::string(repr)}});
}

PickleValue tensor_value(const TensorMeta& m, size_t blob_index, int64_t stored_numel) {
  const std::string cls = dtype_storage_class(m.dtype);
  const bool raw = cls.empty();
  PickleTensor data;
  data.storage_class = raw ? "ByteStorage" : cls;
  data.storage_key = std::to_string(blob_index);
  data.storage_numel = raw ? stored_numel * dtype_element_size(m.dtype) : stored_numel;
  data.storage_offset = 0;
  if (raw || m.span) {
    data.size = {data.storage_numel};
    data.stride = {1};
  } else {
    data.size = m.shape;
    data.stride = contiguous_strides(m.shape);
  }
  PickleValue v = PickleValue::dict();
  v.set("kind", PickleValue::string("tensor"));
  v.set("dtype", PickleValue::string(m.dtype));
  v.set("shape", int_list(m.shape));
  v.set("stride", int_list(m.stride));
  v.set("storage_offset", PickleValue::integer(m.storage_offset));
  v.set("device", PickleValue::string(m.device));
  v.set("alignment", PickleValue::integer(m.alignment));
  v.set("layout", PickleValue::string(m.span ? "span" : "compact"));
  v.set("requires_grad", PickleValue::boolean(m.requires_grad));
  if (m.wrapped_number) v.set("wrapped_number", PickleValue::boolean(true));
  if (raw) v.set("raw", PickleValue::boolean(true));
  v.set("data", PickleValue::tensor(std::move(data)));
  return v;
}

Status write_snapshot_archive(const PickleValue& document, const std::vector<BlobSource*>& blobs, ZipWriter& zip) {
  std::string pkl;
  write_pickle(document, pkl);
  // The zip's own code where it failed; else kIoFailed (a write) or kFailed (a tensor's source).
  auto code = [&](StatusCode otherwise) { return zip.status().ok() ? otherwise : zip.status().code(); };
  auto failed = [&](const std::string& what) {
    return Status(code(StatusCode::kIoFailed), what + (zip.status().ok() ? "" : ": " + zip.status().message()));
  };
  if (!zip.add("archive/data.pkl", pkl.data(), pkl.size())) return failed("writing data.pkl failed");
  if (!zip.add("archive/byteorder", "little", 6)) return failed("writing byteorder failed");
  for (size_t i = 0; i < blobs.size(); ++i) {
    if (!zip.begin_entry("archive/data/" + std::to_string(i))) return failed("writing a tensor failed");
    std::string err = blobs[i]->stream([&](const void* d, size_t n) { return zip.write(d, n); });
    if (!err.empty()) return Status(code(StatusCode::kFailed), "tensor " + std::to_string(i) + ": " + err);
    if (!zip.end_entry()) return failed("writing a tensor failed");
  }
  if (!zip.add("archive/version", "3\n", 2)) return failed("writing version failed");
  if (!zip.finish()) return failed("writing the central directory failed");
  return Status::Ok();
}

Status SnapshotReader::open(const std::string& path) {
  auto file = std::make_unique<FileSource>(path);
  if (!file->ok())
    return Status(StatusCode::kIoFailed, "cannot open " + path + " (missing, unreadable or not a regular file)");
  source_ = std::move(file);
  return parse();
}

Status SnapshotReader::open_memory(const std::string& bytes) {
  memory_ = bytes;
  source_ = std::make_unique<MemorySource>(memory_.data(), memory_.size());
  return parse();
}

Status SnapshotReader::parse() {
  auto bad = [](const std::string& what) { return Status(StatusCode::kBadInput, what); };
  if (std::string e = zip_.open(*source_); !e.empty()) return bad("not a snapshot: " + e);
  if (zip_.entries().empty()) return bad("not a snapshot: an empty archive");
  const std::string& first = zip_.entries().front().name;
  const size_t slash = first.find('/');
  if (slash == std::string::npos) return bad("not a snapshot: entries outside an archive folder");
  prefix_ = first.substr(0, slash + 1);
  const ZipEntry* pkl = zip_.find(prefix_ + "data.pkl");
  if (!pkl) return bad("not a snapshot: no data.pkl (not a torch.save file)");
  std::string bytes;
  constexpr uint64_t kMaxPickle = 256u << 20;
  if (std::string e = zip_.read_entry(*pkl, bytes, kMaxPickle); !e.empty())
    return Status(pkl->size > kMaxPickle ? StatusCode::kTooLarge : StatusCode::kBadInput, "not a snapshot: " + e);
  if (Status st = read_pickle(bytes, doc_); !st.ok())
    return Status(st.code(),
                  "not a lingprobe snapshot: data.pkl is not in lingprobe's pickle subset (" + st.message() + ")");
  if (Status st = validate_snapshot_document(doc_); !st.ok())
    return Status(st.code(), "malformed snapshot: " + st.message());
  return Status::Ok();
}

std::string SnapshotReader::read_data(const PickleValue& tensor_value, std::string& bytes) const {
  const PickleValue* data = tensor_value.find("data");
  if (!data || data->kind() != PickleValue::Kind::Tensor) return "not a tensor value";
  const PickleTensor& t = data->as_tensor();
  const ZipEntry* e = zip_.find(prefix_ + "data/" + t.storage_key);
  if (!e) return "tensor data record data/" + t.storage_key + " is missing";
  const std::string cls = t.storage_class;
  int64_t esize = 1;
  for (const auto& d : kDtypes)
    if (cls == d.storage) esize = d.size;
  int64_t want = 0;
  if (__builtin_mul_overflow(t.storage_numel, esize, &want) || e->size != static_cast<uint64_t>(want))
    return "tensor data record data/" + t.storage_key + " has " + std::to_string(e->size) + " bytes, expected " +
           std::to_string(want);
  return zip_.read_entry(*e, bytes, 1ull << 40);
}

namespace {

// The first problem of a document's shape, with its path ("args[0].shape"); "" when none.
std::string document_problem(const PickleValue& doc) {
  if (doc.kind() != PickleValue::Kind::Dict) return "the document is not a dict";
  const PickleValue* fmt = doc.find("format");
  if (!fmt || fmt->kind() != PickleValue::Kind::String || fmt->as_string() != kSnapshotFormat)
    return "format is not " + std::string(kSnapshotFormat);
  for (const char* k : {"op", "name", "overload", "schema", "signature", "signature_sha256", "stage"}) {
    const PickleValue* v = doc.find(k);
    if (!v || v->kind() != PickleValue::Kind::String) return std::string(k) + " missing or not text";
  }
  for (const char* k : {"rank", "seq"}) {
    const PickleValue* v = doc.find(k);
    if (!v || v->kind() != PickleValue::Kind::Int) return std::string(k) + " missing or not an integer";
  }
  const PickleValue* args = doc.find("args");
  const PickleValue* kwargs = doc.find("kwargs");
  if (!args || args->kind() != PickleValue::Kind::List) return "args missing or not a list";
  if (!kwargs || kwargs->kind() != PickleValue::Kind::Dict) return "kwargs missing or not a dict";
  if (!doc.find("output")) return "output missing";
  if (auto e = check_value(*args, "args", 0); !e.empty()) return e;
  for (const auto& [k, v] : kwargs->entries())
    if (auto e = check_value(v, "kwargs." + k, 0); !e.empty()) return e;
  if (auto e = check_value(*doc.find("output"), "output", 0); !e.empty()) return e;
  const PickleValue* policy = doc.find("math_policy");
  if (policy && policy->kind() != PickleValue::Kind::Dict) return "math_policy is not a dict";
  return "";
}

}  // namespace

Status validate_snapshot_document(const PickleValue& doc) {
  const std::string e = document_problem(doc);
  return e.empty() ? Status::Ok() : Status(StatusCode::kBadInput, e);
}

}  // namespace lingprobe::format
