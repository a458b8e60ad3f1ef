// Paths of a run directory as the audit and the report read them (POSIX,
// no symlink following where it matters): one copy for the audit's commands.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace lingprobe::audit {

bool is_dir(const std::string& path);
// The file `path` names, symlinks followed (device and inode): two paths to one file compare equal. {0, 0} when
// it cannot be read.
std::pair<uint64_t, uint64_t> file_identity(const std::string& path);
// The names in `dir` that do not start with '.', sorted; empty when it cannot be read.
std::vector<std::string> list_dir(const std::string& dir);
std::string parent(const std::string& path);  // "." for a bare name, "/" for a file in /
std::string basename(const std::string& path);
std::string strip_slash(std::string path);  // trailing slashes off (not the root's)
// `path` relative to `base` when it lies inside it, else `path`.
std::string relative(const std::string& path, const std::string& base);

}  // namespace lingprobe::audit
