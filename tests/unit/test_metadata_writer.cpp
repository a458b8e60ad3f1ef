// The writer's call-record lines: canonical JSON (sorted keys, no spaces),
// at the extremes of every field; and a whole file written by the writer.
#include <catch2/catch.hpp>

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "format/canonical_json.h"
#include "format/json_parse.h"
#include "sink/metadata_writer.h"
#include "test_support.h"

using namespace lingprobe;

namespace {
std::string line_of(const format::CallRecord& r) {
  char buf[192];
  return std::string(buf, sink::format_call_record(r, buf));
}
}  // namespace

TEST_CASE("call record lines are canonical JSON", "[sink]") {
  CHECK(line_of({7, 100, 250, 3, 4242, 0}) ==
        "{\"depth\":0,\"id\":3,\"kind\":\"call\",\"seq\":7,\"t0_ns\":100,\"t1_ns\":250,\"tid\":4242}\n");
  const format::CallRecord extreme{std::numeric_limits<uint64_t>::max(),
                                   std::numeric_limits<int64_t>::min(),
                                   std::numeric_limits<int64_t>::max(),
                                   0xFFFFFFFFu,
                                   0xFFFFFFFFu,
                                   0xFFFFFFFFu};
  const std::string text = line_of(extreme);
  REQUIRE(text.back() == '\n');
  auto parsed = format::parse_json(text.substr(0, text.size() - 1));
  REQUIRE(parsed.status.ok());
  CHECK(format::canonical_json(parsed.value) + "\n" == text);
  CHECK(text.find("\"seq\":18446744073709551615") != std::string::npos);
  CHECK(text.find("\"t0_ns\":-9223372036854775808") != std::string::npos);
}

TEST_CASE("the writer writes header, signature, calls and final counts in order", "[sink]") {
  const std::string dir = test::temp_dir("lingprobe-writer-");
  const std::string path = dir + "/sub/m.jsonl";
  {
    sink::MetadataWriter w({path, "{\"kind\":\"header\"}", 10000}, [] {
      format::CountsSnapshot s;
      s.calls.emplace_back(0, 3);
      return s;
    });
    auto* b = w.register_buffer(16);
    w.add_signature(0, "ab", "{\"op\":\"aten.add.Tensor\"}");
    for (uint64_t i = 0; i < 3; ++i) REQUIRE(b->push({i, 1, 2, 0, 9, 0}) != runtime::RecordBuffer::Push::kFull);
    w.finalize();
  }
  std::ifstream f(path);
  std::string line;
  std::vector<std::string> kinds;
  while (std::getline(f, line)) {
    auto r = format::parse_json(line);
    REQUIRE(r.status.ok());
    kinds.push_back(r.value.find("kind")->as_string());
  }
  CHECK(kinds == std::vector<std::string>{"header", "signature", "call", "call", "call", "counts"});
}

namespace {
// Every line of `path`, parsed; fails the test on a malformed or unterminated one.
std::vector<format::JsonValue> whole_lines(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  REQUIRE((text.empty() || text.back() == '\n'));
  std::vector<format::JsonValue> out;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    auto r = format::parse_json(text.substr(start, nl - start));
    INFO(text.substr(start, nl - start));
    REQUIRE(r.status.ok());
    out.push_back(r.value);
  }
  return out;
}

off_t file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

// A real short write: the kernel refuses bytes past RLIMIT_FSIZE (EFBIG), as
// a full disk refuses them (ENOSPC), for this process while it lives.
struct FileSizeLimit {
  rlimit before{};
  void (*old_handler)(int);
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler = std::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &before);
    rlimit r = before;
    r.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &r) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &before);
    std::signal(SIGXFSZ, old_handler);
  }
};
}  // namespace

TEST_CASE("a write refused part-way leaves whole lines, retries signatures and counts the lost calls", "[sink]") {
  const std::string dir = test::temp_dir("lingprobe-writer-");
  const std::string path = dir + "/m.jsonl";
  uint64_t pushed = 0;
  sink::MetadataWriter w({path, "{\"kind\":\"header\"}", 100000}, [&] {
    format::CountsSnapshot s;
    s.calls.emplace_back(0, pushed);
    return s;
  });
  auto* b = w.register_buffer(64);
  auto push = [&](uint32_t id, int n) {
    for (int i = 0; i < n; ++i, ++pushed)
      REQUIRE(b->push({pushed, 1, 2, id, 9, 0}) != runtime::RecordBuffer::Push::kFull);
  };
  w.add_signature(0, "aa", "{\"op\":\"aten.add.Tensor\"}");
  push(0, 3);
  w.flush();
  const off_t before = file_size(path);
  REQUIRE(before > 0);
  {
    FileSizeLimit limit(static_cast<rlim_t>(before) + 100);  // room for part of the next signature line only
    w.add_signature(1, "bb", "{\"op\":\"aten.mul.Tensor\",\"pad\":\"" + std::string(300, 'x') + "\"}");
    push(1, 5);
    w.flush();
    CHECK(file_size(path) == before);  // the half signature line was cut back
    push(1, 2);
    w.flush();  // nothing fits: the signature is kept for the next try
    CHECK(file_size(path) == before);
    CHECK(w.stats().write_errors >= 2);
  }
  push(1, 2);  // space is back
  w.finalize();
  const auto lines = whole_lines(path);
  std::vector<std::string> kinds;
  std::set<int64_t> ids;
  for (const auto& l : lines) {
    const std::string kind = l.find("kind")->as_string();
    kinds.push_back(kind);
    if (kind == "signature") ids.insert(l.find("id")->as_int());
    if (kind == "call") CHECK(ids.count(l.find("id")->as_int()) == 1);  // never before its signature
  }
  CHECK(kinds == std::vector<std::string>{"header", "signature", "call", "call", "call", "counts", "signature", "call",
                                          "call", "counts"});
  const auto& last = lines.back();
  CHECK(last.find("final")->as_bool());
  CHECK(last.find("dropped")->find("lines")->find("write_error")->as_int() == 7);
  CHECK(w.stats().call_records_written == 5);
}

TEST_CASE("a counts record names only signature ids whose records precede it in the file", "[sink]") {
  // An id registered after the cycle took the queue is counted before its record is written: a kill
  // between the two cycles left a counts record naming an id the file never defines (the 20 SIGKILL
  // trials found it; the audit refuses such a file).
  const std::string dir = test::temp_dir("lingprobe-writer-");
  const std::string path = dir + "/m.jsonl";
  sink::MetadataWriter w({path, "{\"kind\":\"header\"}", 100000}, [] {
    format::CountsSnapshot s;
    s.calls = {{0, 2}, {1, 5}};
    return s;
  });
  w.add_signature(0, "aa", "{\"op\":\"aten.add.Tensor\"}");
  w.flush();
  auto lines = whole_lines(path);
  REQUIRE(lines.back().find("kind")->as_string() == "counts");
  CHECK(lines.back().find("calls")->find("0") != nullptr);
  CHECK(lines.back().find("calls")->find("1") == nullptr);  // not yet defined: left for a later record
  w.add_signature(1, "bb", "{\"op\":\"aten.mul.Tensor\"}");
  w.finalize();
  lines = whole_lines(path);
  CHECK(lines.back().find("calls")->find("1")->as_int() == 5);
}

TEST_CASE("a signature handed over unbuilt is built on the writer's thread, before the calls after it", "[sink]") {
  const std::string dir = test::temp_dir("lingprobe-writer-");
  const std::string path = dir + "/m.jsonl";
  std::atomic<int> builds{0};
  std::thread::id built_on;
  {
    sink::MetadataWriter w({path, "{\"kind\":\"header\"}", 100000}, [] {
      format::CountsSnapshot s;
      s.calls = {{0, 1}, {1, 2}};
      return s;
    });
    auto* b = w.register_buffer(16);
    w.add_signature(0, "aa", "{\"op\":\"aten.add.Tensor\"}");
    w.add_signature(1, [&](std::string& sha, std::string& json) {
      built_on = std::this_thread::get_id();
      ++builds;
      sha = "bb";
      json = "{\"op\":\"aten.mul.Tensor\"}";
    });
    REQUIRE(b->push({0, 1, 2, 1, 9, 0}) != runtime::RecordBuffer::Push::kFull);
    w.wake();  // a cycle of the writer's thread (finalize's last one runs on the caller's)
    for (int i = 0; i < 5000 && builds.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    w.finalize();
  }
  CHECK(builds.load() == 1);
  CHECK(built_on != std::this_thread::get_id());  // the writer's thread, not the caller's
  const auto lines = whole_lines(path);
  REQUIRE(lines.size() == 6);  // header, two signatures, the call, the woken cycle's counts, the final counts
  CHECK(lines[2].find("id")->as_int() == 1);
  CHECK(lines[2].find("sha256")->as_string() == "bb");
  CHECK(lines[2].find("signature_json")->as_string() == "{\"op\":\"aten.mul.Tensor\"}");
  CHECK(lines[3].find("kind")->as_string() == "call");
  CHECK(lines[4].find("calls")->find("1")->as_int() == 2);
  CHECK(lines[5].find("final") != nullptr);
}

TEST_CASE("compile-time calls and collective times go into the counts record in key order, only when there are any",
          "[sink]") {
  const std::string dir = test::temp_dir("lingprobe-writer-");
  for (const bool traced : {false, true}) {
    const std::string path = dir + (traced ? "/traced.jsonl" : "/plain.jsonl");
    {
      sink::MetadataWriter w({path, "{\"kind\":\"header\"}", 10000}, [traced] {
        format::CountsSnapshot s;
        s.calls.emplace_back(0, 2);
        if (traced) s.compile_time = {{"fake_tensor_mode", 7}, {"fake_tensor_inputs", 1}};
        if (traced) s.collectives = {{"dit", {{"us", 1500}, {"calls", 3}}}};
        return s;
      });
      w.add_signature(0, "ab", "{\"op\":\"aten.add.Tensor\"}");
      w.finalize();
    }
    std::ifstream f(path);
    std::string line, counts;
    while (std::getline(f, line))
      if (line.find("\"kind\":\"counts\"") != std::string::npos) counts = line;
    INFO(counts);
    if (traced) {
      CHECK(counts.rfind("{\"calls\":{\"0\":2},\"collectives\":{\"dit\":{\"calls\":3,\"us\":1500}},"
                         "\"compile_time\":{\"fake_tensor_inputs\":1,\"fake_tensor_mode\":7},\"dropped\":{}",
                         0) == 0);
      auto r = format::parse_json(counts);
      REQUIRE(r.status.ok());
      CHECK(r.value.find("compile_time")->find("fake_tensor_mode")->as_int() == 7);
    } else {
      CHECK(counts.find("compile_time") == std::string::npos);
      CHECK(counts.find("collectives") == std::string::npos);
    }
    std::remove(path.c_str());
  }
}

TEST_CASE("a wake that arrives while the writer drains gets a drain of its own", "[sink]") {
  // A fast producer fills its buffer to half again while the writer is still draining the previous half: that
  // wake was swallowed (one pending request counted the one in progress), the writer slept its whole flush
  // interval and the ring overflowed (2 of 3 call records dropped at 1.4 us per call, issue 25).
  const std::string dir = test::temp_dir("lingprobe-writer-");
  const std::string path = dir + "/m.jsonl";
  std::atomic<int> cycles{0};
  sink::MetadataWriter* writer = nullptr;
  sink::MetadataWriter w(
      {path, "{\"kind\":\"header\"}", 60000}, [] { return format::CountsSnapshot{}; },
      [&] {
        if (cycles.fetch_add(1) == 0) writer->wake();  // the producer's crossing, mid-drain
      });
  writer = &w;
  w.start();
  w.wake();
  for (int i = 0; i < 500 && cycles.load() < 2; ++i) usleep(10000);
  CHECK(cycles.load() >= 2);  // within 5 s, not after the 60 s interval
  w.finalize();
}

TEST_CASE("wakes drain without the counts record; a flush interval, a flush() and finalize write it", "[sink]") {
  // The snapshot writer wakes the writer at every snapshot record; each cycle wrote the cumulative counts record
  // (one entry per signature), so a torchvision detection run wrote 2,666 of them: 44 of its 50 MB.
  const std::string dir = test::temp_dir("lingprobe-writer-");
  const std::string path = dir + "/m.jsonl";
  std::atomic<int> cycles{0};
  sink::MetadataWriter w(
      {path, "{\"kind\":\"header\"}", 60000}, [] { return format::CountsSnapshot{}; }, [&] { cycles.fetch_add(1); });
  auto counts_records = [&] {
    int n = 0;
    for (const auto& r : whole_lines(path)) n += r.find("kind")->as_string() == "counts";
    return n;
  };
  w.start();
  for (int i = 0; i < 20; ++i) {
    w.add_record("{\"kind\":\"snapshot\",\"n\":" + std::to_string(i) + "}\n");
    const int before = cycles.load();
    w.wake();
    for (int t = 0; t < 500 && cycles.load() == before; ++t) usleep(2000);
  }
  for (int t = 0; t < 500 && whole_lines(path).size() < 21; ++t) usleep(2000);  // the last wake's cycle written
  CHECK(whole_lines(path).size() == 1 + 20 + 1);  // header, 20 records, the first cycle's counts record only
  CHECK(counts_records() == 1);
  w.flush();  // asked for: the file current, counts included
  CHECK(counts_records() == 2);
  w.finalize();
  CHECK(counts_records() == 3);
  const auto lines = whole_lines(path);
  CHECK(lines.back().find("final")->as_bool());
}

TEST_CASE("the final counts record says how the process ended; the earlier ones do not", "[sink]") {
  // A job cut short by SIGTERM audited exactly as a finished one: nothing in its files said how it ended.
  const std::string dir = test::temp_dir("lingprobe-writer-");
  const std::string path = dir + "/m.jsonl";
  {
    sink::MetadataWriter w({path, "{\"kind\":\"header\"}", 10000}, [] { return format::CountsSnapshot{}; });
    w.add_signature(0, "ab", "{\"op\":\"aten.add.Tensor\"}");
    w.flush();
    w.finalize("SIGTERM");
    w.finalize("exit");  // idempotent: the first end stays
  }
  std::vector<std::string> ended;
  for (const auto& r : whole_lines(path))
    if (r.find("kind")->as_string() == "counts")
      ended.push_back(r.find("ended_by") ? r.find("ended_by")->as_string() : "-");
  CHECK(ended == std::vector<std::string>{"-", "SIGTERM"});
}
