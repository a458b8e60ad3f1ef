#include "audit/metadata_reader.h"

#include "format/sha256.h"

#include <sys/stat.h>

#include <simdjson.h>

#include "audit/signature_text.h"

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_set>
#include <vector>

namespace lingprobe::audit {
namespace {

constexpr size_t kChunk = 16u << 20;

// Fills a FileSummary. Call records are counted (and timed) in dense
// per-id vectors, merged into the summary at the end.
class SummaryVisitor final : public RecordVisitor {
 public:
  explicit SummaryVisitor(FileSummary& out) : out_(out) {}
  std::string call(const CallLine& c) override {
    if (c.depth == 0 && c.t1_ns >= c.t0_ns && c.t1_ns > 0) through_wait(c);
    if (c.id >= (1u << 20)) {  // not a dense id: straight into the map
      add(out_.call_records[c.id], out_.call_times[c.id], c);
      return "";
    }
    if (c.id >= counts_.size()) counts_.resize(c.id + 1024), times_.resize(c.id + 1024);
    add(counts_[c.id], times_[c.id], c);
    return "";
  }
  std::string record(std::string_view kind, simdjson::dom::object obj) override;
  void finish() {
    for (const auto& [tid, open] : open_collective_)  // a collective last on its thread: its own duration
      out_.call_times[open.id].through_wait_ns += open.t1_ns - open.t0_ns;
    for (size_t id = 0; id < counts_.size(); ++id) {
      if (!counts_[id]) continue;
      out_.call_records[static_cast<uint32_t>(id)] += counts_[id];
      CallTimes& t = out_.call_times[static_cast<uint32_t>(id)];
      const CallTimes& d = times_[id];
      t.top_level_records += d.top_level_records;
      if (d.top_level_calls) t.add(d.top_level_calls, d.top_level_ns, d.first_t0_ns, d.last_t1_ns);
    }
  }

 private:
  std::string read_signature(simdjson::dom::object obj);  // also notes which ids are c10d ops

  // A c10d op returns once the collective is queued; its caller then waits
  // (Work.wait()) outside any op. So a collective's time runs from its start
  // to the next top-level call of its thread.
  void through_wait(const CallLine& c) {
    auto open = open_collective_.find(c.tid);
    if (open != open_collective_.end()) {
      if (c.t0_ns >= open->second.t0_ns)
        out_.call_times[open->second.id].through_wait_ns += c.t0_ns - open->second.t0_ns;
      open_collective_.erase(open);
    }
    if (collectives_.count(c.id)) open_collective_[c.tid] = c;
  }

  static void add(uint64_t& count, CallTimes& t, const CallLine& c) {
    ++count;
    if (c.depth == 0) ++t.top_level_records;
    if (c.depth != 0 || c.t1_ns < c.t0_ns || (c.t0_ns == 0 && c.t1_ns == 0)) return;  // no times: not timed
    t.add(1, c.t1_ns - c.t0_ns, c.t0_ns, c.t1_ns);
  }

  FileSummary& out_;
  std::unordered_set<uint32_t> collectives_;                // ids of c10d ops
  std::unordered_map<uint32_t, CallLine> open_collective_;  // by thread: its last top-level call, a collective
  std::vector<uint64_t> counts_;
  std::vector<CallTimes> times_;
};

// A string field, or "" where it is absent or not a string.
std::string str(simdjson::simdjson_result<simdjson::dom::element> e) {
  std::string_view v;
  if (e.get_string().get(v)) return "";
  return std::string(v);
}

int64_t num(simdjson::dom::element e) {
  int64_t i;
  if (!e.get_int64().get(i)) return i;
  uint64_t u;
  if (!e.get_uint64().get(u)) return static_cast<int64_t>(u);
  return -1;
}

// A field that may be absent: -1 then.
int64_t optional_num(simdjson::simdjson_result<simdjson::dom::element> e) {
  simdjson::dom::element v;
  return e.get(v) ? -1 : num(v);
}

// {"a":1,...} into `out` (non-integers skipped).
void read_counts(simdjson::dom::object o, std::map<std::string, uint64_t>& out) {
  for (auto x : o)
    if (num(x.value) >= 0) out[std::string(x.key)] = static_cast<uint64_t>(num(x.value));
}
void read_counts(simdjson::simdjson_result<simdjson::dom::element> e, std::map<std::string, uint64_t>& out) {
  simdjson::dom::object o;
  if (!e.get_object().get(o)) read_counts(o, out);  // nothing when absent or not an object
}

// {"x":{"a":1},...} into `out`.
void read_nested_counts(simdjson::simdjson_result<simdjson::dom::element> e,
                        std::map<std::string, std::map<std::string, uint64_t>>& out) {
  simdjson::dom::object o;
  if (e.get_object().get(o)) return;
  for (auto x : o) {
    simdjson::dom::object inner;
    if (!x.value.get_object().get(inner)) read_counts(inner, out[std::string(x.key)]);
  }
}

// The "sampling" object: a count per key, or per reason a key was not sampled.
void read_sampling(simdjson::simdjson_result<simdjson::dom::element> e, FileSummary& f) {
  f.sampling.clear();
  f.unsampled.clear();
  simdjson::dom::object sampling;
  if (e.get_object().get(sampling)) return;
  for (auto field : sampling) {
    simdjson::dom::object reasons;
    if (!field.value.get_object().get(reasons)) {
      for (auto r : reasons) f.unsampled[std::string(r.key)] = static_cast<uint64_t>(num(r.value));
    } else if (num(field.value) >= 0) {
      f.sampling[std::string(field.key)] = static_cast<uint64_t>(num(field.value));
    }
  }
}

// A counts record replaces the file's counts so far: the last one holds the process's totals.
std::string read_counts_record(simdjson::dom::object obj, FileSummary& f) {
  simdjson::dom::object calls;
  if (obj["calls"].get_object().get(calls)) return "counts record without \"calls\"";
  f.counts.clear();
  for (auto field : calls) {
    int64_t n = num(field.value);
    if (n < 0) return "counts record with a non-integer count";
    f.counts[static_cast<uint32_t>(std::strtoul(std::string(field.key).c_str(), nullptr, 10))] =
        static_cast<uint64_t>(n);
  }
  f.dropped.clear();
  read_nested_counts(obj["dropped"], f.dropped);
  read_sampling(obj["sampling"], f);
  f.stage_gpu.clear();
  f.stage_gpu_lost.clear();
  read_nested_counts(obj["stage_gpu"], f.stage_gpu);
  read_counts(obj["stage_gpu_lost"], f.stage_gpu_lost);
  f.nested.clear();
  read_counts(obj["nested"], f.nested);
  f.compile_time.clear();
  read_counts(obj["compile_time"], f.compile_time);
  f.collectives.clear();
  read_nested_counts(obj["collectives"], f.collectives);
  bool fin = false;
  f.final_counts = !obj["final"].get_bool().get(fin) && fin;
  f.ended_by = str(obj["ended_by"]);
  f.has_counts = true;
  return "";
}

void read_header(simdjson::dom::object obj, FileSummary& f) {
  f.has_header = true;
  f.format = str(obj["format"]);
  f.run_id = str(obj["run_id"]);
  f.role = str(obj["role"]);
  f.rank = num(obj["rank"]);
  f.world_size = num(obj["world_size"]);
  f.pid = num(obj["pid"]);
  f.start_unix_ns = optional_num(obj["start_unix_ns"]);
  f.start_mono_ns = optional_num(obj["start_mono_ns"]);
  int64_t parent = -1;
  if (!obj["parent_pid"].get_int64().get(parent)) f.parent_pid = parent;
  simdjson::dom::object config;
  if (!obj["config"].get_object().get(config)) {
    f.ops = str(config["ops"]);
    f.ops_deny = str(config["ops_deny"]);
    bool flag = false;
    f.fold_scalars = !config["fold_scalars"].get_bool().get(flag) && flag;
    f.nested_calls = !config["nested"].get_bool().get(flag) && flag;
  }
}

// A snapshot or profile record.
Evidence read_evidence(std::string_view kind, simdjson::dom::object obj) {
  Evidence e;
  e.id = static_cast<uint32_t>(num(obj["id"]));
  e.seq = static_cast<uint64_t>(num(obj["seq"]));
  e.path = str(obj["path"]);
  e.sha256 = str(obj["sha256"]);
  if (kind == "profile") {
    e.status = str(obj["status"]);
    double d = 0;
    if (!obj["window_s"].get_double().get(d)) e.window_seconds = d;
    if (!obj["lock_wait_s"].get_double().get(d)) e.lock_wait_seconds = d;
  }
  return e;
}

PlanRecord read_plan(simdjson::dom::object obj) {
  PlanRecord p{str(obj["source"]),
               str(obj["error"]),
               str(obj["basis"]),
               static_cast<uint64_t>(std::max<int64_t>(0, num(obj["keys"]))),
               static_cast<uint64_t>(std::max<int64_t>(0, num(obj["ranked"]))),
               static_cast<uint64_t>(std::max<int64_t>(0, num(obj["over_budget"]))),
               static_cast<uint64_t>(std::max<int64_t>(0, num(obj["unranked"]))),
               0,
               {}};
  double d = 0;
  if (!obj["covered_share"].get_double().get(d)) p.covered_share = d;
  simdjson::dom::array unmet;
  if (!obj["unmet"].get_array().get(unmet))
    for (simdjson::dom::element e : unmet) {
      PlanRecord::Key k{str(e["input_sha256"]), str(e["op"]), str(e["stage"]), 0};
      if (!e["share"].get_double().get(d)) k.share = d;
      p.unmet.push_back(std::move(k));
    }
  return p;
}

std::string SummaryVisitor::read_signature(simdjson::dom::object obj) {
  int64_t id = num(obj["id"]);
  std::string sha = str(obj["sha256"]);
  std::string_view text;
  if (id < 0 || sha.size() != 64 || obj["signature_json"].get_string().get(text))
    return "signature record needs id, sha256 and signature_json";
  out_.signature_sha[static_cast<uint32_t>(id)] = sha;
  // Canonical text: the top-level op follows the kwargs object (a nested "op" key cannot occur).
  constexpr std::string_view kOp = "},\"op\":\"";
  if (const size_t at = text.find(kOp); at != std::string_view::npos && is_collective_op(text.substr(at + kOp.size())))
    collectives_.insert(static_cast<uint32_t>(id));
  if (!out_.signature_json.count(sha)) out_.signature_json.emplace(sha, std::string(text));
  return "";
}

std::string SummaryVisitor::record(std::string_view kind, simdjson::dom::object obj) {
  if (kind == "counts") return read_counts_record(obj, out_);
  if (kind == "signature") return read_signature(obj);
  if (kind == "header") {
    read_header(obj, out_);
  } else if (kind == "snapshot" || kind == "profile") {
    (kind == "snapshot" ? out_.snapshots : out_.profiles).push_back(read_evidence(kind, obj));
  } else if (kind == "kernel_timing") {
    KernelTiming t;
    t.id = static_cast<uint32_t>(num(obj["id"]));
    t.seq = static_cast<uint64_t>(num(obj["seq"]));
    t.status = str(obj["status"]);
    simdjson::dom::array kernels;
    if (!obj["kernels"].get_array().get(kernels)) t.kernels = simdjson::minify(kernels);
    double d = 0;
    if (!obj["window_s"].get_double().get(d)) t.window_seconds = d;
    out_.timings.push_back(std::move(t));
  } else if (kind == "refusal") {
    out_.refusals.push_back(Refusal{str(obj["input_sha256"]), str(obj["op"]), str(obj["stage"]), str(obj["evidence"]),
                                    str(obj["reason"]), static_cast<uint64_t>(std::max<int64_t>(0, num(obj["call"])))});
  } else if (kind == "plan") {
    out_.plans.push_back(read_plan(obj));
  }
  return "";
}

// The writer's own call-record layout, validated exactly (so it is valid
// JSON by construction) without a general parse:
//   {"depth":D,"id":I,"kind":"call","seq":S,"t0_ns":T,"t1_ns":T,"tid":N}
// Returns false for anything else; the caller then parses the line in full.
bool fast_call_line(const char* p, size_t n, CallLine& c) {
  const char* end = p + n;
  auto lit = [&](const char* s, size_t len) {
    if (static_cast<size_t>(end - p) < len || std::memcmp(p, s, len) != 0) return false;
    p += len;
    return true;
  };
  auto integer = [&](bool allow_negative, uint64_t& value) {
    const bool negative = allow_negative && p < end && *p == '-';
    if (negative) ++p;
    if (p >= end || *p < '0' || *p > '9') return false;
    if (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9') return false;  // no leading zeros
    uint64_t v = 0;
    const char* start = p;
    while (p < end && *p >= '0' && *p <= '9') v = v * 10 + static_cast<uint64_t>(*p++ - '0');
    if (p - start > 18) return false;  // leave huge numbers to the full parser
    value = negative ? uint64_t{0} - v : v;
    return true;
  };
  uint64_t depth, id, seq, t0, t1, tid;
#define LP_LIT(s) lit(s, sizeof(s) - 1)
  const bool ok = LP_LIT("{\"depth\":") && integer(false, depth) && LP_LIT(",\"id\":") && integer(false, id) &&
                  LP_LIT(",\"kind\":\"call\",\"seq\":") && integer(false, seq) && LP_LIT(",\"t0_ns\":") &&
                  integer(true, t0) && LP_LIT(",\"t1_ns\":") && integer(true, t1) && LP_LIT(",\"tid\":") &&
                  integer(false, tid) && LP_LIT("}") && p == end;
#undef LP_LIT
  if (!ok || id > UINT32_MAX || tid > UINT32_MAX || depth > UINT32_MAX) return false;
  c = CallLine{seq,
               static_cast<uint32_t>(id),
               static_cast<uint32_t>(tid),
               static_cast<uint32_t>(depth),
               static_cast<int64_t>(t0),
               static_cast<int64_t>(t1)};
  return true;
}

// Times outside [0, 2^62) are no clock's: the record is kept without times
// (0, 0), so sums of durations cannot overflow.
CallLine with_sane_times(CallLine c) {
  constexpr int64_t kLimit = int64_t{1} << 62;
  if (c.t0_ns < 0 || c.t1_ns < 0 || c.t0_ns >= kLimit || c.t1_ns >= kLimit) c.t0_ns = c.t1_ns = 0;
  return c;
}

// A parsed record to the visitor: a call record as a CallLine (its id
// required, other fields 0 where absent), anything else as it is.
// A record that lacks a field the visitor needs or holds one of the wrong
// type (simdjson throws for those) is answered as an error, not a crash
// (found by fuzz/fuzz_metadata_reader: a header without "rank").
std::string dispatch(RecordVisitor& v, simdjson::dom::element doc) {
  simdjson::dom::object obj;
  if (doc.get_object().get(obj)) return "not a JSON object";
  std::string_view kind;
  if (obj["kind"].get_string().get(kind)) return "no \"kind\"";
  try {
    if (kind != "call") return v.record(kind, obj);
    const int64_t id = num(obj["id"]);
    if (id < 0 || id > UINT32_MAX) return "call record without an integer id";
    auto field = [&obj](const char* name, int64_t max) {
      const int64_t x = optional_num(obj[name]);
      return x < 0 || x > max ? 0 : x;
    };
    int64_t t0 = 0, t1 = 0;
    if (obj["t0_ns"].get_int64().get(t0) || obj["t1_ns"].get_int64().get(t1)) t0 = t1 = 0;
    return v.call(with_sane_times(CallLine{static_cast<uint64_t>(field("seq", INT64_MAX)), static_cast<uint32_t>(id),
                                           static_cast<uint32_t>(field("tid", UINT32_MAX)),
                                           static_cast<uint32_t>(field("depth", UINT32_MAX)), t0, t1}));
  } catch (const simdjson::simdjson_error& e) {
    return std::string("a record without a field it needs, or with one of the wrong type (") + e.what() + ")";
  }
}

// Line-by-line parse of [p, p+n); returns "" or "LINE: what was wrong".
std::string parse_lines(RecordVisitor& v, simdjson::dom::parser& parser, const char* p, size_t n, uint64_t& line_no) {
  size_t start = 0;
  CallLine call;
  while (start < n) {
    const char* nl = static_cast<const char*>(std::memchr(p + start, '\n', n - start));
    const size_t len = static_cast<size_t>(nl - (p + start));
    ++line_no;
    std::string what;
    if (len > 0 && fast_call_line(p + start, len, call)) {
      what = v.call(with_sane_times(call));
    } else if (len > 0) {
      simdjson::dom::element doc;
      auto err = parser.parse(p + start, len, false).get(doc);
      what = err ? std::string("malformed JSON (") + simdjson::error_message(err) + ")" : dispatch(v, doc);
    }
    if (!what.empty()) return std::to_string(line_no) + ": " + what;
    start += len + 1;
  }
  return "";
}

// A last line without its newline: true when it parses and the visitor takes it.
bool take_last_line(RecordVisitor& v, simdjson::dom::parser& parser, const char* p, size_t n) {
  simdjson::dom::element doc;
  auto err = parser.parse(p, n, false).get(doc);
  return !err && dispatch(v, doc).empty();
}

}  // namespace

ReadResult stream_metadata_file(const std::string& path, RecordVisitor& visitor, StreamStats& stats,
                                const std::function<void(uint64_t)>& progress) {
  ReadResult r;
  stats = StreamStats{};
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) {
    r.status = format::Status(format::StatusCode::kIoFailed, path + ": cannot open: " + std::strerror(errno));
    return r;
  }
  format::Sha256Stream sha;
  simdjson::dom::parser parser;
  // One buffer: a carried-over partial line, then the next chunk, then
  // padding. Sized to the file (a small file reads into a small buffer),
  // grown to kChunk when a line is longer (the file grew while being read).
  struct stat st;
  const size_t size = ::fstat(fileno(file.get()), &st) == 0 ? static_cast<size_t>(st.st_size) : kChunk;
  size_t chunk = std::min(kChunk, std::max<size_t>(size + 1, 64u << 10));
  std::vector<char> buf(2 * chunk + simdjson::SIMDJSON_PADDING);
  size_t carry = 0;
  uint64_t line_no = 0, last_report = 0;
  for (;;) {
    size_t n = std::fread(buf.data() + carry, 1, chunk, file.get());
    if (n == 0 && std::ferror(file.get())) {
      r.status = format::Status(format::StatusCode::kIoFailed, path + ": read error: " + std::strerror(errno));
      return r;
    }
    sha.update(buf.data() + carry, n);
    stats.bytes += n;
    const bool eof = n == 0;
    size_t end = carry + n;
    std::memset(buf.data() + end, 0, simdjson::SIMDJSON_PADDING);
    const char* last_nl = end ? static_cast<const char*>(memrchr(buf.data(), '\n', end)) : nullptr;
    const size_t whole = last_nl ? static_cast<size_t>(last_nl - buf.data()) + 1 : 0;
    if (std::string what = parse_lines(visitor, parser, buf.data(), whole, line_no); !what.empty()) {
      r.status = format::Status(format::StatusCode::kBadInput, path + ":" + what);
      return r;
    }
    size_t start = whole;
    if (eof) {
      if (start < end) {
        ++line_no;
        stats.truncated_last_line = !take_last_line(visitor, parser, buf.data() + start, end - start);
      }
      break;
    }
    if (end - start > chunk) {
      if (chunk == kChunk) {
        r.status = format::Status(format::StatusCode::kTooLarge,
                                  path + ":" + std::to_string(line_no + 1) + ": a line longer than 16 MiB");
        return r;
      }
      chunk = kChunk;
      std::vector<char> bigger(2 * chunk + simdjson::SIMDJSON_PADDING);
      std::memcpy(bigger.data(), buf.data() + start, end - start);
      buf.swap(bigger);
      carry = end - start;
      continue;
    }
    std::memmove(buf.data(), buf.data() + start, end - start);
    carry = end - start;
    if (progress && stats.bytes - last_report >= (64u << 20)) {
      last_report = stats.bytes;
      progress(stats.bytes);
    }
  }
  stats.lines = line_no;
  stats.sha256 = sha.hex();
  return r;
}

ReadResult read_metadata_file(const std::string& path, FileSummary& out,
                              const std::function<void(uint64_t)>& progress) {
  out = FileSummary{};
  out.path = path;
  SummaryVisitor visitor(out);
  StreamStats stats;
  ReadResult r = stream_metadata_file(path, visitor, stats, progress);
  out.bytes = stats.bytes;
  if (!r.status.ok()) return r;
  visitor.finish();
  out.sha256 = stats.sha256;
  out.lines = stats.lines;
  out.truncated_last_line = stats.truncated_last_line;
  return r;
}

std::map<int64_t, const FileSummary*> last_process_per_rank(const std::vector<const FileSummary*>& rank_files) {
  std::map<int64_t, const FileSummary*> last;
  for (const FileSummary* f : rank_files) {
    const FileSummary*& l = last[f->rank];
    if (!l || f->start_unix_ns >= l->start_unix_ns) l = f;
  }
  return last;
}

}  // namespace lingprobe::audit
