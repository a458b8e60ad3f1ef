// The writer thread of one process: owns metadata/metadata_rank{R}_pid{P}.jsonl,
// drains every thread's RecordBuffer, writes signature records before the
// call records that use them, a cumulative "counts" record at every flush,
// and the final one at finalize (then fsync). Knows nothing of the
// dispatcher: signatures arrive as finished text, counts through a callback.
// The thread, the directory and the file start lazily, on first use.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/record_buffer.h"
#include "sink/run_directory.h"

namespace lingprobe::sink {

using format::CallRecord;
using format::CountsSnapshot;
using format::DropCounts;
using runtime::RecordBuffer;

struct WriterOptions {
  std::string path;         // the JSONL file (created new: O_EXCL)
  std::string header_json;  // the complete header object (one line, no newline)
  int64_t flush_interval_ms = 500;
  std::function<void()> on_open;  // after the file was created (e.g. the run directory's latest link)
  std::string run_dir;            // when `path` is below it: no symlink below it is followed on the way
};

struct WriterStats {
  uint64_t records_written = 0;  // lines of every kind
  uint64_t call_records_written = 0;
  uint64_t write_errors = 0;
};

class MetadataWriter {
 public:
  using CountsProvider = std::function<CountsSnapshot()>;
  using CycleHook = std::function<void()>;

  MetadataWriter(WriterOptions options, CountsProvider counts, CycleHook on_cycle = {});
  ~MetadataWriter();

  // A new per-thread buffer, owned by the writer (freed after close() and a
  // final drain). Thread-safe. Starts the writer thread on first use.
  RecordBuffer* register_buffer(size_t capacity);
  // Queues a signature record; it is written before any call record pushed
  // after this returns. Thread-safe.
  void add_signature(uint32_t id, const std::string& sha256, const std::string& canonical_json);
  // Builds a signature's SHA-256 and canonical JSON into its two arguments.
  using SignatureBuild = std::function<void(std::string& sha256, std::string& canonical_json)>;
  // As add_signature, the record built by `build` on the writer's thread, before the cycle that takes it writes
  // anything (a first sighting's calling thread then neither formats nor hashes). Thread-safe.
  void add_signature(uint32_t id, SignatureBuild build);
  // Queues one finished record line (newline included; a snapshot or profile
  // record), written in order with the signature records. Thread-safe.
  void add_record(std::string line);
  // Writes everything buffered now and a counts record; returns when done.
  void flush();
  // Final drain, final counts ("final":true, with "ended_by": how the process
  // ended, when given: "finalize", "exit", "SIGTERM"), fsync, close.
  // Idempotent; later calls of the other methods do nothing.
  void finalize(const std::string& ended_by = "");
  // The file is written at finalize even if nothing was recorded (its header
  // and a counts record), so that an audit can say what the process matched.
  void keep_even_if_empty();
  // Asks for a drain now, without waiting for it (a producer's buffer is
  // half full, or full under the block policy).
  void wake();

  // Changes the file's path and header while it is not yet created (a late
  // rank assignment); false once it exists (the first cycle with data).
  bool retarget(const std::string& path, const std::string& header_json);

  bool finalized() const { return finalized_.load(std::memory_order_acquire); }
  WriterStats stats() const;
  std::string path() const;
  // Starts the thread now (it opens the file only once there is data), so
  // that the cycle hook runs (control-file polling) before any recording.
  void start();

 private:
  void ensure_started_locked();
  void run();
  struct Line {
    int64_t signature_id;  // -1: not a signature record (a snapshot or profile record, the header)
    std::string text;      // newline included
    SignatureBuild build;  // a signature record to build first (text empty), else empty
  };
  // One drain and write; the counts record with it when `counts` (a flush asked for it, finalize) or when the last
  // one is a flush interval old: a wake (a snapshot written, a ring half full) drains without it, so that a run of
  // many wakes does not write its cumulative counts (one per signature) at each.
  void cycle(bool final, bool counts);
  void build_signature_lines(std::vector<Line>& lines);
  uint64_t drain(std::vector<Line>& signatures, bool& any_buffer);
  std::vector<size_t> append_must_lines(const std::vector<Line>& must);
  void append_counts_record(bool final);
  uint64_t account_short_write(size_t written, std::vector<Line>& must, const std::vector<size_t>& ends,
                               size_t calls_begin, uint64_t n_calls);
  bool open_file();
  size_t write_out(const std::string& text);

  WriterOptions options_;
  CountsProvider counts_;
  CycleHook on_cycle_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable flushed_cv_;
  uint64_t flush_requests_ = 0;
  uint64_t flushes_done_ = 0;
  bool flush_wants_counts_ = false;  // flush() asked: the next cycle writes the counts record
  bool stop_ = false;
  bool started_ = false;
  std::vector<std::unique_ptr<RecordBuffer>> buffers_;
  std::vector<Line> pending_lines_;
  std::thread thread_;

  mutable std::mutex io_mu_;  // one cycle at a time; guards options_.path and header_json
  int fd_ = -1;
  bool open_failed_ = false;
  std::string ended_by_;  // set by finalize before its last cycle
  std::atomic<bool> finalized_{false};
  bool has_data_ = false;  // a file is created only once something was recorded (or keep_even_if_empty)
  std::atomic<uint64_t> records_written_{0};
  std::atomic<uint64_t> call_records_written_{0};
  std::atomic<uint64_t> write_errors_{0};
  uint64_t lines_lost_ = 0;
  uint64_t file_bytes_ = 0;     // the file's length as written here (it is ours alone)
  bool end_half_line_ = false;  // a half line could not be cut back: the next write ends it
  std::vector<Line> retry_;     // lines a failed write left that must still be written (header, signatures, evidence)
  std::vector<bool> defined_;   // signature ids whose record is in the file: the only ids a counts record names
  std::string calls_text_;      // cycle()'s buffers, under io_mu_
  std::string out_text_;
  std::chrono::steady_clock::time_point last_counts_;  // under io_mu_: the last counts record's cycle
};

// One call record as its canonical JSON line, newline included, written to
// `out` (at least 192 bytes); returns the length. No allocation.
size_t format_call_record(const format::CallRecord& record, char* out);

}  // namespace lingprobe::sink
