// The evidence writer thread of one process: takes finished SnapshotJobs
// from the capture side, writes each one's snapshot to RUN_DIR/snapshots/
// {stem}.pt and its counters to RUN_DIR/profiles/{stem}/ (stem:
// {stage}_{who}_{h16}[_s{seq}], who: rank{R} or child{PID}) through
// temporary names, fsyncs and renames them, and only then queues their
// "snapshot" and "profile" records into the metadata file, so nothing
// half-written is ever named. One snapshot and one profile per signature per
// launch: each kind's claim is taken before writing it (a second process's
// sample of a kind the launch has is a counted duplicate, and the other kind
// is still written). A full
// disk pauses evidence for kDiskFullPauseSeconds at a time. Starts
// lazily; finalize() drains the queue (before the metadata writer's final
// flush). Knows nothing of the dispatcher.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>

#include "format/snapshot_file.h"
#include "format/status.h"
#include "sink/claims.h"
#include "sink/metadata_writer.h"
#include "runtime/snapshot_job.h"

namespace lingprobe::sink {

class SnapshotWriter {
 public:
  SnapshotWriter(std::string run_dir, std::string who, MetadataWriter* metadata, Claims* claims);
  ~SnapshotWriter();

  void add_signature(uint32_t id, const std::string& sha256, const std::string& canonical_json);
  void submit(runtime::SnapshotJob job);
  // Runs `chore` on the writer's thread before its next job: lingprobe's own slow work that no calling thread may
  // do (allocating and freeing pinned host memory, gpu/pinned_reserve). Any thread; false once finalize() has
  // begun, or without a thread: the caller then does it itself.
  bool run_chore(std::function<void()> chore);
  // Writes everything queued, then stops the thread. Idempotent.
  void finalize();
  void set_who(const std::string& who);

  uint64_t written() const;           // snapshot files
  uint64_t profiles_written() const;  // profile directories
  uint64_t bytes_written() const;     // of the snapshot files' tensors

 private:
  void run();
  bool start_locked();  // under mu_: the thread, started once; false if none could start
  // One job's signature and where its evidence goes.
  struct Evidence {
    std::string sha, text;     // the signature's SHA-256 and canonical JSON
    std::string stem;          // file_stem()
    std::string snapshot_rel;  // snapshots/{stem}.pt, "" without a snapshot
  };
  void write_one(runtime::SnapshotJob& job);
  struct Claimed {
    bool snapshot = false, profile = false;  // claimed by this job (given up again if its file is not kept)
    uint8_t duplicates = 0;                  // kDuplicateSnapshot, kDuplicateProfile
  };
  Claimed claim_evidence(runtime::SnapshotJob& job, const Evidence& e);
  void unclaim(const std::string& sha, Claims::SignatureEvidence kind);
  std::string file_stem(const runtime::SnapshotJob& job, const std::string& who, const std::string& sha,
                        bool already_mine) const;
  format::Status keep_snapshot(runtime::SnapshotJob& job, const Evidence& e, uint64_t& bytes);
  format::Status keep_profile(const runtime::SnapshotJob& job, const Evidence& e, bool snapshot_kept);
  // A timed call's kernel durations as a kernel_timing record (no file, no claim).
  void keep_timing(const runtime::SnapshotJob& job);
  void pause_for_full_disk();
  format::Status write_snapshot(runtime::SnapshotJob& job, const std::string& stem, std::string& file_sha,
                                uint64_t& bytes);
  format::Status write_profile(const runtime::SnapshotJob& job, const std::string& stem, const std::string& sha,
                               const std::string& text, const std::string& snapshot_rel, std::string& manifest_sha);

  std::string run_dir_, who_;
  MetadataWriter* metadata_;
  Claims* claims_;
  mutable std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<runtime::SnapshotJob> queue_;
  std::deque<std::function<void()>> chores_;
  bool busy_ = false, stop_ = false, started_ = false;
  std::thread thread_;
  std::unordered_map<uint32_t, std::pair<std::string, std::string>> signatures_;  // id -> (sha, text)
  std::set<std::string> mine_snapshots_, mine_profiles_;  // signatures whose evidence of that kind this process wrote
  uint64_t written_ = 0, profiles_written_ = 0, bytes_ = 0;
  int64_t disk_full_until_ = 0;  // CLOCK_MONOTONIC seconds; the writer thread's alone
  bool said_disk_full_ = false;  // the writer thread's alone
};

// After a write refused for space, snapshots and profiles are dropped
// ("disk_full") without touching the disk for this long, then tried again.
constexpr int64_t kDiskFullPauseSeconds = 10;

// A stage name as a file-name part: [A-Za-z0-9._-] kept, others '_', no leading dot.
std::string file_name_part(const std::string& s);

}  // namespace lingprobe::sink
