#include "sink/snapshot_writer.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "sink/run_directory.h"

namespace lingprobe::sink {

std::string file_name_part(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 64)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    out += ok ? c : '_';
  }
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

void SnapshotWriter::submit(format::SnapshotJob job) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stop_) {
    lock.unlock();
    if (job.done) job.done(format::SnapshotJob::Result::Dropped, "finalized", "");
    return;
  }
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { run(); });
  }
  queue_.push_back(std::move(job));
  cv_.notify_one();
}

void SnapshotWriter::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stop_ and drained
    format::SnapshotJob job = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    write_one(job);
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

void SnapshotWriter::write_one(format::SnapshotJob& job) {
  using Result = format::SnapshotJob::Result;
  std::string sha, text, who;
  bool already_mine = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = signatures_.find(job.signature_id);
    if (it != signatures_.end()) sha = it->second.first, text = it->second.second;
    who = who_;
    already_mine = mine_.count(sha) > 0;
  }
  if (sha.empty()) {
    job.done(Result::Dropped, "internal_error", "");
    return;
  }
  std::string name = file_name_part(job.stage) + "_" + who + "_" + sha.substr(0, 16);
  if (already_mine) name += "_s" + std::to_string(job.seq);
  name += ".pt";
  const std::string rel = "snapshots/" + name;
  if (!already_mine && claims_ && !claims_->claim_signature(sha, rel)) {
    job.done(Result::Duplicate, "", sha);
    return;
  }
  auto unclaim = [&] {
    if (!already_mine && claims_) claims_->unclaim_signature(sha);
  };
  const std::string dir = run_dir_ + "/snapshots";
  if (!make_directories(dir).empty()) {
    unclaim();
    job.done(Result::Dropped, "write_error", sha);
    return;
  }
  job.document.set("signature", format::PickleValue::string(text));
  job.document.set("signature_sha256", format::PickleValue::string(sha));
  const std::string final_path = dir + "/" + name;
  const std::string tmp = dir + "/." + name + ".tmp" + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    unclaim();
    job.done(Result::Dropped, "write_error", sha);
    return;
  }
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> digest(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  EVP_DigestInit_ex(digest.get(), EVP_sha256(), nullptr);
  int write_errno = 0;
  format::ZipWriter zip([&](const void* data, size_t n) {
    EVP_DigestUpdate(digest.get(), data, n);
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
  std::string err = format::write_snapshot_archive(job.document, blobs, zip);
  job.blobs.clear();  // device copies go back now, whatever happened
  if (err.empty() && ::fsync(fd) != 0) err = std::string("fsync: ") + std::strerror(errno);
  ::close(fd);
  if (err.empty() && std::rename(tmp.c_str(), final_path.c_str()) != 0) err = std::strerror(errno);
  if (!err.empty()) {
    ::unlink(tmp.c_str());
    unclaim();
    const bool too_large = err.find("4 GiB") != std::string::npos;
    job.done(Result::Dropped, too_large ? "too_large" : write_errno == ENOSPC ? "disk_full" : "write_error", sha);
    return;
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned md_len = 0;
  EVP_DigestFinal_ex(digest.get(), md, &md_len);
  static const char kHex[] = "0123456789abcdef";
  std::string file_sha;
  for (unsigned i = 0; i < md_len; ++i) file_sha += kHex[md[i] >> 4], file_sha += kHex[md[i] & 15];
  char line[512];
  std::snprintf(line, sizeof line,
                "{\"bytes\":%llu,\"id\":%u,\"kind\":\"snapshot\",\"path\":\"%s\",\"seq\":%llu,\"sha256\":\"%s\"}\n",
                static_cast<unsigned long long>(zip.bytes_written()), job.signature_id, rel.c_str(),
                static_cast<unsigned long long>(job.seq), file_sha.c_str());
  metadata_->add_record(line);
  {
    std::lock_guard<std::mutex> lock(mu_);
    mine_.insert(sha);
    ++written_;
    bytes_ += zip.bytes_written();
  }
  job.done(Result::Kept, rel, sha);
}

uint64_t SnapshotWriter::written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_;
}

uint64_t SnapshotWriter::bytes_written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t SnapshotWriter::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size() + (busy_ ? 1 : 0);
}

}  // namespace lingprobe::sink
