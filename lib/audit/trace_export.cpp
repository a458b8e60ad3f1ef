#include "audit/trace_export.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include <simdjson.h>

#include "audit/metadata_reader.h"
#include "audit/signature_text.h"
#include "format/canonical_json.h"
#include "format/json_parse.h"
#include "sink/run_directory.h"

namespace lingprobe::audit {
namespace {

using format::JsonValue;

std::string json_string(const std::string& s) { return format::canonical_json(JsonValue::string(s)); }

// The value with every non-finite float as the string Python's json writes
// for it ("NaN", "Infinity", "-Infinity"): strict JSON, as the trace-event
// format's readers need.
JsonValue finite_only(const JsonValue& v) {
  switch (v.kind()) {
    case JsonValue::Kind::Float:
      if (std::isnan(v.as_float())) return JsonValue::string("NaN");
      if (std::isinf(v.as_float())) return JsonValue::string(v.as_float() > 0 ? "Infinity" : "-Infinity");
      return v;
    case JsonValue::Kind::Array: {
      JsonValue a = JsonValue::array();
      for (const auto& x : v.items()) a.push_back(finite_only(x));
      return a;
    }
    case JsonValue::Kind::Object: {
      JsonValue o = JsonValue::object();
      for (const auto& [k, x] : v.members()) o.set(k, finite_only(x));
      return o;
    }
    default: return v;
  }
}

// Nanoseconds as microseconds with three decimals, exactly (no float rounding).
void append_us(std::string& out, int64_t ns) {
  char buf[40];
  const bool negative = ns < 0;
  const uint64_t a = negative ? uint64_t{0} - static_cast<uint64_t>(ns) : static_cast<uint64_t>(ns);
  std::snprintf(buf, sizeof buf, "%s%" PRIu64 ".%03" PRIu64, negative ? "-" : "", a / 1000, a % 1000);
  out += buf;
}

// What a call slice of one signature always says: its name, category and
// the constant part of its args.
struct SliceText {
  std::string head;  // "name":..,"cat":..,
  std::string args;  // ,"sha256":..,"inputs":..[,"scalars":[..]]
};

SliceText slice_text(const std::string& sha, const std::string& signature_json) {
  SliceText t;
  auto parsed = format::parse_json(signature_json);
  const JsonValue sig = parsed.status.ok() ? std::move(parsed.value) : JsonValue::object();
  const JsonValue* op = sig.find("op");
  const JsonValue* stage = sig.find("stage");
  const std::string op_name = op && op->kind() == JsonValue::Kind::String ? op->as_string() : "?";
  const std::string stage_name = stage && stage->kind() == JsonValue::Kind::String ? stage->as_string() : "unstaged";
  t.head = "\"name\":" + json_string(op_name) + ",\"cat\":" + json_string(stage_name) + ",";
  t.args = ",\"sha256\":" + json_string(sha) + ",\"signature\":" + json_string(short_signature(sig));
  JsonValue scalars = JsonValue::array();
  if (const JsonValue* args = sig.find("args"); args && args->kind() == JsonValue::Kind::Array)
    for (const auto& a : args->items())
      if (!(a.kind() == JsonValue::Kind::Object && a.find("shape")) && a.kind() != JsonValue::Kind::Array)
        scalars.push_back(finite_only(a));
  if (!scalars.items().empty()) t.args += ",\"scalars\":" + format::canonical_json(scalars);
  if (const JsonValue* kwargs = sig.find("kwargs"); kwargs && !kwargs->members().empty())
    t.args += ",\"kwargs\":" + format::canonical_json(finite_only(*kwargs));
  return t;
}

class Output {
 public:
  bool open(const std::string& path) {
    file_.reset(std::fopen(path.c_str(), "wb"));
    if (file_) std::setvbuf(file_.get(), nullptr, _IOFBF, 1 << 20);
    return file_ != nullptr;
  }
  // One event: its text without the enclosing braces.
  void event(const std::string& body) {
    std::fputs(first_ ? "\n{" : ",\n{", file_.get());
    first_ = false;
    std::fwrite(body.data(), 1, body.size(), file_.get());
    std::fputc('}', file_.get());
  }
  void raw(const std::string& text) { std::fwrite(text.data(), 1, text.size(), file_.get()); }
  bool close() {
    bool ok = std::ferror(file_.get()) == 0;
    ok = std::fclose(file_.release()) == 0 && ok;
    return ok;
  }

 private:
  struct Closer {
    void operator()(FILE* f) const {
      if (f) std::fclose(f);
    }
  };
  std::unique_ptr<FILE, Closer> file_;
  bool first_ = true;
};

// Pass 2 over one file: its call records as slices.
class TraceVisitor final : public RecordVisitor {
 public:
  TraceVisitor(const FileSummary& f, int64_t trace_pid, int64_t offset_ns, const TraceOptions& o, Output& out,
               TraceOutcome& outcome)
      : f_(f), pid_(trace_pid), offset_ns_(offset_ns), options_(o), out_(out), outcome_(outcome) {
    for (const auto& [id, sha] : f.signature_sha) {
      auto it = f.signature_json.find(sha);
      texts_.emplace(id, slice_text(sha, it == f.signature_json.end() ? "{}" : it->second));
    }
    for (const auto& e : f.snapshots) snapshots_.emplace(e.seq, &e);
    for (const auto& e : f.profiles) profiles_.emplace(e.seq, &e);
    for (const auto& t : f.timings) timings_.emplace(t.seq, &t);
    from_ns_ = o.from_s >= 0 ? static_cast<int64_t>(std::llround(o.from_s * 1e9)) : INT64_MIN;
    to_ns_ = o.to_s >= 0 ? static_cast<int64_t>(std::llround(o.to_s * 1e9)) : INT64_MAX;
  }

  std::string call(const CallLine& c) override {
    if (c.t0_ns == 0 && c.t1_ns == 0) {
      ++outcome_.without_times;
      return "";
    }
    int64_t t0, t1;
    if (__builtin_add_overflow(c.t0_ns, offset_ns_, &t0) ||
        __builtin_add_overflow(std::max(c.t1_ns, c.t0_ns), offset_ns_, &t1)) {  // times no clock gives
      ++outcome_.without_times;
      return "";
    }
    if (t1 < from_ns_ || t0 > to_ns_) {
      ++outcome_.outside_filters;
      return "";
    }
    if (options_.max_events && outcome_.slices >= options_.max_events) {
      ++outcome_.over_limit;
      return "";
    }
    ++outcome_.slices;
    Pending p{t0, t1, slice(c, t0, t1)};
    std::vector<Pending>& held = pending_[c.tid];
    if (c.depth == 0 || held.size() >= kMaxHeld) {
      held.push_back(std::move(p));
      flush(c.tid);
    } else {
      held.push_back(std::move(p));  // nested: written end-first, before its parent; held until the parent comes
    }
    return "";
  }
  std::string record(std::string_view, simdjson::dom::object) override { return ""; }

  void finish() {
    for (auto& [tid, held] : pending_) flush(tid);
  }

 private:
  struct Pending {
    int64_t t0, t1;
    std::string text;
  };
  static constexpr size_t kMaxHeld = 1 << 16;

  // A thread's held slices, parents before their children (start ascending, end descending).
  void flush(uint32_t tid) {
    std::vector<Pending>& held = pending_[tid];
    std::stable_sort(held.begin(), held.end(),
                     [](const Pending& a, const Pending& b) { return a.t0 != b.t0 ? a.t0 < b.t0 : a.t1 > b.t1; });
    for (const Pending& p : held) out_.event(p.text);
    held.clear();
  }

  std::string slice(const CallLine& c, int64_t t0, int64_t t1) {
    thread_track(c.tid);
    auto text = texts_.find(c.id);
    std::string s = "\"ph\":\"X\",\"pid\":" + std::to_string(pid_) + ",\"tid\":" + std::to_string(c.tid) + ",\"ts\":";
    append_us(s, t0);
    s += ",\"dur\":";
    append_us(s, t1 - t0);
    s += ",";
    if (text != texts_.end())
      s += text->second.head;
    else
      s += "\"name\":\"signature " + std::to_string(c.id) + " (undefined)\",\"cat\":\"unknown\",";
    s += "\"args\":{\"seq\":" + std::to_string(c.seq) + ",\"depth\":" + std::to_string(c.depth);
    if (text != texts_.end()) s += text->second.args;
    if (auto sn = snapshots_.find(c.seq); sn != snapshots_.end()) {
      s += ",\"snapshot\":" + json_string(sn->second->path);
      snapshot(c, t0, *sn->second);
    }
    if (auto pr = profiles_.find(c.seq); pr != profiles_.end()) {
      s += ",\"profile\":" + json_string(pr->second->path);
      window(c, t0, *pr->second);
    }
    if (auto tc = timings_.find(c.seq); tc != timings_.end()) {
      s += ",\"timed_call\":true";
      timed_call(c, t0, *tc->second);
    }
    return s + "}";
  }

  void thread_track(uint32_t tid) {
    if (!threads_.insert(tid).second) return;
    ++outcome_.threads;
    const std::string name = (static_cast<int64_t>(tid) == f_.pid ? "main thread " : "thread ") + std::to_string(tid);
    out_.event("\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(pid_) +
               ",\"tid\":" + std::to_string(tid) + ",\"args\":{\"name\":" + json_string(name) + "}");
  }

  void snapshot(const CallLine& c, int64_t t0, const Evidence& e) {
    ++outcome_.snapshots;
    std::string s =
        "\"ph\":\"i\",\"s\":\"t\",\"name\":\"snapshot\",\"cat\":\"lingprobe\",\"pid\":" + std::to_string(pid_) +
        ",\"tid\":" + std::to_string(c.tid) + ",\"ts\":";
    append_us(s, t0);
    out_.event(s + ",\"args\":{\"path\":" + json_string(e.path) + ",\"sha256\":" + json_string(e.sha256) +
               ",\"seq\":" + std::to_string(c.seq) + "}");
  }

  // A counter window opens before the call starts (after waiting for the
  // GPU's counter lock) and closes after it ends; the record keeps its wall
  // time and lock wait, so it is drawn from the call's start less the lock
  // wait, for its recorded length, on a track of its own beside the thread.
  void window(const CallLine& c, int64_t t0, const Evidence& e) {
    ++outcome_.windows;
    const uint64_t track = window_track(c.tid);
    const int64_t wait = e.lock_wait_seconds > 0 ? static_cast<int64_t>(std::llround(e.lock_wait_seconds * 1e9)) : 0;
    const int64_t length = e.window_seconds > 0 ? static_cast<int64_t>(std::llround(e.window_seconds * 1e9)) : 0;
    // The drawn start is the call's start less the lock wait, which the setup before the call makes late.
    const int64_t start = place_on_track(track, t0 - wait, std::max(length, wait));
    const std::string where = "\"pid\":" + std::to_string(pid_) + ",\"tid\":" + std::to_string(track) + ",\"ts\":";
    std::string s =
        "\"ph\":\"X\",\"name\":" + json_string("counter window (" + (e.status.empty() ? "unknown" : e.status) + ")") +
        ",\"cat\":\"lingprobe\"," + where;
    append_us(s, start);
    s += ",\"dur\":";
    append_us(s, std::max(length, wait));
    char secs[96];
    std::snprintf(secs, sizeof secs, ",\"window_s\":%.6f,\"lock_wait_s\":%.6f", std::max(e.window_seconds, 0.0),
                  std::max(e.lock_wait_seconds, 0.0));
    out_.event(s + ",\"args\":{\"path\":" + json_string(e.path) + ",\"seq\":" + std::to_string(c.seq) + secs + "}");
    if (wait <= 0) return;
    std::string w = "\"ph\":\"X\",\"name\":\"waiting for the counter lock\",\"cat\":\"lingprobe\"," + where;
    append_us(w, start);
    w += ",\"dur\":";
    append_us(w, wait);
    out_.event(w + ",\"args\":{\"seq\":" + std::to_string(c.seq) + "}");
  }

  // A timed call (a kernel_timing record: CUPTI Activity alone) opens no counter lock: drawn from the call's start
  // for its recorded length, on the thread's window track, its kernels' names and durations in its arguments.
  void timed_call(const CallLine& c, int64_t t0, const KernelTiming& t) {
    ++outcome_.timed_calls;
    const uint64_t track = window_track(c.tid);
    const int64_t length = t.window_seconds > 0 ? static_cast<int64_t>(std::llround(t.window_seconds * 1e9)) : 0;
    const int64_t start = place_on_track(track, t0, length);
    std::string s = "\"ph\":\"X\",\"name\":" + json_string("timed call (" + t.status + ")") +
                    ",\"cat\":\"lingprobe\",\"pid\":" + std::to_string(pid_) + ",\"tid\":" + std::to_string(track) +
                    ",\"ts\":";
    append_us(s, start);
    s += ",\"dur\":";
    append_us(s, length);
    char secs[48];
    std::snprintf(secs, sizeof secs, ",\"window_s\":%.6f", std::max(t.window_seconds, 0.0));
    out_.event(s + ",\"args\":{\"seq\":" + std::to_string(c.seq) + secs +
               ",\"kernels\":" + (t.kernels.empty() ? "[]" : t.kernels) + "}");
  }

  // Where a slice of `length` ns wanted at `earliest` starts on a window track: never before the previous slice
  // there ends (slices on one track must nest).
  int64_t place_on_track(uint64_t track, int64_t earliest, int64_t length) {
    int64_t& previous_end = window_end_[track];
    const int64_t start = std::max(earliest, previous_end);
    previous_end = start + length;
    return start;
  }

  // The track beside thread `tid` that holds its counter windows and timed calls (named at its first use).
  uint64_t window_track(uint32_t tid) {
    const uint64_t track = kWindowTrack + tid;
    if (threads_.insert(track).second)
      out_.event("\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(pid_) +
                 ",\"tid\":" + std::to_string(track) + ",\"args\":{\"name\":" +
                 json_string("counter windows and timed calls of thread " + std::to_string(tid)) + "}");
    return track;
  }

  static constexpr uint64_t kWindowTrack = uint64_t{1} << 30;  // above every Linux thread id (pid_max <= 2^22)

  const FileSummary& f_;
  const int64_t pid_, offset_ns_;
  const TraceOptions& options_;
  Output& out_;
  TraceOutcome& outcome_;
  int64_t from_ns_, to_ns_;
  std::unordered_map<uint32_t, SliceText> texts_;
  std::unordered_map<uint64_t, const Evidence*> snapshots_, profiles_;
  std::unordered_map<uint64_t, const KernelTiming*> timings_;
  std::map<uint32_t, std::vector<Pending>> pending_;
  std::set<uint64_t> threads_;
  std::map<uint64_t, int64_t> window_end_;  // by window track: the last window's end
};

std::string process_name(const FileSummary& f) {
  const std::string pid = std::to_string(f.pid);
  if (f.role == "rank") return "rank " + std::to_string(f.rank) + " (pid " + pid + ")";
  if (f.role == "single") return "single process (pid " + pid + ")";
  return f.role + " process pid " + pid + (f.parent_pid >= 0 ? " of pid " + std::to_string(f.parent_pid) : "") +
         " (rank " + std::to_string(f.rank) + ")";
}

// Pass 1's choice: the files to draw, the run's id and its earliest process start.
struct Chosen {
  std::vector<FileSummary> files;
  std::string run_id;
  int64_t base = INT64_MAX;
};

// Pass 1: headers, signatures and evidence of every file to draw.
bool choose_files(const TraceOptions& options, const std::vector<std::string>& files, TraceOutcome& outcome,
                  Chosen& chosen) {
  for (const auto& path : files) {
    FileSummary f;
    ReadResult r = read_metadata_file(path, f);
    if (!r.status.ok()) {
      outcome.status = r.status;
      return false;
    }
    if (!f.has_header) {
      outcome.warnings.push_back(f.bytes == 0 ? Warning{WarningCode::kEmptyFile, path + ": empty file; skipped"}
                                              : Warning{WarningCode::kNoHeader, path + ": no header record; skipped"});
      continue;
    }
    if (f.format != "lingprobe.metadata/1") {
      outcome.status = format::Status(format::StatusCode::kBadInput,
                                      path + ": format '" + f.format + "' is not lingprobe.metadata/1");
      return false;
    }
    if (!chosen.run_id.empty() && f.run_id != chosen.run_id) {
      outcome.status = format::Status(format::StatusCode::kBadInput,
                                      path + ": run_id '" + f.run_id + "' differs from '" + chosen.run_id +
                                          "' of the files before it; trace one launch's run directory");
      return false;
    }
    chosen.run_id = f.run_id;
    if (f.role == "launcher") continue;
    constexpr int64_t kClockLimit = int64_t{1} << 62;
    if (f.start_unix_ns < 0 || f.start_mono_ns < 0 || f.start_unix_ns >= kClockLimit ||
        f.start_mono_ns >= kClockLimit) {
      outcome.status = format::Status(format::StatusCode::kBadInput,
                                      path +
                                          ": its header lacks start_unix_ns/start_mono_ns (or holds no clock's value), "
                                          "so its clock cannot be aligned with the other processes'");
      return false;
    }
    chosen.base = std::min(chosen.base, f.start_unix_ns);  // the run's first process start, whichever ranks are drawn
    if (!options.ranks.empty() && !options.ranks.count(f.rank)) continue;
    if (f.truncated_last_line)
      outcome.warnings.push_back(
          {WarningCode::kTruncatedLastLine, path + ": truncated last line skipped (killed while writing?)"});
    chosen.files.push_back(std::move(f));
  }
  return true;
}

// The output's directory made and its temporary file (`tmp`, renamed into place at the end) opened.
bool open_output(const TraceOptions& options, const std::string& run_dir, Output& out, std::string& tmp,
                 TraceOutcome& outcome) {
  outcome.output_path = options.output.empty() ? run_dir + "/reports/trace.json" : options.output;
  const std::string dir = outcome.output_path.substr(
      0, outcome.output_path.rfind('/') == std::string::npos ? 0 : outcome.output_path.rfind('/'));
  if (!dir.empty())
    if (std::string err = sink::make_directories(dir); !err.empty()) {
      outcome.status = format::Status(format::StatusCode::kIoFailed, err);
      return false;
    }
  tmp = outcome.output_path + ".tmp" + std::to_string(::getpid());
  if (!out.open(tmp)) {
    outcome.status = format::Status(format::StatusCode::kIoFailed, "cannot write " + tmp + ": " + std::strerror(errno));
    return false;
  }
  return true;
}

// One process's track: its name and sort index, then pass 2 over its file.
ReadResult draw_process(const FileSummary& f, int64_t trace_pid, int64_t base, const TraceOptions& options, Output& out,
                        TraceOutcome& outcome) {
  ++outcome.processes;
  out.event("\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(trace_pid) +
            ",\"args\":{\"name\":" + json_string(process_name(f)) + "}");
  out.event("\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" + std::to_string(trace_pid) +
            ",\"args\":{\"sort_index\":" + std::to_string(std::max<int64_t>(f.rank, 0)) + "}");
  const int64_t offset = f.start_unix_ns - base - f.start_mono_ns;  // monotonic ns -> ns since the shared start
  TraceVisitor visitor(f, trace_pid, offset, options, out, outcome);
  StreamStats stats;
  ReadResult r = stream_metadata_file(f.path, visitor, stats);
  if (r.status.ok()) visitor.finish();
  return r;
}

// The end of traceEvents and the run's otherData: what was drawn and what was left out.
std::string trace_end(const std::string& run_id, int64_t base, const TraceOutcome& outcome) {
  char other[512];
  std::snprintf(
      other, sizeof other,
      "\n],\"otherData\":{\"lingprobe_run_id\":%s,\"start_unix_ns\":%lld,\"slices\":%llu,"
      "\"outside_from_to\":%llu,\"left_out_by_max_events\":%llu,\"call_records_without_times\":%llu}}\n",
      json_string(run_id).c_str(), static_cast<long long>(base), static_cast<unsigned long long>(outcome.slices),
      static_cast<unsigned long long>(outcome.outside_filters), static_cast<unsigned long long>(outcome.over_limit),
      static_cast<unsigned long long>(outcome.without_times));
  return other;
}

}  // namespace

TraceOutcome write_trace(const TraceOptions& options) {
  TraceOutcome outcome;
  std::string run_dir = options.run_dir;
  if (std::string why = sink::find_run_directory(run_dir); !why.empty()) {
    outcome.status = format::Status(format::StatusCode::kBadInput, why);
    return outcome;
  }
  const std::vector<std::string> files = sink::metadata_files(run_dir);
  if (files.empty()) {
    outcome.status =
        format::Status(format::StatusCode::kBadInput, "no metadata files (*.jsonl) in " + run_dir + "/metadata");
    return outcome;
  }
  Chosen chosen;
  if (!choose_files(options, files, outcome, chosen)) return outcome;
  if (chosen.files.empty()) {
    outcome.status =
        format::Status(format::StatusCode::kBadInput,
                       options.ranks.empty() ? "no process of " + run_dir + " wrote a header"
                                             : "no metadata file of the ranks asked for (--ranks) in " + run_dir);
    return outcome;
  }
  // Processes in rank order; the shared clock starts at the earliest process start.
  std::stable_sort(chosen.files.begin(), chosen.files.end(), [](const FileSummary& a, const FileSummary& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pid < b.pid;
  });
  std::string tmp;
  Output out;
  if (!open_output(options, run_dir, out, tmp, outcome)) return outcome;
  out.raw("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[");
  std::map<int64_t, int> pids_used;
  for (const FileSummary& f : chosen.files) {
    // Two processes of one run with one pid (ranks on different hosts): the later one drawn under a free number.
    int64_t trace_pid = f.pid;
    while (pids_used.count(trace_pid)) trace_pid += int64_t{1} << 22;  // above Linux's pid_max
    pids_used.emplace(trace_pid, 0);
    if (ReadResult r = draw_process(f, trace_pid, chosen.base, options, out, outcome); !r.status.ok()) {
      out.close();
      ::unlink(tmp.c_str());
      outcome.status = r.status;
      return outcome;
    }
  }
  out.raw(trace_end(chosen.run_id, chosen.base, outcome));
  if (!out.close() || std::rename(tmp.c_str(), outcome.output_path.c_str()) != 0) {
    outcome.status = format::Status(format::StatusCode::kIoFailed,
                                    "cannot write " + outcome.output_path + ": " + std::strerror(errno));
    ::unlink(tmp.c_str());
    return outcome;
  }
  if (outcome.over_limit)
    outcome.warnings.push_back({WarningCode::kEventsOverLimit, std::to_string(outcome.over_limit) +
                                                                   " call record(s) left out past --max-events " +
                                                                   std::to_string(options.max_events) +
                                                                   " (narrow the trace with --ranks or --from/--to)"});
  if (outcome.slices == 0)
    outcome.warnings.push_back(
        {WarningCode::kNothingToDraw,
         "no call record to draw (call records off, LINGPROBE_CALL_RECORDS=0, or outside the filters)"});
  return outcome;
}

}  // namespace lingprobe::audit
