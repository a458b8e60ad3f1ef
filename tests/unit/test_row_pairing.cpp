// `lingprobe diff`'s join of two runs' rows (audit/row_pairing), on rows built
// by hand: the same signature, a shape change, a dtype change (a run against
// its autocast twin) and rows left on one side.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "audit/row_pairing.h"
#include "format/json_parse.h"

using namespace lingprobe;
using namespace lingprobe::audit;

namespace {

// A conv2d row: input [2,C,H,W] of `in_dtype`, an f32 weight [8,C,3,3], output of `out_dtype`.
struct ConvRow {
  format::JsonValue signature;
  DiffRow row;
  ConvRow(int channels, int size, const char* in_dtype, const char* out_dtype, uint64_t calls) {
    const std::string c = std::to_string(channels), s = std::to_string(size), o = std::to_string(size - 2);
    auto parsed =
        format::parse_json(R"({"args":[{"dtype":")" + std::string(in_dtype) + R"(","shape":[2,)" + c + "," + s + "," +
                           s + R"(],"stride":[1,1,1,1]},{"dtype":"torch.float32","shape":[8,)" + c +
                           R"(,3,3],"stride":[1,1,1,1]}],"kwargs":{},"op":"aten.conv2d.default","output":{"dtype":")" +
                           out_dtype + R"(","shape":[2,8,)" + o + "," + o + R"(],"stride":[1,1,1,1]},"stage":"s"})");
    REQUIRE(parsed.status.ok());
    signature = parsed.value;
    row.sha = c + s + in_dtype + out_dtype;
    row.stage = "s";
    row.op = "aten.conv2d.default";
    row.calls = calls;
    row.calls_by_rank = format::JsonValue::object();
  }
  const DiffRow& get() {
    row.signature = &signature;
    return row;
  }
};

std::vector<std::string> kinds(const Pairing& p) {
  std::vector<std::string> out;
  for (const auto& e : p.entries) out.push_back(e.kind);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST_CASE("rows that changed only in dtypes pair one to one, after shape changes", "[diff]") {
  ConvRow same_a(3, 10, "torch.float32", "torch.float32", 2), same_b(3, 10, "torch.float32", "torch.float32", 2);
  ConvRow bigger_a(4, 10, "torch.float32", "torch.float32", 1), bigger_b(4, 12, "torch.float32", "torch.float32", 1);
  ConvRow cast_a(5, 10, "torch.float32", "torch.float32", 3), cast_b(5, 10, "torch.float32", "torch.bfloat16", 3);
  ConvRow gone(6, 10, "torch.float32", "torch.float32", 1);
  const std::vector<DiffRow> a = {same_a.get(), bigger_a.get(), cast_a.get(), gone.get()};
  const std::vector<DiffRow> b = {same_b.get(), bigger_b.get(), cast_b.get()};
  const Pairing p = pair_rows(a, b, "");
  CHECK(p.unchanged.at("s") == 1);
  CHECK(kinds(p) == std::vector<std::string>{"dtype_changed", "only_in_a", "shape_changed"});
  for (const auto& e : p.entries)
    if (e.kind == "dtype_changed") {
      REQUIRE((e.a.size() == 1 && e.b.size() == 1));
      CHECK(e.a[0]->sha == cast_a.row.sha);
      CHECK(e.b[0]->sha == cast_b.row.sha);
      CHECK((e.calls_a == 3 && e.calls_b == 3));
    }
  CHECK(pair_rows(a, b, "other").entries.empty());
}

TEST_CASE("rows alike but for dtypes stay apart where one side has two of them", "[diff]") {
  // A ran the layer in f32 and in bf16 (two rows); B in bf16 only, with another output dtype: no pair is certain.
  ConvRow f32(5, 10, "torch.float32", "torch.float32", 1), bf16(5, 10, "torch.bfloat16", "torch.bfloat16", 1);
  ConvRow half(5, 10, "torch.float16", "torch.float16", 1);
  const std::vector<DiffRow> a = {f32.get(), bf16.get()};
  const std::vector<DiffRow> b = {half.get()};
  CHECK(kinds(pair_rows(a, b, "")) == std::vector<std::string>{"only_in_a", "only_in_a", "only_in_b"});
}
