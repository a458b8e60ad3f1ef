// The run directory on disk: OUT/{run_id}/ holds one launch (SPEC section 4's
// layout); OUT/latest points at the newest. Directory creation and the
// latest link; knows nothing of the dispatcher.
#pragma once

#include <string>
#include <vector>

namespace lingprobe::sink {

// OUT/{run_id}: the run directory of a launch.
std::string run_directory(const std::string& out_root, const std::string& run_id);

// Whether `dir` is, or can become by creating its missing levels, a
// directory this process may write into: "" or what is wrong (a file where a
// directory should be, no write permission, a file system that takes no new
// entries). Leaves nothing behind (a probe directory is made and removed).
std::string check_writable_directory(const std::string& dir);

// Whether `path` can be a file read later (a control file): not a directory,
// and its directory exists. "" or what is wrong.
std::string check_file_path(const std::string& path);

// Creates `dir` and its parents; returns "" or an error message.
std::string make_directories(const std::string& dir);

// Opens RUN_DIR/`rel_dir` (plain names separated by '/') as a directory
// descriptor without following a symlink below `run_dir`: one
// openat(O_DIRECTORY | O_NOFOLLOW) per level from the run directory's own
// descriptor (the run directory itself may be a symlink), creating missing
// levels with mode 0755 when `create`. Files are then made with openat(...,
// O_CREAT | O_EXCL | O_NOFOLLOW) and renamed with renameat2 inside it. -1
// with errno (ELOOP: a level is a symlink) on failure; the caller closes it.
int open_directory_beneath(const std::string& run_dir, const std::string& rel_dir, bool create);

// "" when `dir` is a run directory (it has a metadata/ folder), else what to give instead.
std::string run_directory_error(const std::string& dir);

// The launches an OUT holds: its subfolders that are run directories, sorted by name (not `latest`, a symlink,
// nor hidden folders).
std::vector<std::string> launches_in(const std::string& out_root);

// A run directory as a user gives it to any command: OUT/{run_id}, or an OUT holding one launch (what `lingprobe
// run -o OUT` printed), trailing slashes allowed. "" with `dir` set to the run directory, or what to give instead
// (a missing path, a folder without metadata/, an OUT of several launches, each named).
std::string find_run_directory(std::string& dir);

// RUN_DIR/metadata/*.jsonl, sorted (empty when there is none).
std::vector<std::string> metadata_files(const std::string& run_dir);

// Writes `text` to `path` through a temporary file renamed over it (readers
// see the old file or the new one); returns "" or an error message.
std::string replace_file(const std::string& path, const std::string& text);

// Points OUT/latest at `run_id` (a relative symlink, replaced atomically).
// Best effort: a failure changes nothing and is not reported (a read-only or
// symlink-less filesystem still records).
void link_latest(const std::string& out_root, const std::string& run_id);

}  // namespace lingprobe::sink
