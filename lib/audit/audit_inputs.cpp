#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <utility>

#include "audit/audit_run.h"
#include "audit/run_paths.h"
#include "sink/run_directory.h"

namespace lingprobe::audit {

int64_t rank_in_file_name(const std::string& name) {
  const size_t at = name.find("_rank");
  if (at == std::string::npos) return -1;
  char* end = nullptr;
  const long long rank = std::strtoll(name.c_str() + at + 5, &end, 10);
  return end != name.c_str() + at + 5 && *end == '_' ? rank : -1;
}

namespace {

// A file given twice (`lingprobe audit out/*` names a run and out/latest, its symlink) is read once: read twice,
// every call of it would count twice. Warned, not refused: the audit of the run is still what was asked.
void read_each_file_once(std::vector<std::string>& files, AuditOutcome& outcome) {
  std::map<std::pair<uint64_t, uint64_t>, std::string> seen;
  std::vector<std::string> once;
  for (auto& path : files) {
    const auto id = file_identity(path);
    if (id.first || id.second) {
      const auto [it, fresh] = seen.emplace(id, path);
      if (!fresh) {
        outcome.warnings.push_back({WarningCode::kGivenAgain, path + " is " + it->second +
                                                                  " given again (a symlink such as latest, or the "
                                                                  "same run twice); read once"});
        continue;
      }
    }
    once.push_back(std::move(path));
  }
  files.swap(once);
}

}  // namespace

bool bad_input(AuditOutcome& outcome, std::string message) {
  outcome.status = format::Status(format::StatusCode::kBadInput, std::move(message));
  return false;
}

// 1. Files and the run directory.
bool find_inputs(AuditRun& a) {
  const AuditOptions& options = a.options;
  AuditOutcome& outcome = a.outcome;
  auto& files = a.files;
  auto& run_dir = a.run_dir;
  auto add_run = [&](const std::string& dir) {
    if (run_dir.empty()) run_dir = dir;
    for (const auto& f : sink::metadata_files(dir)) files.push_back(f);
  };
  for (const auto& raw : options.inputs) {
    const std::string in = strip_slash(raw);
    if (is_dir(in + "/metadata")) {
      add_run(in);
    } else if (is_dir(in) && basename(in) == "metadata") {
      add_run(parent(in));
    } else if (is_dir(in)) {
      const std::vector<std::string> launches = sink::launches_in(in);
      if (launches.size() > 1 && !options.allow_mixed_runs) {
        std::string names;
        for (size_t i = 0; i < launches.size(); ++i) names += (i ? ", " : "") + launches[i];
        return bad_input(outcome, in + " holds " + std::to_string(launches.size()) + " launches (" + names +
                                      "): audit one run directory (" + in + "/" + launches.back() + ", or " + in +
                                      "/latest for the newest), or pass --allow-mixed-runs");
      }
      for (const auto& name : launches) add_run(in + "/" + name);
      if (launches.empty())
        return bad_input(outcome, "no metadata files (*.jsonl) found in " + in + " (neither " + in + "/metadata nor " +
                                      in + "/{run_id}/metadata exists)");
    } else if (::access(in.c_str(), F_OK) != 0 && errno == ENOENT) {  // the CLI's one line for a missing path
      return bad_input(outcome, sink::run_directory_error(in));
    } else {
      if (run_dir.empty()) {
        const std::string dir = parent(in);
        run_dir = basename(dir) == "metadata" ? parent(dir) : dir;
      }
      files.push_back(in);
    }
  }
  if (files.empty()) return bad_input(outcome, "no metadata files (*.jsonl) found in " + options.inputs.front());
  read_each_file_once(files, outcome);
  return true;
}

bool read_inputs(AuditRun& a) {
  const AuditOptions& options = a.options;
  AuditOutcome& outcome = a.outcome;
  // 2. Read every file (streaming) and validate it; then sort the processes:
  // ranks make the rows; children (and, beside ranks, plain parents such as
  // mp.spawn's) are reported apart; launchers wrote nothing to count.
  auto& summaries = a.summaries;
  auto& run_ids = a.run_ids;
  for (const auto& path : a.files) {
    FileSummary f;
    auto progress = [&](uint64_t done) {
      if (options.progress)
        std::fprintf(stderr, "\r[lingprobe audit] %s: %.0f MiB", basename(path).c_str(),
                     static_cast<double>(done) / (1 << 20));
    };
    ReadResult rr = read_metadata_file(path, f, progress);
    if (options.progress && f.bytes >= (64u << 20)) std::fprintf(stderr, "\n");
    if (!rr.status.ok()) {
      outcome.status = rr.status;
      return false;
    }
    a.bytes_total += f.bytes;
    if (f.bytes == 0 || !f.has_header) {
      outcome.warnings.push_back(f.bytes == 0 ? Warning{WarningCode::kEmptyFile, path + ": empty file; skipped"}
                                              : Warning{WarningCode::kNoHeader, path + ": no header record; skipped"});
      if (const int64_t rank = rank_in_file_name(basename(path)); rank >= 0) a.ranks_never_written.insert(rank);
      continue;
    }
    if (f.format != "lingprobe.metadata/1")
      return bad_input(outcome,
                       path + ": format '" + f.format + "' is not lingprobe.metadata/1; refusing to mix formats");
    if (f.role == "launcher") {
      outcome.warnings.push_back({WarningCode::kLauncherFile, path + ": written by a launcher process; skipped"});
      continue;
    }
    run_ids.insert(f.run_id);
    a.any_rank = a.any_rank || f.role == "rank";
    summaries.push_back(std::move(f));
  }
  size_t folded = 0;
  for (const auto& f : summaries) folded += f.fold_scalars;
  if (folded && folded < summaries.size())
    return bad_input(outcome, "these files mix signatures with scalar values folded (" + std::to_string(folded) +
                                  " of " + std::to_string(summaries.size()) +
                                  ", LINGPROBE_FOLD_SCALARS=1) and with their values: the same call has a different "
                                  "signature in each; audit them apart");
  outcome.fold_scalars = folded > 0;
  if (!summaries.empty()) outcome.ops = summaries.front().ops, outcome.ops_deny = summaries.front().ops_deny;
  if (run_ids.size() > 1) {
    std::string ids;
    for (const auto& id : run_ids) ids += (ids.empty() ? "'" : ", '") + id + "'";
    if (!options.allow_mixed_runs)
      return bad_input(outcome, "these files belong to " + std::to_string(run_ids.size()) + " launches (run_id " + ids +
                                    "); audit one launch's run directory, or pass --allow-mixed-runs to sum them");
    outcome.warnings.push_back(
        {WarningCode::kMixedRuns,
         "--allow-mixed-runs: summing " + std::to_string(run_ids.size()) + " launches (" + ids + ")"});
  }

  return true;
}

}  // namespace lingprobe::audit
