#include "sink/snapshot_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "format/canonical_json.h"
#include "format/file_names.h"
#include "format/profile_files.h"
#include "format/sha256.h"
#include "sink/extension_library.h"
#include "sink/run_directory.h"
#include "runtime/snapshot_job.h"

namespace lingprobe::sink {

std::string file_name_part(const std::string& s) {
  std::string out = format::safe_name_part(s, 64);
  if (out.empty() || out[0] == '.') out = "_" + out;
  return out;
}

SnapshotWriter::SnapshotWriter(std::string run_dir, std::string who, MetadataWriter* metadata, Claims* claims)
    : run_dir_(std::move(run_dir)), who_(std::move(who)), metadata_(metadata), claims_(claims) {}

SnapshotWriter::~SnapshotWriter() { finalize(); }

void SnapshotWriter::add_signature(uint32_t id, const std::string& sha, const std::string& text) {
  std::lock_guard<std::mutex> lock(mu_);
  signatures_[id] = {sha, text};
}

void SnapshotWriter::set_who(const std::string& who) {
  std::lock_guard<std::mutex> lock(mu_);
  who_ = who;
}

bool SnapshotWriter::start_locked() {
  if (started_) return true;
  try {
    thread_ = std::thread([this] { run(); });
    started_ = true;
  } catch (const std::exception&) {
  }
  return started_;
}

void SnapshotWriter::submit(runtime::SnapshotJob job) {
  std::unique_lock<std::mutex> lock(mu_);
  const char* refused = stop_ ? "finalized" : !start_locked() ? "no_writer_thread" : nullptr;
  if (refused) {  // no thread: nothing can be written; say so to the sampler
    lock.unlock();
    if (job.done) job.done(runtime::SnapshotJob::Result::Dropped, refused, "", 0);
    return;
  }
  queue_.push_back(std::move(job));
  cv_.notify_one();
}

bool SnapshotWriter::run_chore(std::function<void()> chore) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stop_ || !start_locked()) return false;
  chores_.push_back(std::move(chore));
  cv_.notify_one();
  return true;
}

void SnapshotWriter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !chores_.empty(); });
    if (!chores_.empty()) {
      std::function<void()> chore = std::move(chores_.front());
      chores_.pop_front();
      lock.unlock();
      try {
        chore();
      } catch (...) {
      }
      chore = nullptr;
      lock.lock();
      continue;
    }
    if (queue_.empty()) break;  // stop_ and drained
    {
      runtime::SnapshotJob job = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      try {
        write_one(job);
      } catch (...) {  // never let the writer thread take the process down
        try {
          if (job.done) job.done(runtime::SnapshotJob::Result::Dropped, "internal_error", "", 0);
        } catch (...) {
        }
      }
    }  // the job goes before the lock is taken again: what it held may queue a chore (gpu/pinned_reserve)
    lock.lock();
    busy_ = false;
    idle_cv_.notify_all();
  }
}

void SnapshotWriter::finalize() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_) return;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

namespace {

// A directory descriptor, closed when it goes.
struct DirFd {
  int fd;
  explicit DirFd(int f) : fd(f) {}
  ~DirFd() {
    if (fd >= 0) ::close(fd);
  }
  DirFd(const DirFd&) = delete;
  DirFd& operator=(const DirFd&) = delete;
};

constexpr int kNewFile = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;

// Renames inside `dir` without ever replacing an existing file (another
// process's, e.g. a restarted rank's, under the same name): false with errno
// EEXIST then.
bool rename_new(int dir, const std::string& from, const std::string& to) {
  if (::renameat2(dir, from.c_str(), dir, to.c_str(), RENAME_NOREPLACE) == 0) return true;
  if (errno != EINVAL && errno != ENOSYS) return false;
  struct stat st;  // a filesystem without RENAME_NOREPLACE: check, then rename (a narrow race, no worse)
  if (::fstatat(dir, to.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    errno = EEXIST;
    return false;
  }
  return ::renameat(dir, from.c_str(), dir, to.c_str()) == 0;
}

bool exists_in(int dir, const std::string& name) {
  struct stat st;
  return dir >= 0 && ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

// A new file `name` in `dir`; false with errno set (ENOSPC for a short write: the disk is full).
bool write_whole(int dir, const std::string& name, const std::string& text) {
  const int fd = ::openat(dir, name.c_str(), kNewFile, 0644);
  if (fd < 0) return false;
  const ssize_t n = ::write(fd, text.data(), text.size());
  if (n >= 0 && n < static_cast<ssize_t>(text.size())) errno = ENOSPC;
  bool ok = n == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  const int saved = errno;
  ::close(fd);
  errno = saved;
  return ok;
}

int64_t monotonic_seconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec;
}

// A failed file operation's status by its errno: kNoSpace for a full disk (evidence pauses), else kIoFailed.
format::Status io_failure(int err, const std::string& what) {
  return format::Status(err == ENOSPC ? format::StatusCode::kNoSpace : format::StatusCode::kIoFailed,
                        what + ": " + std::strerror(err));
}

// The drop reason a failed write is counted under (the metadata's format).
const char* drop_reason(const format::Status& status) {
  switch (status.code()) {
    case format::StatusCode::kNoSpace: return "disk_full";
    case format::StatusCode::kTooLarge: return "too_large";
    default: return "write_error";
  }
}

}  // namespace

// snapshots/{stem}.pt through a temporary name: kNoSpace, kTooLarge (over the
// ZIP format's limits) or kIoFailed.
format::Status SnapshotWriter::write_snapshot(runtime::SnapshotJob& job, const std::string& stem, std::string& file_sha,
                                              uint64_t& bytes) {
  if (std::string e = make_directories(run_dir_); !e.empty()) return format::Status(format::StatusCode::kIoFailed, e);
  const DirFd dir(open_directory_beneath(run_dir_, "snapshots", true));
  if (dir.fd < 0) return io_failure(errno, run_dir_ + "/snapshots");
  const std::string final_name = stem + ".pt";
  const std::string tmp = "." + stem + ".pt.tmp" + std::to_string(getpid());
  ::unlinkat(dir.fd, tmp.c_str(), 0);  // a leftover of a pid this one reuses
  const int fd = ::openat(dir.fd, tmp.c_str(), kNewFile, 0644);
  if (fd < 0) return io_failure(errno, tmp);
  format::Sha256Stream digest;
  int write_errno = 0;
  format::ZipWriter zip([&](const void* data, size_t n) {
    digest.update(data, n);
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        write_errno = w < 0 ? errno : ENOSPC;
        return false;
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  });
  std::vector<format::BlobSource*> blobs;
  for (auto& b : job.blobs) blobs.push_back(b.get());
  const format::Status archive = format::write_snapshot_archive(job.document, blobs, zip);
  std::string err = archive.ok() ? std::string() : archive.message();
  job.blobs.clear();  // device copies go back now, whatever happened
  if (err.empty() && ::fsync(fd) != 0) err = std::string("fsync: ") + std::strerror(errno);
  ::close(fd);
  if (err.empty() && !rename_new(dir.fd, tmp, final_name)) err = std::strerror(errno);
  if (!err.empty()) {
    ::unlinkat(dir.fd, tmp.c_str(), 0);
    if (zip.status().code() == format::StatusCode::kTooLarge) return zip.status();
    return io_failure(write_errno ? write_errno : EIO, final_name + ": " + err);
  }
  file_sha = digest.hex();
  bytes = zip.bytes_written();
  return format::Status();
}

// profiles/{stem}/ through a temporary directory renamed at the end: kNoSpace or kIoFailed.
format::Status SnapshotWriter::write_profile(const runtime::SnapshotJob& job, const std::string& stem,
                                             const std::string& sha, const std::string& text,
                                             const std::string& snapshot_rel, std::string& manifest_sha) {
  using format::JsonValue;
  if (std::string e = make_directories(run_dir_); !e.empty()) return format::Status(format::StatusCode::kIoFailed, e);
  const DirFd dir(open_directory_beneath(run_dir_, "profiles", true));
  if (dir.fd < 0) return io_failure(errno, run_dir_ + "/profiles");
  const std::string tmp = "." + stem + ".tmp" + std::to_string(getpid());
  if (::mkdirat(dir.fd, tmp.c_str(), 0755) != 0) return io_failure(errno, tmp);
  const DirFd tmp_dir(::openat(dir.fd, tmp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  const format::ProfileData& p = job.profile;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  JsonValue identity = p.identity.kind() == JsonValue::Kind::Object ? p.identity : JsonValue::object();
  identity.set("signature_sha256", JsonValue::string(sha));
  identity.set("signature_json", JsonValue::string(text));
  identity.set("stage", JsonValue::string(job.stage));
  identity.set("rank", JsonValue::integer(job.rank));
  identity.set("seq", JsonValue::integer(static_cast<int64_t>(job.seq)));
  identity.set("pid", JsonValue::integer(getpid()));
  identity.set("host", JsonValue::string(host));
  identity.set("status", JsonValue::string(p.status));
  if (!p.reason.empty()) identity.set("reason", JsonValue::string(p.reason));
  identity.set("snapshot", snapshot_rel.empty() ? JsonValue::null() : JsonValue::string(snapshot_rel));
  identity.set("passes", JsonValue::integer(static_cast<int64_t>(p.passes)));
  identity.set("window_seconds", JsonValue::floating(p.window_seconds));
  identity.set("lock_wait_seconds", JsonValue::floating(p.lock_wait_seconds));
  JsonValue foreign = JsonValue::array();
  for (const auto& f : p.foreign_kernels) foreign.push_back(JsonValue::string(f));
  identity.set("foreign_kernels", std::move(foreign));
  std::string log = p.log;
  log += "status " + p.status + (p.reason.empty() ? "" : ": " + p.reason) + "\n";
  std::vector<std::pair<std::string, std::string>> files = {
      {"kernels.json", format::pretty_json(format::kernels_json(p)) + "\n"},
      {"metrics.csv", format::metrics_csv(p, getpid(), "python3", host)},
      {"identity.json", format::pretty_json(identity) + "\n"},
      {"run.log", log},
  };
  if (p.guard.kind() == JsonValue::Kind::Object)
    files.emplace_back("guard_own_pid_history.json", format::pretty_json(p.guard) + "\n");
  JsonValue sums = JsonValue::object();
  bool ok = tmp_dir.fd >= 0;
  for (const auto& [name, content] : files) {
    ok = ok && write_whole(tmp_dir.fd, name, content);
    sums.set(name, JsonValue::string(format::sha256_hex(content)));
  }
  const std::string manifest =
      format::pretty_json(JsonValue::object({{"status", JsonValue::string(p.status)}, {"sha256", std::move(sums)}})) +
      "\n";
  ok = ok && write_whole(tmp_dir.fd, "manifest.json", manifest);
  if (!ok || !rename_new(dir.fd, tmp, stem)) {
    const int err = errno ? errno : EIO;
    if (tmp_dir.fd >= 0) {
      for (const auto& f : files) ::unlinkat(tmp_dir.fd, f.first.c_str(), 0);
      ::unlinkat(tmp_dir.fd, "manifest.json", 0);
    }
    ::unlinkat(dir.fd, tmp.c_str(), AT_REMOVEDIR);
    return io_failure(err, "profiles/" + stem);
  }
  manifest_sha = format::sha256_hex(manifest);
  return format::Status();
}

// Evidence pauses; the first time in the process it says so on stderr (the metadata file, being small, may
// still fit: its writer's own message cannot be relied on to tell the user).
void SnapshotWriter::pause_for_full_disk() {
  disk_full_until_ = monotonic_seconds() + kDiskFullPauseSeconds;
  if (!said_disk_full_) {
    said_disk_full_ = true;
    std::fprintf(stderr,
                 "[lingprobe] the disk is full under '%s': snapshots and profiles pause for %lld s at a time "
                 "and are counted as dropped (disk_full); call records and counts go on\n",
                 run_dir_.c_str(), static_cast<long long>(kDiskFullPauseSeconds));
  }
}

// The file stem of a job's evidence: {stage}_{who}_{h16}, a sequence suffix
// for a signature this process already wrote, a pid suffix where another
// process wrote the same name (hash/none coordination).
std::string SnapshotWriter::file_stem(const runtime::SnapshotJob& job, const std::string& who, const std::string& sha,
                                      bool already_mine) const {
  std::string stem = file_name_part(job.stage) + "_" + who + "_" + sha.substr(0, 16);
  if (already_mine) stem += "_s" + std::to_string(job.seq);
  const DirFd snapshots(open_directory_beneath(run_dir_, "snapshots", false));
  const DirFd profiles(open_directory_beneath(run_dir_, "profiles", false));
  if (exists_in(snapshots.fd, stem + ".pt") || exists_in(profiles.fd, stem)) stem += "_p" + std::to_string(getpid());
  return stem;
}

// The snapshot file and its metadata record; its failure's status.
format::Status SnapshotWriter::keep_snapshot(runtime::SnapshotJob& job, const Evidence& e, uint64_t& bytes) {
  job.document.set("signature", format::PickleValue::string(e.text));
  job.document.set("signature_sha256", format::PickleValue::string(e.sha));
  if (const format::PickleValue* name = job.document.find("name");
      name && name->kind() == format::PickleValue::Kind::String) {
    // an extension's op: the library that registers it, which `lingprobe replay` loads (torchvision's _C)
    const std::string& op = name->as_string();
    if (std::string library = extension_library(op.substr(0, op.find("::"))); !library.empty())
      job.document.set("library", format::PickleValue::string(library));
  }
  std::string file_sha;
  format::Status status = write_snapshot(job, e.stem, file_sha, bytes);
  if (!status.ok()) return status;
  char line[512];
  std::snprintf(line, sizeof line,
                "{\"bytes\":%llu,\"id\":%u,\"kind\":\"snapshot\",\"path\":\"%s\",\"seq\":%llu,\"sha256\":\"%s\"}\n",
                static_cast<unsigned long long>(bytes), job.signature_id, e.snapshot_rel.c_str(),
                static_cast<unsigned long long>(job.seq), file_sha.c_str());
  metadata_->add_record(line);
  metadata_->wake();  // named on disk soon after the rename: a kill leaves little unrecorded
  return status;
}

// The profile directory and its metadata record; its failure's status.
format::Status SnapshotWriter::keep_profile(const runtime::SnapshotJob& job, const Evidence& e, bool snapshot_kept) {
  std::string manifest_sha;
  format::Status status = write_profile(job, e.stem, e.sha, e.text, snapshot_kept ? e.snapshot_rel : "", manifest_sha);
  if (!status.ok()) return status;
  std::string profile_status;
  format::write_json_string(job.profile.status, profile_status);
  char line[640];
  std::snprintf(line, sizeof line,
                "{\"id\":%u,\"kind\":\"profile\",\"lock_wait_s\":%.6f,\"path\":\"profiles/%s\",\"seq\":%llu,"
                "\"sha256\":\"%s\",\"status\":%s,\"window_s\":%.6f}\n",
                job.signature_id, job.profile.lock_wait_seconds, e.stem.c_str(),
                static_cast<unsigned long long>(job.seq), manifest_sha.c_str(), profile_status.c_str(),
                job.profile.window_seconds);
  metadata_->add_record(line);
  metadata_->wake();  // named on disk soon after the rename: a kill leaves little unrecorded
  return status;
}

void SnapshotWriter::keep_timing(const runtime::SnapshotJob& job) {
  format::JsonValue r = format::JsonValue::object();
  r.set("kind", format::JsonValue::string("kernel_timing"));
  r.set("id", format::JsonValue::integer(job.signature_id));
  r.set("seq", format::JsonValue::integer(static_cast<int64_t>(job.seq)));
  r.set("status", format::JsonValue::string(job.timing.status));
  if (!job.timing.reason.empty()) r.set("reason", format::JsonValue::string(job.timing.reason));
  r.set("window_s", format::JsonValue::floating(job.timing.window_seconds));
  if (const format::JsonValue* policy = job.timing.identity.find("math_policy")) r.set("math_policy", *policy);
  // window_s's parts on the op's thread, then the writer's reading of the records; how long after a counter
  // window's call on its GPU the call began (gpu/window_settle.h)
  for (const char* part :
       {"joined_session", "open_us", "stop_us", "records_wait_us", "flushes", "forced_flush", "since_counter_call_us"})
    if (const format::JsonValue* v = job.timing.identity.find(part)) r.set(part, *v);
  r.set("kernels", format::kernels_json(job.timing));
  metadata_->add_record(format::canonical_json(r) + "\n");
}

void SnapshotWriter::write_one(runtime::SnapshotJob& job) {
  using Result = runtime::SnapshotJob::Result;
  if (job.timed && job.complete_timing) job.timing = job.complete_timing();  // first: the window is given back
  job.timed = job.timed && job.timing.status == "passed";
  if (!job.timed && !job.snapshot && !job.profiled) return job.done(Result::Dropped, job.timing.status, "", 0);
  Evidence e;
  std::string who;
  bool already_mine = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = signatures_.find(job.signature_id);
    if (it != signatures_.end()) e.sha = it->second.first, e.text = it->second.second;
    who = who_;
    // a kind this process wrote before (SAMPLE_FIRST above 1): a sequence suffix; a first snapshot after this
    // process's own counters keeps the profile's stem
    already_mine = (job.snapshot && mine_snapshots_.count(e.sha)) || (job.profiled && mine_profiles_.count(e.sha));
  }
  if (e.sha.empty()) return job.done(Result::Dropped, "internal_error", "", 0);
  if (monotonic_seconds() < disk_full_until_)  // evidence stops while the disk is full; counts go on
    return job.done(Result::Dropped, "disk_full", e.sha, 0);
  // A timed call's record, kept whatever becomes of a snapshot taken with it (one the key's earlier call was
  // refused); a timed call alone is that record only: no file, no claim.
  if (job.timed) keep_timing(job);
  if (!job.snapshot && !job.profiled) return job.done(Result::Kept, "", e.sha, runtime::SnapshotJob::kKeptTiming);
  e.stem = file_stem(job, who, e.sha, already_mine);
  const Claimed claimed = claim_evidence(job, e);
  if (!job.snapshot && !job.profiled) return job.done(Result::Duplicate, "", e.sha, claimed.duplicates);
  e.snapshot_rel = job.snapshot ? "snapshots/" + e.stem + ".pt" : "";
  uint64_t bytes = 0;
  bool snapshot_kept = false;
  if (job.snapshot) {
    const format::Status snapshot = keep_snapshot(job, e, bytes);
    if (snapshot.code() == format::StatusCode::kNoSpace) pause_for_full_disk();
    snapshot_kept = snapshot.ok();
    if (!snapshot_kept && claimed.snapshot) unclaim(e.sha, Claims::SignatureEvidence::Snapshot);
    if (!snapshot_kept && !job.profiled) return job.done(Result::Dropped, drop_reason(snapshot), e.sha, 0);
  }
  bool profile_kept = false;
  if (job.profiled) {
    const format::Status profile = keep_profile(job, e, snapshot_kept);
    if (profile.code() == format::StatusCode::kNoSpace) pause_for_full_disk();
    profile_kept = profile.ok();
    if (!profile_kept && claimed.profile) unclaim(e.sha, Claims::SignatureEvidence::Profile);
  }
  if (!snapshot_kept && !profile_kept)
    return job.done(Result::Dropped, monotonic_seconds() < disk_full_until_ ? "disk_full" : "write_error", e.sha, 0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (snapshot_kept) mine_snapshots_.insert(e.sha);
    if (profile_kept && claimed.profile) mine_profiles_.insert(e.sha);
    written_ += snapshot_kept;  // a profile-only job (snapshots off) is no snapshot
    profiles_written_ += profile_kept;
    bytes_ += snapshot_kept ? bytes : 0;
  }
  job.done(Result::Kept, snapshot_kept ? e.snapshot_rel : "profiles/" + e.stem, e.sha,
           static_cast<uint8_t>((snapshot_kept ? runtime::SnapshotJob::kKeptSnapshot : 0) |
                                (profile_kept ? runtime::SnapshotJob::kKeptProfile : 0) |
                                (job.timed ? runtime::SnapshotJob::kKeptTiming : 0) | claimed.duplicates));
}

// Each kind of evidence is claimed once per signature in the launch (a kind
// this process wrote before needs no claim: a key's later samples, SAMPLE_FIRST).
// A kind the launch has already is taken off the job (kDuplicateSnapshot,
// kDuplicateProfile). Counters that did not pass are written unclaimed: they
// are no evidence, and another process's may pass.
SnapshotWriter::Claimed SnapshotWriter::claim_evidence(runtime::SnapshotJob& job, const Evidence& e) {
  Claimed c;
  if (!claims_) return c;
  bool snapshot_mine, profile_mine;
  {
    std::lock_guard<std::mutex> lock(mu_);
    snapshot_mine = mine_snapshots_.count(e.sha) > 0;
    profile_mine = mine_profiles_.count(e.sha) > 0;
  }
  if (job.snapshot && !snapshot_mine) {
    c.snapshot = claims_->claim_signature(e.sha, Claims::SignatureEvidence::Snapshot, "snapshots/" + e.stem + ".pt");
    job.snapshot = c.snapshot;
    c.duplicates |= c.snapshot ? 0 : runtime::SnapshotJob::kDuplicateSnapshot;
  }
  if (job.profiled && !profile_mine && job.profile.status == "passed") {
    c.profile = claims_->claim_signature(e.sha, Claims::SignatureEvidence::Profile, "profiles/" + e.stem);
    job.profiled = c.profile;
    c.duplicates |= c.profile ? 0 : runtime::SnapshotJob::kDuplicateProfile;
  }
  return c;
}

void SnapshotWriter::unclaim(const std::string& sha, Claims::SignatureEvidence kind) {
  if (claims_) claims_->unclaim_signature(sha, kind);
}

uint64_t SnapshotWriter::written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_;
}

uint64_t SnapshotWriter::profiles_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return profiles_written_;
}

uint64_t SnapshotWriter::bytes_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace lingprobe::sink
