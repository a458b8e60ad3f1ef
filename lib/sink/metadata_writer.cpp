#include "sink/metadata_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

#include "format/canonical_json.h"

namespace lingprobe::sink {
namespace {
constexpr size_t kRetryBytes = size_t{64} << 20;  // signature and evidence lines kept for a retry, at most
}  // namespace

// {"depth":..,"id":..,"kind":"call","seq":..,"t0_ns":..,"t1_ns":..,"tid":..}\n
// (canonical key order) into `out` (at least 192 bytes); returns the length.
size_t format_call_record(const CallRecord& r, char* out) {
  char* p = out;
  auto literal = [&p](const char* text, size_t n) {
    std::memcpy(p, text, n);
    p += n;
  };
  auto number = [&p](auto v) { p = std::to_chars(p, p + 24, v).ptr; };
  literal("{\"depth\":", 9);
  number(r.depth);
  literal(",\"id\":", 6);
  number(r.signature_id);
  literal(",\"kind\":\"call\",\"seq\":", 21);
  number(r.seq);
  literal(",\"t0_ns\":", 9);
  number(r.t0_ns);
  literal(",\"t1_ns\":", 9);
  number(r.t1_ns);
  literal(",\"tid\":", 7);
  number(r.tid);
  literal("}\n", 2);
  return static_cast<size_t>(p - out);
}

MetadataWriter::MetadataWriter(WriterOptions options, CountsProvider counts, CycleHook on_cycle)
    : options_(std::move(options)), counts_(std::move(counts)), on_cycle_(std::move(on_cycle)) {}

MetadataWriter::~MetadataWriter() { finalize(); }

void MetadataWriter::ensure_started_locked() {
  if (started_ || stop_) return;
  started_ = true;
  thread_ = std::thread([this] { run(); });
}

RecordBuffer* MetadataWriter::register_buffer(size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return nullptr;
  ensure_started_locked();
  buffers_.push_back(std::make_unique<RecordBuffer>(capacity));
  return buffers_.back().get();
}

namespace {

std::string signature_line(uint32_t id, const std::string& sha256, const std::string& canonical_json) {
  std::string line =
      "{\"id\":" + std::to_string(id) + ",\"kind\":\"signature\",\"sha256\":\"" + sha256 + "\",\"signature_json\":";
  format::write_json_string(canonical_json, line);
  line += "}\n";
  return line;
}

}  // namespace

void MetadataWriter::add_signature(uint32_t id, const std::string& sha256, const std::string& canonical_json) {
  std::string line = signature_line(id, sha256, canonical_json);
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return;
  ensure_started_locked();
  pending_lines_.push_back({id, std::move(line), {}});
}

void MetadataWriter::add_signature(uint32_t id, SignatureBuild build) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return;
  ensure_started_locked();
  pending_lines_.push_back({id, {}, std::move(build)});
}

void MetadataWriter::add_record(std::string line) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_) return;
  ensure_started_locked();
  pending_lines_.push_back({-1, std::move(line), {}});
}

void MetadataWriter::start() {
  std::lock_guard<std::mutex> lock(mu_);
  ensure_started_locked();
}

void MetadataWriter::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Every wake counts, one during a drain too (the producer's ring crossed half again while the writer drained
    // it: a wake that counted only when no request was pending was swallowed, and the writer slept its whole
    // interval). A drain serves every request made before it starts, so wakes never add drains.
    ++flush_requests_;
  }
  cv_.notify_one();
}

void MetadataWriter::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  if (stop_) return;
  ensure_started_locked();
  const uint64_t want = ++flush_requests_;
  flush_wants_counts_ = true;
  cv_.notify_one();
  flushed_cv_.wait(lock, [&] { return flushes_done_ >= want || stop_; });
}

void MetadataWriter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::milliseconds(options_.flush_interval_ms),
                 [&] { return stop_ || flush_requests_ > flushes_done_; });
    if (stop_) break;
    const uint64_t serving = flush_requests_;
    const bool counts = flush_wants_counts_;
    flush_wants_counts_ = false;
    lock.unlock();
    if (on_cycle_) on_cycle_();
    cycle(false, counts);
    lock.lock();
    flushes_done_ = serving;
    flushed_cv_.notify_all();
  }
}

bool MetadataWriter::open_file() {
  if (fd_ >= 0) return true;
  if (open_failed_) return false;
  const std::string& root = options_.run_dir;
  const size_t slash = options_.path.rfind('/');
  const bool beneath = !root.empty() && options_.path.compare(0, root.size() + 1, root + "/") == 0;
  std::string err = make_directories(beneath ? root : slash == std::string::npos ? "" : options_.path.substr(0, slash));
  if (!err.empty()) {
    std::fprintf(stderr, "[lingprobe] %s; metadata is not written (set LINGPROBE_OUT to a writable directory)\n",
                 err.c_str());
    open_failed_ = true;
    return false;
  }
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_NOFOLLOW | O_CLOEXEC;
  if (beneath) {  // nothing below the run directory is followed: RUN_DIR/metadata may not be a symlink
    const std::string rel = options_.path.substr(root.size() + 1);
    const size_t cut = rel.rfind('/');
    const int dir = open_directory_beneath(root, cut == std::string::npos ? "" : rel.substr(0, cut), true);
    fd_ = dir < 0 ? -1 : ::openat(dir, rel.substr(cut + 1).c_str(), kFlags, 0644);
    const int why = errno;
    if (dir >= 0) ::close(dir);
    errno = why;
  } else {
    fd_ = ::open(options_.path.c_str(), kFlags, 0644);
  }
  if (fd_ < 0) {
    std::fprintf(stderr, "[lingprobe] cannot open '%s': %s; metadata is not written\n", options_.path.c_str(),
                 std::strerror(errno));
    open_failed_ = true;
    return false;
  }
  // the file's first line, written with the first cycle's records
  retry_.push_back({-1, options_.header_json + "\n", {}});
  if (options_.on_open) options_.on_open();
  return true;
}

bool MetadataWriter::retarget(const std::string& path, const std::string& header_json) {
  std::lock_guard<std::mutex> io(io_mu_);
  if (fd_ >= 0 || open_failed_) return false;
  options_.path = path;
  options_.header_json = header_json;
  return true;
}

std::string MetadataWriter::path() const {
  std::lock_guard<std::mutex> io(io_mu_);
  return options_.path;
}

// Writes `text` at the file's end and returns how many of its bytes are now
// in the file: always whole lines. A write that fails part-way (disk full)
// is cut back (ftruncate) to the end of its last whole line, so that the file
// never holds half a line before later ones; the caller keeps or counts the rest.
size_t MetadataWriter::write_out(const std::string& text) {
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int why = n < 0 ? errno : ENOSPC;
      const size_t whole = off == 0 ? 0 : text.rfind('\n', off - 1) + 1;  // no newline: npos + 1 == 0
      if (whole < off && ::ftruncate(fd_, static_cast<off_t>(file_bytes_ + whole)) != 0) {
        file_bytes_ += off;  // the half line stays: the next write ends it first (one malformed line, not a merge)
        end_half_line_ = true;
      } else {
        file_bytes_ += whole;
      }
      if (write_errors_.fetch_add(1, std::memory_order_relaxed) == 0)
        std::fprintf(stderr,
                     "[lingprobe] writing '%s' failed: %s; the writer keeps signature and evidence records "
                     "and retries them, call records that do not fit are dropped and counted\n",
                     options_.path.c_str(), std::strerror(why));
      return whole;
    }
    off += static_cast<size_t>(n);
  }
  file_bytes_ += off;
  return off;
}

namespace {

// {"key":value,...} in the map's (sorted, so canonical) order, each value written by `put`.
template <typename Map, typename Put>
void append_object(const Map& m, std::string& text, Put put) {
  text += '{';
  bool first = true;
  for (const auto& [key, value] : m) {
    if (!first) text += ',';
    first = false;
    format::write_json_string(key, text);
    text += ':';
    put(value);
  }
  text += '}';
}

// {"a":1,...}
void append_counts(const std::map<std::string, uint64_t>& m, std::string& text) {
  append_object(m, text, [&text](uint64_t n) { text += std::to_string(n); });
}

// {"x":{"a":1},...}
void append_nested_counts(const std::map<std::string, std::map<std::string, uint64_t>>& m, std::string& text) {
  append_object(m, text, [&text](const std::map<std::string, uint64_t>& inner) { append_counts(inner, text); });
}

}  // namespace

// Calls first (into calls_text_), then the signatures queued before them: a
// call's signature was queued before the call was pushed. Frees the buffers
// of exited threads once drained. Returns the calls drained.
uint64_t MetadataWriter::drain(std::vector<Line>& signatures, bool& any_buffer) {
  std::vector<RecordBuffer*> buffers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& b : buffers_) buffers.push_back(b.get());
  }
  any_buffer = !buffers.empty();
  uint64_t n_calls = 0;
  char line[192];
  for (RecordBuffer* b : buffers)
    n_calls += b->drain([&](const CallRecord& r) { calls_text_.append(line, format_call_record(r, line)); });
  std::lock_guard<std::mutex> lock(mu_);
  signatures.swap(pending_lines_);
  for (auto it = buffers_.begin(); it != buffers_.end();) {
    if ((*it)->closed() && (*it)->empty())
      it = buffers_.erase(it);
    else
      ++it;
  }
  return n_calls;
}

// Lines that must reach the file (the header, signature, snapshot and profile
// records), those a failed write left first, appended to out_text_; each
// signature counts as defined (taken back if the write fails). Returns each
// line's end in out_text_.
std::vector<size_t> MetadataWriter::append_must_lines(const std::vector<Line>& must) {
  std::string& text = out_text_;
  if (end_half_line_) text = "\n";
  end_half_line_ = false;
  std::vector<size_t> ends;
  for (const Line& l : must) {
    text += l.text;
    ends.push_back(text.size());
    if (l.signature_id >= 0) {
      if (defined_.size() <= static_cast<size_t>(l.signature_id)) defined_.resize(l.signature_id + 1024);
      defined_[l.signature_id] = true;
    }
  }
  return ends;
}

// The cumulative counts record, appended to out_text_.
void MetadataWriter::append_counts_record(bool final) {
  std::string& text = out_text_;
  CountsSnapshot snap = counts_ ? counts_() : CountsSnapshot{};
  if (lines_lost_) snap.dropped["lines"]["write_error"] = lines_lost_;
  text += "{\"calls\":{";
  bool first = true;
  for (const auto& [id, n] : snap.calls) {
    // An id counted whose record is still queued (registered after this cycle took the queue): named by a
    // later counts record, once its signature is in the file before it (a kill here leaves no dangling id).
    if (id >= defined_.size() || !defined_[id]) continue;
    if (!first) text += ',';
    first = false;
    text += '"' + std::to_string(id) + "\":" + std::to_string(n);
  }
  text += '}';
  if (!snap.collectives.empty()) {
    text += ",\"collectives\":";
    append_nested_counts(snap.collectives, text);
  }
  if (!snap.compile_time.empty()) {
    text += ",\"compile_time\":";
    append_counts(snap.compile_time, text);
  }
  text += ",\"dropped\":";
  append_nested_counts(snap.dropped, text);
  if (final && !ended_by_.empty()) text += ",\"ended_by\":\"" + ended_by_ + '"';  // a fixed word, never escaped
  text += std::string(",\"final\":") + (final ? "true" : "false") + ",\"kind\":\"counts\"";
  if (!snap.nested.empty()) {
    text += ",\"nested\":";
    append_counts(snap.nested, text);
  }
  if (!snap.sampling.empty()) {  // the figures and, among them in key order, the unsampled reasons
    std::map<std::string, std::string> fields;
    for (const auto& [key, n] : snap.sampling) fields[key] = std::to_string(n);
    append_counts(snap.unsampled, fields["unsampled"]);
    text += ",\"sampling\":";
    append_object(fields, text, [&text](const std::string& rendered) { text += rendered; });
  }
  if (!snap.stage_gpu.empty()) {
    text += ",\"stage_gpu\":";
    append_nested_counts(snap.stage_gpu, text);
  }
  if (!snap.stage_gpu_lost.empty()) {
    text += ",\"stage_gpu_lost\":";
    append_counts(snap.stage_gpu_lost, text);
  }
  text += "}\n";
}

// After a write of out_text_ that stopped at `written`: the must-lines it did
// not reach are retried next cycle (up to a bound: a disk that stays full), the
// call records it did not reach are lost. Returns the call records written.
uint64_t MetadataWriter::account_short_write(size_t written, std::vector<Line>& must, const std::vector<size_t>& ends,
                                             size_t calls_begin, uint64_t n_calls) {
  size_t retry_bytes = 0;
  for (size_t i = 0; i < must.size(); ++i) {
    if (ends[i] <= written) continue;
    if (must[i].signature_id >= 0) defined_[must[i].signature_id] = false;
    retry_bytes += must[i].text.size();
    if (retry_bytes <= kRetryBytes)
      retry_.push_back(std::move(must[i]));
    else
      ++lines_lost_;
  }
  const std::string& text = out_text_;
  const size_t calls_end = calls_begin + calls_text_.size();  // the counts record follows
  const size_t from = std::max(written, calls_begin);
  const uint64_t lost =
      from < calls_end ? static_cast<uint64_t>(std::count(text.begin() + from, text.begin() + calls_end, '\n')) : 0;
  lines_lost_ += lost;
  return n_calls - lost;
}

// The signatures handed over to be built here, built before any of them is written. One that fails (out of memory)
// is left out, counted as lost: its id stays undefined, so no counts record names it.
void MetadataWriter::build_signature_lines(std::vector<Line>& lines) {
  for (auto it = lines.begin(); it != lines.end();) {
    if (!it->build) {
      ++it;
      continue;
    }
    try {
      std::string sha256, canonical_json;
      it->build(sha256, canonical_json);
      it->text = signature_line(static_cast<uint32_t>(it->signature_id), sha256, canonical_json);
      it->build = nullptr;
      ++it;
    } catch (...) {
      it = lines.erase(it);
      ++lines_lost_;
    }
  }
}

void MetadataWriter::cycle(bool final, bool counts) {
  std::lock_guard<std::mutex> io(io_mu_);
  calls_text_.clear();  // members: their capacity is kept from cycle to cycle
  out_text_.clear();
  std::vector<Line> signatures;
  bool any_buffer = false;
  const uint64_t n_calls = drain(signatures, any_buffer);
  build_signature_lines(signatures);
  has_data_ = has_data_ || n_calls || !signatures.empty() || any_buffer;
  if (!has_data_) return;
  if (!open_file()) {
    lines_lost_ += n_calls + signatures.size();
    return;
  }
  std::vector<Line> must;
  must.swap(retry_);
  for (auto& s : signatures) must.push_back(std::move(s));
  const std::vector<size_t> ends = append_must_lines(must);
  const size_t calls_begin = out_text_.size();
  out_text_ += calls_text_;
  const auto now = std::chrono::steady_clock::now();
  counts = counts || now - last_counts_ >= std::chrono::milliseconds(options_.flush_interval_ms);
  if (counts) {
    append_counts_record(final);
    last_counts_ = now;
  }
  const std::string& text = out_text_;
  const size_t written = write_out(text);
  // Counted by position only after a failed write: the common path costs nothing per record.
  const uint64_t lines = written == text.size()
                             ? must.size() + n_calls + (counts ? 1 : 0)
                             : static_cast<uint64_t>(std::count(text.begin(), text.begin() + written, '\n'));
  const uint64_t calls_written =
      written == text.size() ? n_calls : account_short_write(written, must, ends, calls_begin, n_calls);
  records_written_.fetch_add(lines, std::memory_order_relaxed);
  call_records_written_.fetch_add(calls_written, std::memory_order_relaxed);
  if (final && fd_ >= 0) ::fsync(fd_);
}

void MetadataWriter::keep_even_if_empty() {
  std::lock_guard<std::mutex> io(io_mu_);
  has_data_ = true;
}

void MetadataWriter::finalize(const std::string& ended_by) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  ended_by_ = ended_by;  // the writer thread is joined below before the cycle that reads it
  cv_.notify_all();
  flushed_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (started_ || has_data_) cycle(true, true);
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  finalized_.store(true, std::memory_order_release);
}

WriterStats MetadataWriter::stats() const {
  WriterStats s;
  s.records_written = records_written_.load(std::memory_order_relaxed);
  s.call_records_written = call_records_written_.load(std::memory_order_relaxed);
  s.write_errors = write_errors_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace lingprobe::sink
