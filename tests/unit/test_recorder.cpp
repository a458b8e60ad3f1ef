// The recorder's parts (the signature table, nested-call learning, the
// thread registry) and the recorder itself in this process: torch ops called
// from C++ with a test sink in place of the writer.
#include "capture/torch_guard.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <catch2/catch.hpp>

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "capture/nested_suppression.h"
#include "capture/op_registry.h"
#include "capture/recorder.h"
#include "capture/signature_builder.h"
#include "capture/signature_table.h"

using namespace lingprobe;
using namespace lingprobe::capture;

namespace {

const c10::FunctionSchema& add_schema() {
  return c10::Dispatcher::singleton().findSchemaOrThrow("aten::add", "Tensor").schema();
}

struct TestSink : RecorderSink {
  std::mutex mu;
  std::vector<std::pair<uint32_t, std::string>> signatures;  // id, canonical JSON
  std::vector<std::unique_ptr<runtime::RecordBuffer>> buffers;
  runtime::RecordBuffer* register_thread_buffer(size_t capacity) override {
    std::lock_guard<std::mutex> lock(mu);
    buffers.push_back(std::make_unique<runtime::RecordBuffer>(capacity));
    return buffers.back().get();
  }
  void on_new_signature(uint32_t id, const std::string&, const std::string& json) override {
    std::lock_guard<std::mutex> lock(mu);
    signatures.emplace_back(id, json);
  }
  std::vector<std::pair<uint32_t, SignatureBuild>> later;  // built by build_later(), as a writer's thread would
  void on_new_signature_later(uint32_t id, SignatureBuild build) override {
    std::lock_guard<std::mutex> lock(mu);
    later.emplace_back(id, std::move(build));
  }
  void build_later() {
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [id, build] : later) {
      std::string sha, json;
      build(sha, json);
      signatures.emplace_back(id, json);
    }
    later.clear();
  }
  std::vector<std::pair<uint32_t, std::string>> texts;  // on_signature_text: id, SHA-256
  void on_signature_text(uint32_t id, const std::string& sha, const std::string&) override {
    std::lock_guard<std::mutex> lock(mu);
    texts.emplace_back(id, sha);
  }
  std::vector<std::string> many;  // ops said to have minted kManySignaturesPerOp
  void on_many_signatures(const std::string& op, bool) override {
    std::lock_guard<std::mutex> lock(mu);
    many.push_back(op);
  }
  bool on_buffer_full() override { return false; }
  void on_buffer_half_full() override {}
  std::vector<format::CallRecord> drain() {
    std::vector<format::CallRecord> out;
    for (auto& b : buffers) b->drain([&](const format::CallRecord& r) { out.push_back(r); });
    return out;
  }
};

uint64_t total_calls(const format::CountsSnapshot& snap) {
  uint64_t n = 0;
  for (const auto& [id, calls] : snap.calls) n += calls;
  return n;
}

}  // namespace

TEST_CASE("signature table: a full key is interned once and its SHA-256 handed back", "[recorder]") {
  SignatureTable table;
  TestSink sink;
  RecorderOptions options;
  OpInfo op(add_schema(), 0, 0);
  const at::Tensor x = at::ones({2, 3});
  const std::vector<c10::IValue> inputs{x, x, c10::IValue(1)};
  const auto arguments = std::make_shared<const format::JsonValue>(
      build_arguments(op.schema, c10::ArrayRef<const c10::IValue>(inputs.data(), inputs.size())));
  const std::vector<c10::IValue> outputs{x};
  const SignatureTable::Call call{&op, arguments, c10::ArrayRef<const c10::IValue>(outputs.data(), outputs.size()), 0};
  const uint64_t key_a[3] = {1, 2, 3}, key_b[3] = {1, 2, 4};
  uint32_t first = 99, again = 99, other = 99, other_again = 99;
  std::string sha_first, sha_again, sha_other;
  REQUIRE(table.resolve(key_a, 3, call, sink, first, &sha_first));
  REQUIRE(table.resolve(key_a, 3, call, sink, again, &sha_again));
  REQUIRE(table.resolve(key_b, 3, call, sink, other));
  CHECK(first == 0);
  CHECK(again == 0);
  CHECK(other == 1);
  CHECK(sha_first.size() == 64);
  CHECK(sha_again == sha_first);
  CHECK(table.assigned().load() == 2);
  // The SHA-256 wanted at once: built by the caller. Not wanted: handed over unbuilt, for the sink's thread.
  REQUIRE(sink.signatures.size() == 1);
  CHECK(sink.signatures[0].first == 0);
  CHECK(sink.signatures[0].second.find("\"aten.add.Tensor\"") != std::string::npos);
  REQUIRE(sink.later.size() == 1);
  CHECK(sink.later[0].first == 1);
  sink.build_later();
  REQUIRE(sink.signatures.size() == 2);                           // the sink hears of each id once
  CHECK(sink.signatures[1].second == sink.signatures[0].second);  // equal calls (the keys here are made up)
  // A later caller that wants the handed-over one's SHA-256 builds it too, and tells the sink its text only.
  REQUIRE(table.resolve(key_b, 3, call, sink, other_again, &sha_other));
  CHECK(other_again == 1);
  CHECK(sha_other == sha_first);
  REQUIRE(sink.texts.size() == 1);
  CHECK(sink.texts[0] == std::make_pair(uint32_t{1}, sha_other));
  CHECK(sink.signatures.size() == 2);
}

TEST_CASE("nested suppression is decided once, from an op's first 8 calls", "[recorder][suppress]") {
  OpInfo many(add_schema(), -1, 0), few(add_schema(), -1, 0), never(add_schema(), 0, 0);
  for (int i = 0; i < 7; ++i) learn_nested_calls(&many, 4, 4);
  CHECK(many.suppress.load() == -1);  // still learning
  learn_nested_calls(&many, 4, 4);
  CHECK(many.suppress.load() == 1);  // 32 nested calls in 8 calls: at least 4 per call
  for (int i = 0; i < 8; ++i) learn_nested_calls(&few, 3, 4);
  CHECK(few.suppress.load() == 0);
  for (int i = 0; i < 8; ++i) learn_nested_calls(&never, 100, 4);
  CHECK(never.suppress.load() == 0);  // NESTED or never: not learning, not changed
}

// The recorder is one per process: one test case, installed once.
TEST_CASE("recorder: one signature per distinct call, counted per call, a record per call in order", "[recorder]") {
  static TestSink sink;
  RecorderOptions options;
  options.buffer_records = 1024;
  install_recorder(options, &sink);
  const at::Tensor a = at::ones({2, 3}), b = at::ones({4});
  const format::CountsSnapshot before = recorder_counts();
  set_recording(true);
  for (int i = 0; i < 5; ++i) at::add(a, a);
  at::add(b, b);
  std::thread other([&] {  // a thread that exits: its counts stay in the totals
    for (int i = 0; i < 3; ++i) at::add(a, a);
  });
  other.join();
  set_recording(false);
  at::add(a, a);  // not recorded
  const format::CountsSnapshot after = recorder_counts();
  CHECK(total_calls(after) - total_calls(before) == 9);
  sink.build_later();
  std::vector<std::string> adds;
  for (const auto& [id, json] : sink.signatures)
    if (json.find("\"aten.add.Tensor\"") != std::string::npos) adds.push_back(json);
  CHECK(adds.size() == 2);  // [2,3] and [4]; the other thread's calls found the same signature
  const std::vector<format::CallRecord> records = sink.drain();
  REQUIRE(records.size() == 9);
  for (size_t i = 0; i < records.size(); ++i) {
    CHECK(records[i].depth == 0);
    CHECK(records[i].t1_ns >= records[i].t0_ns);
    if (i > 0 && records[i].tid == records[i - 1].tid) CHECK(records[i].seq > records[i - 1].seq);
  }
  const RecorderStats stats = recorder_stats();
  CHECK(stats.calls_seen >= 9);
  CHECK(stats.dropped == 0);

  // A loop repeats its calls in order, so each call's input entry is guessed from the call before it
  // (enter_inputs); a wrong guess falls back to the table: every call keeps its own signature.
  const at::Tensor c = at::ones({5});
  set_recording(true);
  for (int i = 0; i < 3; ++i) {
    at::add(a, a);
    at::add(b, b);
  }
  at::add(a, a);
  at::add(c, c);  // the guess after [2,3] is [4]
  at::add(b, b);  // no guess after [5] yet
  at::add(a, a);
  at::add(b, b);
  set_recording(false);
  sink.build_later();
  std::map<uint32_t, std::string> json_of;
  for (const auto& [id, json] : sink.signatures) json_of[id] = json;
  const std::vector<format::CallRecord> loop = sink.drain();
  const std::vector<std::string> shapes = {"[2,3]", "[4]", "[2,3]", "[4]",   "[2,3]", "[4]",
                                           "[2,3]", "[5]", "[4]",   "[2,3]", "[4]"};
  REQUIRE(loop.size() == shapes.size());
  for (size_t i = 0; i < loop.size(); ++i) {
    INFO("call " << i);
    const std::string& json = json_of[loop[i].signature_id];
    for (const std::string& shape : {"[2,3]", "[4]", "[5]"})  // the inputs' shape and the output's: no other
      CHECK((json.find("\"shape\":" + shape) != std::string::npos) == (shape == shapes[i]));
  }
  // Two keys whose outputs are alike (alpha 1 and 2): a wrong guess would give both one signature.
  set_recording(true);
  for (int i = 0; i < 3; ++i) {
    at::add(a, a, 1);
    at::add(a, a, 2);
  }
  set_recording(false);
  const std::vector<format::CallRecord> alphas = sink.drain();
  REQUIRE(alphas.size() == 6);
  CHECK(alphas[0].signature_id != alphas[1].signature_id);
  for (size_t i = 2; i < alphas.size(); ++i) CHECK(alphas[i].signature_id == alphas[i % 2].signature_id);

  // A guessed call's inputs are compared in place with its entry's stored key (call_keys.h), its outputs with
  // those seen after it. Each variant below comes where the base call came before (after the same anchor), so
  // that it is guessed to be the base and differs from it only in strides, dtype, a list value, an int, a bool, a
  // layout, a list's tensor or its outputs: it must be its own signature, and the base keeps its own.
  const at::Tensor square = at::ones({3, 3}), transposed = square.t(), twice = at::ones({3, 3}, at::kDouble);
  const at::Tensor some = at::tensor({1.f, 0.f, 1.f}), more = at::tensor({1.f, 1.f, 1.f});
  const at::Tensor sparse = square.to_sparse();
  const std::vector<std::pair<std::function<void()>, std::function<void()>>> pairs = {
      {[&] { at::add(square, square); }, [&] { at::add(transposed, square); }},
      {[&] { at::add(square, square); }, [&] { at::add(twice, twice); }},
      {[&] { at::sum(square, {1}); }, [&] { at::sum(square, {0}); }},  // an int list: keyed out of line
      {[&] { at::add(square, square, 1); }, [&] { at::add(square, square, 2); }},
      {[&] { at::nonzero(some); }, [&] { at::nonzero(more); }},  // the same input key; output [3,1], not [2,1]
      {[&] { at::sum(square, {1}, false); }, [&] { at::sum(square, {1}, true); }},  // a bool
      {[&] { at::neg(square); }, [&] { at::neg(sparse); }},  // a layout: the sparse tensor keyed out of line
      {[&] {
         at::cat({square, square});
       },
       [&] {
         at::cat({square, transposed});
       }},  // strides inside a list
  };
  for (size_t k = 0; k < pairs.size(); ++k) {
    INFO("pair " << k);
    const at::Tensor anchor = at::ones({static_cast<int64_t>(k) + 7});
    set_recording(true);
    for (int variant : {0, 1, 0}) {
      at::neg(anchor);
      (variant ? pairs[k].second : pairs[k].first)();
    }
    set_recording(false);
    sink.build_later();
    for (const auto& [id, json] : sink.signatures) json_of[id] = json;
    const std::vector<format::CallRecord> r = sink.drain();
    REQUIRE(r.size() == 6);
    CHECK(r[5].signature_id == r[1].signature_id);
    CHECK(r[3].signature_id != r[1].signature_id);
    if (k == 0) CHECK(json_of[r[3].signature_id].find("\"stride\":[1,3]") != std::string::npos);
    if (k == 5) CHECK(json_of[r[3].signature_id].find("true") != std::string::npos);
    if (k == 4) {
      CHECK(json_of[r[1].signature_id].find("\"shape\":[2,1]") != std::string::npos);
      CHECK(json_of[r[3].signature_id].find("\"shape\":[3,1]") != std::string::npos);
      CHECK(json_of[r[3].signature_id].find("\"shape\":[3]") != std::string::npos);  // its input, from the stored key
    }
  }
}
