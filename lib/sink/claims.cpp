#include "sink/claims.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "sink/run_directory.h"

namespace lingprobe::sink {
namespace {

std::string hostname() {
  char h[256] = {0};
  gethostname(h, sizeof h - 1);
  return h;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The value of "key" in our own one-line JSON (strings and integers only).
std::string field(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\":";
  size_t p = json.find(k);
  if (p == std::string::npos) return "";
  p += k.size();
  if (p < json.size() && json[p] == '"') {
    const size_t e = json.find('"', p + 1);
    return e == std::string::npos ? "" : json.substr(p + 1, e - p - 1);
  }
  size_t e = p;
  while (e < json.size() && (std::isdigit(static_cast<unsigned char>(json[e])) || json[e] == '-')) ++e;
  return json.substr(p, e - p);
}

}  // namespace

uint64_t process_start_ticks(long pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(stat.substr(close + 2));
  std::string tok;
  for (int field_no = 3; in >> tok; ++field_no)
    if (field_no == 22) return std::strtoull(tok.c_str(), nullptr, 10);
  return 0;
}

Claims::Claims(std::string run_dir, int64_t rank)
    : run_dir_(std::move(run_dir)),
      dir_(run_dir_ + "/claims"),
      host_(hostname()),
      rank_(rank),
      start_ticks_(process_start_ticks(getpid())) {}

Claims::~Claims() {
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

bool Claims::ensure_dir() {
  if (dir_fd_ < 0 && make_directories(run_dir_).empty()) dir_fd_ = open_directory_beneath(run_dir_, "claims", true);
  return dir_fd_ >= 0;
}

std::string Claims::read_claim(const std::string& name) {
  const int fd = ::openat(dir_fd_, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0 && out.size() < 4096;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

bool Claims::write_claim(const std::string& path, const std::string& input_sha, const char* state, uint64_t bytes,
                         bool exclusive, int missing) {
  char line[512];
  const std::string missing_field = missing < 0 ? "" : "\"missing\":" + std::to_string(missing) + ",";
  std::snprintf(line, sizeof line,
                "{\"bytes\":%llu,\"host\":\"%s\",\"input_sha256\":\"%s\",%s\"pid\":%d,\"rank\":%lld,"
                "\"start_ticks\":%llu,\"state\":\"%s\"}\n",
                static_cast<unsigned long long>(bytes), host_.c_str(), input_sha.c_str(), missing_field.c_str(),
                static_cast<int>(getpid()), static_cast<long long>(rank_),
                static_cast<unsigned long long>(start_ticks_), state);
  const std::string target = exclusive ? path : path + ".tmp" + std::to_string(getpid());
  if (!exclusive) ::unlinkat(dir_fd_, target.c_str(), 0);  // a leftover of a pid this one reuses
  const int fd = ::openat(dir_fd_, target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const size_t n = std::strlen(line);
  const bool ok = ::write(fd, line, n) == static_cast<ssize_t>(n);
  ::close(fd);
  if (!exclusive) return ok && ::renameat(dir_fd_, target.c_str(), dir_fd_, path.c_str()) == 0;
  return true;  // the claim is ours even if its content could not be written
}

bool Claims::owner_gone(const std::string& claim_name) {
  struct stat st;
  if (::fstatat(dir_fd_, claim_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return false;
  const std::string c = read_claim(claim_name);
  if (c.empty()) return ::time(nullptr) - st.st_mtime > 60;  // created, never written: its owner died at once
  const std::string state = field(c, "state");
  if (state == "failed" || state == "partial") return true;
  if (state == "done" || field(c, "host") != host_) return false;  // another host's process: cannot tell
  const long pid = std::strtol(field(c, "pid").c_str(), nullptr, 10);
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return true;
  const uint64_t ticks = std::strtoull(field(c, "start_ticks").c_str(), nullptr, 10);
  return ticks && process_start_ticks(pid) != ticks;  // the pid was reused
}

Claims::Outcome Claims::claim_key(const std::string& sha, uint8_t& still_missing) {
  std::lock_guard<std::mutex> lock(mu_);
  still_missing = kAllEvidence;
  if (!ensure_dir()) return Outcome::Error;
  // The newest claim decides: free (none), taken, or its owner failed, died or left it partial.
  const std::string newest = newest_claim(sha);
  if (!newest.empty() && !owner_gone(newest)) return Outcome::Held;
  const std::string left = newest.empty() ? "" : field(read_claim(newest), "missing");
  if (!left.empty()) still_missing = static_cast<uint8_t>(std::strtoul(left.c_str(), nullptr, 10));
  const int n = newest.empty() ? 0 : std::atoi(newest.substr(newest.rfind('.') + 1).c_str()) + 1;
  const std::string path = "key-" + sha.substr(0, 16) + "." + std::to_string(n);
  // the part taken over goes on in this claim: should this owner die, its successor takes that part only
  if (!write_claim(path, sha, "claimed", 0, true, left.empty() ? -1 : still_missing))
    return errno == EEXIST ? Outcome::Held : Outcome::Error;
  mine_[sha] = n;
  return Outcome::Owned;
}

void Claims::release_key(const std::string& sha, Release how, uint64_t bytes, uint8_t missing) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mine_.find(sha);
  if (it == mine_.end()) return;
  if (!ensure_dir()) return;
  const char* state = how == Release::Done ? "done" : how == Release::Partial ? "partial" : "failed";
  write_claim("key-" + sha.substr(0, 16) + "." + std::to_string(it->second), sha, state, bytes, false,
              how == Release::Partial ? missing : -1);
}

std::string Claims::newest_claim(const std::string& sha) {
  const std::string base = "key-" + sha.substr(0, 16) + ".";
  int n = 0;
  struct stat st;
  while (::fstatat(dir_fd_, (base + std::to_string(n)).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) ++n;
  return n ? base + std::to_string(n - 1) : "";
}

Claims::KeyState Claims::key_state(const std::string& sha) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ensure_dir()) return KeyState::None;
  const std::string claim = newest_claim(sha);
  if (claim.empty()) return KeyState::None;
  if (owner_gone(claim)) return KeyState::Free;
  return field(read_claim(claim), "state") == "done" ? KeyState::Done : KeyState::InProgress;
}

namespace {

std::string signature_claim_name(const std::string& sha, Claims::SignatureEvidence kind) {
  return (kind == Claims::SignatureEvidence::Snapshot ? "sig-" : "prof-") + sha.substr(0, 16);
}

}  // namespace

bool Claims::claim_signature(const std::string& sha, SignatureEvidence kind, const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ensure_dir()) return true;  // no coordination possible: keep the sample
  const std::string p = signature_claim_name(sha, kind);
  const int fd = ::openat(dir_fd_, p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return errno != EEXIST;
  const std::string line = path + "\n";
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
  return true;
}

void Claims::unclaim_signature(const std::string& sha, SignatureEvidence kind) {
  std::lock_guard<std::mutex> lock(mu_);
  if (ensure_dir()) ::unlinkat(dir_fd_, signature_claim_name(sha, kind).c_str(), 0);
}

bool Claims::signature_claimed(const std::string& sha) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ensure_dir()) return false;
  struct stat st;
  for (SignatureEvidence kind : {SignatureEvidence::Snapshot, SignatureEvidence::Profile})
    if (::fstatat(dir_fd_, signature_claim_name(sha, kind).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) return true;
  return false;
}

bool Claims::reserve_bytes(uint64_t bytes, uint64_t limit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ensure_dir()) return true;
  const int fd = ::openat(dir_fd_, "bytes", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return true;
  bool ok = true;
  if (::flock(fd, LOCK_EX) == 0) {
    char buf[32] = {0};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    const uint64_t used = n > 0 ? std::strtoull(buf, nullptr, 10) : 0;
    ok = used + bytes <= limit;
    if (ok) {
      const std::string v = std::to_string(used + bytes) + "\n";
      (void)!::ftruncate(fd, 0);
      (void)!::pwrite(fd, v.data(), v.size(), 0);
    }
    ::flock(fd, LOCK_UN);
  }
  ::close(fd);
  return ok;
}

void Claims::give_back_bytes(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!ensure_dir()) return;
  const int fd = ::openat(dir_fd_, "bytes", O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  if (::flock(fd, LOCK_EX) == 0) {
    char buf[32] = {0};
    const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
    const uint64_t used = n > 0 ? std::strtoull(buf, nullptr, 10) : 0;
    const std::string v = std::to_string(used > bytes ? used - bytes : 0) + "\n";
    (void)!::ftruncate(fd, 0);
    (void)!::pwrite(fd, v.data(), v.size(), 0);
    ::flock(fd, LOCK_UN);
  }
  ::close(fd);
}

}  // namespace lingprobe::sink
