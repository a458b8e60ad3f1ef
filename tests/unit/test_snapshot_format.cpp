// The snapshot file format without torch: CRC-32, the ZIP container (written
// front to back, read with bounds checks), lingprobe's pickle subset (round
// trip, limits), the document's validation, and strided-layout arithmetic.
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "format/crc32.h"
#include "format/pickle.h"
#include "format/snapshot_file.h"
#include "format/tensor_layout.h"
#include "format/zip_archive.h"

using namespace lingprobe::format;

namespace {

class StringBlob : public BlobSource {
 public:
  explicit StringBlob(std::string s) : s_(std::move(s)) {}
  uint64_t nbytes() const override { return s_.size(); }
  std::string stream(const std::function<bool(const void*, size_t)>& out) override {
    return out(s_.data(), s_.size()) ? "" : "write failed";
  }

 private:
  std::string s_;
};

std::string zip_of(const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out;
  ZipWriter z([&](const void* d, size_t n) {
    out.append(static_cast<const char*>(d), n);
    return true;
  });
  for (const auto& [name, data] : entries) REQUIRE(z.add(name, data.data(), data.size()));
  REQUIRE(z.finish());
  return out;
}

PickleValue tiny_document(const std::string& dtype = "torch.float32") {
  TensorMeta m;
  m.dtype = dtype;
  m.shape = {2};
  m.stride = {1};
  m.alignment = 64;
  PickleValue doc = PickleValue::dict();
  doc.set("format", PickleValue::string(kSnapshotFormat));
  for (const char* k : {"op", "name", "overload", "schema", "signature", "signature_sha256", "stage"})
    doc.set(k, PickleValue::string(k));
  doc.set("rank", PickleValue::integer(0));
  doc.set("seq", PickleValue::integer(1));
  doc.set("args", PickleValue::list({tensor_value(m, 0, 2), typed_value("float", "1e-06")}));
  doc.set("kwargs", PickleValue::dict());
  doc.set("output", tensor_value(m, 1, 2));
  return doc;
}

}  // namespace

TEST_CASE("crc32: the standard check value, in pieces too", "[snapshot]") {
  CHECK(crc32_update(0, "123456789", 9) == 0xCBF43926u);
  CHECK(crc32_update(crc32_update(0, "1234", 4), "56789", 5) == 0xCBF43926u);
  std::string big(100000, 'x');
  CHECK(crc32_update(0, big.data(), big.size()) ==
        crc32_update(crc32_update(0, big.data(), 777), big.data() + 777, big.size() - 777));
}

TEST_CASE("zip: written front to back, data 64-byte aligned, read back with CRCs", "[snapshot]") {
  const std::string z = zip_of({{"archive/a", "hello"}, {"archive/data/0", std::string(1000, '\7')}});
  MemorySource src(z.data(), z.size());
  ZipReader r;
  REQUIRE(r.open(src).empty());
  REQUIRE(r.entries().size() == 2);
  for (const auto& e : r.entries()) CHECK(e.data_offset % 64 == 0);
  std::string got;
  CHECK(r.read_entry(*r.find("archive/a"), got).empty());
  CHECK(got == "hello");
  // damage: a flipped data byte, a truncated file, a file that is no zip
  std::string bad = z;
  bad[r.find("archive/data/0")->data_offset + 5] ^= 1;
  MemorySource bsrc(bad.data(), bad.size());
  ZipReader br;
  REQUIRE(br.open(bsrc).empty());
  CHECK(br.read_entry(*br.find("archive/data/0"), got).find("CRC mismatch") != std::string::npos);
  const std::string cut = z.substr(0, z.size() / 2);
  MemorySource csrc(cut.data(), cut.size());
  CHECK_FALSE(ZipReader().open(csrc).empty());
  const std::string text = "just some text, long enough to look for an end record in";
  MemorySource tsrc(text.data(), text.size());
  CHECK(ZipReader().open(tsrc).find("not a ZIP") != std::string::npos);
}

TEST_CASE("zip: a failure carries a code (the writer tells an archive over 4 GiB from a full disk by it)",
          "[snapshot]") {
  using lingprobe::format::ZipWriter;
  std::string sink;
  ZipWriter zip([&](const void* d, size_t n) {
    sink.append(static_cast<const char*>(d), n);
    return true;
  });
  REQUIRE(zip.begin_entry("archive/data/0"));
  const char byte = 0;
  // 4 GiB and one byte: refused before a byte is read (the pointer holds one) or written
  CHECK_FALSE(zip.write(&byte, (size_t{1} << 32) + 1));
  CHECK(zip.status().code() == StatusCode::kTooLarge);
  const size_t written = sink.size();
  CHECK_FALSE(zip.write(&byte, 1));  // the first failure stands
  CHECK(sink.size() == written);
  ZipWriter full([](const void*, size_t) { return false; });
  CHECK_FALSE(full.begin_entry("archive/data/0"));
  CHECK(full.status().code() == StatusCode::kIoFailed);
  ZipWriter named([](const void*, size_t) { return true; });
  CHECK_FALSE(named.begin_entry(""));
  CHECK(named.status().code() == StatusCode::kBadInput);
}

TEST_CASE("pickle: lingprobe's subset round-trips, integers of every width", "[snapshot]") {
  PickleTensor t;
  t.storage_class = "BFloat16Storage";
  t.storage_key = "3";
  t.storage_numel = 12;
  t.storage_offset = 0;
  t.size = {3, 4};
  t.stride = {4, 1};
  PickleValue v = PickleValue::dict();
  v.set("ints",
        PickleValue::list({PickleValue::integer(0), PickleValue::integer(255), PickleValue::integer(256),
                           PickleValue::integer(65536), PickleValue::integer(-1), PickleValue::integer(INT64_MAX),
                           PickleValue::integer(INT64_MIN), PickleValue::integer(54067200)}));
  v.set("text", PickleValue::string("caf\xc3\xa9"));
  v.set("flags", PickleValue::list({PickleValue::boolean(true), PickleValue::boolean(false), PickleValue::none()}));
  v.set("tuple", PickleValue::tuple({PickleValue::integer(1)}));
  v.set("tensor", PickleValue::tensor(t));
  std::string bytes;
  write_pickle(v, bytes);
  PickleValue back;
  REQUIRE(read_pickle(bytes, back).ok());
  const auto& ints = back.find("ints")->items();
  REQUIRE(ints.size() == 8);
  CHECK(ints[0].as_int() == 0);
  CHECK(ints[2].as_int() == 256);
  CHECK(ints[4].as_int() == -1);
  CHECK(ints[5].as_int() == INT64_MAX);
  CHECK(ints[6].as_int() == INT64_MIN);
  CHECK(ints[7].as_int() == 54067200);
  CHECK(back.find("text")->as_string() == "caf\xc3\xa9");
  CHECK(back.find("flags")->items()[2].kind() == PickleValue::Kind::None);
  const PickleTensor& bt = back.find("tensor")->as_tensor();
  CHECK((bt.storage_class == "BFloat16Storage" && bt.storage_key == "3" && bt.storage_numel == 12));
  CHECK((bt.size == std::vector<int64_t>{3, 4} && bt.stride == std::vector<int64_t>{4, 1}));
  // anything outside the subset is refused, never executed
  PickleValue x;
  CHECK(read_pickle(std::string("\x80\x02"
                                "cos\nsystem\n"
                                "X\x02\x00\x00\x00ls"
                                "\x85"
                                "R.",
                                24),
                    x)
            .message()
            .find("os.system") != std::string::npos);
  CHECK_FALSE(read_pickle("\x80\x02G", x).ok());  // BINFLOAT: not ours
  CHECK(read_pickle("\x80\x02G", x).code() == StatusCode::kBadInput);
  // containers nested by APPEND alone (no MARK): bounded too (the destructor recurses)
  std::string deep = "\x80\x02";
  for (int i = 0; i < 200; ++i) deep += "]";
  for (int i = 0; i < 199; ++i) deep += "a";
  deep += ".";
  CHECK(read_pickle(deep, x).message().find("nested too deeply") != std::string::npos);
  CHECK(read_pickle(deep, x).code() == StatusCode::kTooLarge);  // a limit
  CHECK(read_pickle(std::string("\x80\x02]q\x00h\x00.", 8), x).message().find("unsupported opcode") !=
        std::string::npos);  // no memo
  CHECK_FALSE(read_pickle(bytes.substr(0, bytes.size() / 2), x).ok());
}

TEST_CASE("snapshot archive: written and read back; the document is validated", "[snapshot]") {
  std::string file;
  ZipWriter z([&](const void* d, size_t n) {
    file.append(static_cast<const char*>(d), n);
    return true;
  });
  StringBlob a(std::string(8, '\1')), b(std::string(8, '\2'));
  REQUIRE(write_snapshot_archive(tiny_document(), {&a, &b}, z).ok());
  SnapshotReader r;
  REQUIRE(r.open_memory(file).ok());
  std::string bytes;
  REQUIRE(r.read_data(*r.document().find("output"), bytes).empty());
  CHECK(bytes == std::string(8, '\2'));

  PickleValue doc = tiny_document("torch.float99");
  CHECK(validate_snapshot_document(doc).message().find("torch.float99") != std::string::npos);
  CHECK(validate_snapshot_document(doc).code() == StatusCode::kBadInput);
  doc = tiny_document();
  doc.set("format", PickleValue::string("other/1"));
  CHECK(validate_snapshot_document(doc).message().find("format") != std::string::npos);
  doc = tiny_document();
  doc.set("args", PickleValue::list({PickleValue::dict({{"kind", PickleValue::string("mystery")}})}));
  CHECK(validate_snapshot_document(doc).message().find("unknown value kind 'mystery'") != std::string::npos);
  // a tensor whose data does not match its shape
  TensorMeta m;
  m.dtype = "torch.float32";
  m.shape = {3};
  m.stride = {1};
  doc = tiny_document();
  doc.set("output", tensor_value(m, 1, 2));
  CHECK(validate_snapshot_document(doc).message().find("elements") != std::string::npos);
  // a malformed file (cut short) and a missing one
  SnapshotReader cut;
  const Status cut_status = cut.open_memory(file.substr(0, file.size() / 2));
  CHECK(cut_status.code() == StatusCode::kBadInput);
  CHECK(cut_status.message().find("not a snapshot") != std::string::npos);
  CHECK(SnapshotReader().open("/nonexistent/lpunit.pt").code() == StatusCode::kIoFailed);
}

TEST_CASE("snapshot tensor: wrapped_number written only when true, and only on a 0-dim tensor", "[snapshot]") {
  TensorMeta m;
  m.dtype = "torch.float64";
  CHECK(tensor_value(m, 0, 1).find("wrapped_number") == nullptr);  // files of ordinary tensors unchanged
  m.wrapped_number = true;
  const PickleValue wrapped = tensor_value(m, 0, 1);
  REQUIRE(wrapped.find("wrapped_number") != nullptr);
  CHECK(wrapped.find("wrapped_number")->as_bool());
  PickleValue doc = tiny_document();
  doc.set("output", wrapped);
  CHECK(validate_snapshot_document(doc).ok());
  m.shape = {2};
  m.stride = {1};
  doc.set("output", tensor_value(m, 1, 2));
  CHECK(validate_snapshot_document(doc).message().find("wrapped_number") != std::string::npos);
}

TEST_CASE("tensor layout: spans, overlap, contiguous strides, pointer alignment", "[snapshot]") {
  // the seed's DiT input: a torch.chunk view of [1,10560,5120]
  CHECK(non_overlapping({1, 2640, 5120}, {54067200, 5120, 1}));
  CHECK(span_of({1, 2640, 5120}, {54067200, 5120, 1}) == 2640 * 5120);
  CHECK(numel_of({1, 2640, 5120}) == 2640 * 5120);
  CHECK_FALSE(non_overlapping({4, 3}, {0, 1}));  // expand
  CHECK(span_of({4, 3}, {0, 1}) == 3);
  CHECK(non_overlapping({3, 4}, {1, 3}));  // transposed
  CHECK(span_of({0, 5}, {5, 1}) == 0);
  CHECK(numel_of({int64_t(1) << 40, int64_t(1) << 40}) == -1);  // overflow, not undefined behaviour
  CHECK(span_of({int64_t(1) << 40, 2}, {int64_t(1) << 40, 1}) == -1);
  CHECK(contiguous_strides({2, 3, 4}) == std::vector<int64_t>{12, 4, 1});
  CHECK(pointer_alignment(0x7f0000001040) == 64);
  CHECK(pointer_alignment(0x7f0000000000) == 4096);
  CHECK(dtype_storage_class("torch.bfloat16") == "BFloat16Storage");
  CHECK(dtype_storage_class("torch.float8_e4m3fn").empty());  // stored raw
  CHECK(dtype_element_size("torch.complex128") == 16);
}
