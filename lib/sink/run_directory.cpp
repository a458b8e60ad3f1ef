#include "sink/run_directory.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace lingprobe::sink {

std::string run_directory(const std::string& out_root, const std::string& run_id) {
  std::string root = out_root;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root + "/" + run_id;
}

std::string check_writable_directory(const std::string& dir) {
  if (dir.empty()) return "the directory path is empty";
  std::string existing = dir;
  struct stat st;
  while (::stat(existing.c_str(), &st) != 0) {
    if (errno != ENOENT) return "cannot look at '" + existing + "': " + std::strerror(errno);
    const size_t slash = existing.find_last_of('/', existing.size() > 1 ? existing.size() - 2 : 0);
    existing = slash == std::string::npos ? "." : slash == 0 ? "/" : existing.substr(0, slash);
  }
  if (!S_ISDIR(st.st_mode))
    return "'" + existing + "' is a file, not a directory" + (existing == dir ? "" : " (on the way to '" + dir + "')");
  if (::access(existing.c_str(), W_OK | X_OK) != 0)
    return "'" + existing + "' is not writable by this process: " + std::strerror(errno);
  // access() says yes to root everywhere: a directory made and removed at once says whether entries can be made
  // there (not under /proc, not on a read-only file system).
  std::string probe = (existing == "/" ? "" : existing) + "/.lingprobe-probe-XXXXXX";
  if (!::mkdtemp(probe.data())) return "cannot create anything in '" + existing + "': " + std::strerror(errno);
  ::rmdir(probe.c_str());
  return "";
}

std::string check_file_path(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? "'" + path + "' is a directory, not a file" : "";
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "'" + dir + "' is not a directory";
  return "";
}

std::string make_directories(const std::string& dir) {
  if (dir.empty()) return "";
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    partial = dir.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      return "cannot create directory '" + partial + "': " + std::strerror(errno);
  }
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "'" + dir + "' is not a directory";
  return "";
}

int open_directory_beneath(const std::string& run_dir, const std::string& rel_dir, bool create) {
  int fd = ::open(run_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  size_t start = 0;
  while (fd >= 0 && start < rel_dir.size()) {
    size_t slash = rel_dir.find('/', start);
    if (slash == std::string::npos) slash = rel_dir.size();
    const std::string name = rel_dir.substr(start, slash - start);
    start = slash + 1;
    if (name.empty() || name == ".") continue;
    if (name == "..") {
      ::close(fd);
      errno = EINVAL;
      return -1;
    }
    if (create && ::mkdirat(fd, name.c_str(), 0755) != 0 && errno != EEXIST) {
      const int why = errno;
      ::close(fd);
      errno = why;
      return -1;
    }
    const int next = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int why = errno;
    ::close(fd);
    errno = why;
    fd = next;
  }
  return fd;
}

std::vector<std::string> metadata_files(const std::string& run_dir) {
  std::vector<std::string> files;
  if (DIR* d = ::opendir((run_dir + "/metadata").c_str())) {
    while (dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n.size() > 6 && n.compare(n.size() - 6, 6, ".jsonl") == 0) files.push_back(run_dir + "/metadata/" + n);
    }
    ::closedir(d);
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string run_directory_error(const std::string& dir) {
  struct stat st;
  if (!dir.empty() && ::stat((dir + "/metadata").c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return "";
  if (dir.empty() || (::stat(dir.c_str(), &st) != 0 && errno == ENOENT))
    return "'" + dir + "' does not exist: give a run directory OUT/{run_id}, or OUT/latest for the newest launch";
  return "'" + dir +
         "' is not a run directory (it has no metadata/ folder): give OUT/{run_id}, or OUT/latest for the "
         "newest launch";
}

std::vector<std::string> launches_in(const std::string& out_root) {
  std::vector<std::string> launches;
  if (DIR* d = ::opendir(out_root.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name, path = out_root + "/" + name;
      struct stat st;
      if (name[0] != '.' && ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && run_directory_error(path).empty())
        launches.push_back(name);
    }
    ::closedir(d);
  }
  std::sort(launches.begin(), launches.end());
  return launches;
}

std::string find_run_directory(std::string& dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (run_directory_error(dir).empty()) return "";
  const std::vector<std::string> launches = launches_in(dir);
  if (launches.size() == 1) {
    dir += "/" + launches[0];
    return "";
  }
  if (launches.empty()) return run_directory_error(dir);
  std::string names;
  for (const auto& n : launches) names += (names.empty() ? "" : ", ") + n;
  return "'" + dir + "' holds " + std::to_string(launches.size()) + " launches (" + names +
         "): give one, OUT/{run_id}, " + "or " + dir + "/latest for the newest";
}

std::string replace_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return "cannot write " + path + ": " + why;
  }
  return "";
}

void link_latest(const std::string& out_root, const std::string& run_id) {
  const std::string link = run_directory(out_root, "latest");
  char current[4096];
  const ssize_t n = ::readlink(link.c_str(), current, sizeof current - 1);
  if (n >= 0 && std::string(current, static_cast<size_t>(n)) == run_id) return;
  struct stat st;
  if (::lstat(link.c_str(), &st) == 0 && !S_ISLNK(st.st_mode)) return;  // not ours: leave it
  const std::string tmp = link + ".tmp" + std::to_string(::getpid());
  ::unlink(tmp.c_str());
  if (::symlink(run_id.c_str(), tmp.c_str()) != 0) return;
  if (std::rename(tmp.c_str(), link.c_str()) != 0) ::unlink(tmp.c_str());
}

}  // namespace lingprobe::sink
