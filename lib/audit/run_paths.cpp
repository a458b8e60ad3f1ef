#include "audit/run_paths.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>

namespace lingprobe::audit {

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::pair<uint64_t, uint64_t> file_identity(const std::string& p) {
  struct stat st;
  if (::stat(p.c_str(), &st) != 0) return {0, 0};
  return {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string parent(const std::string& p) {
  const size_t s = p.find_last_of('/');
  return s == std::string::npos ? "." : (s == 0 ? "/" : p.substr(0, s));
}

std::string basename(const std::string& p) {
  const size_t s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

std::string strip_slash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string relative(const std::string& path, const std::string& base) {
  const std::string b = strip_slash(base) + "/";
  if (b != "./" && path.compare(0, b.size(), b) == 0) return path.substr(b.size());
  if (b == "./" && path.compare(0, 2, "./") == 0) return path.substr(2);
  return path;
}

}  // namespace lingprobe::audit
