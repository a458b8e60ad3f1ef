#include "api/exit_report.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "api/log.h"
#include "capture/stages.h"
#include "format/glob.h"
#include "format/op_selection.h"

namespace lingprobe::api {
namespace {

// The per-stage rules' stages that never began in this process, each with the begun stage closest to it.
void absent_stages(const format::OpSelection& selection, ExitReport& r) {
  r.stages_begun = capture::stages_pushed();
  for (const auto& stage : selection.rule_stages()) {
    if (stage == "unstaged" || std::find(r.stages_begun.begin(), r.stages_begun.end(), stage) != r.stages_begun.end())
      continue;
    const std::string closest = format::closest_name(stage, r.stages_begun, std::max<size_t>(2, stage.size() / 3));
    r.absent_stages.push_back("'" + stage + "'" + (closest.empty() ? "" : " (did you mean '" + closest + "'?)"));
  }
}

// Whether an op pattern ("aten::lin*", or "stage:aten::linear") matches an operator torch has.
bool names_an_operator(const std::string& pattern, const std::vector<std::string>& registered) {
  const std::string glob = format::op_pattern_glob(pattern);
  return std::any_of(registered.begin(), registered.end(),
                     [&](const std::string& name) { return format::glob_match(glob.c_str(), name.c_str()); });
}

}  // namespace

ExitReport exit_report(const Config& config, const Identity& identity, bool config_ok) {
  ExitReport r;
  const Role role = identity.role;
  if (!config_ok || (role != Role::Rank && role != Role::Single)) return r;
  r.speaks = role == Role::Single || identity.rank == 0;
  r.stats = capture::recorder_stats();
  r.keep_empty = r.stats.calls_recorded == 0 && (r.stats.calls_seen > 0 || !config.ops.empty());
  if (config.ops.empty()) return r;
  format::OpSelection selection;
  if (!selection.parse(config.ops, config.ops_deny).empty()) return r;
  absent_stages(selection, r);
  const auto met = capture::recorder_ops_met();
  std::vector<std::string> names;
  for (const auto& [name, with_overload] : met) names.push_back(name);
  std::vector<std::string> registered;
  for (const auto& pattern : selection.unmatched(met)) {
    std::string line = "'" + pattern + "'";
    const auto closest = format::closest_op_names(pattern, names, 3);
    for (size_t i = 0; i < closest.size(); ++i) line += (i ? ", " : " (closest ran: ") + closest[i];
    if (closest.empty() && registered.empty()) registered = capture::registered_op_names();
    if (closest.empty() && !names_an_operator(pattern, registered)) {  // a typo: no hint about nested ops
      const auto known = format::closest_op_names(pattern, registered, 3);
      line += " (no operator torch has is named so";
      for (size_t i = 0; i < known.size(); ++i) line += (i ? ", " : "; did you mean ") + known[i];
      r.unmatched.push_back(line + (known.empty() ? ")" : "?)"));
      continue;
    }
    r.unmatched.push_back(line + (closest.empty() ? "" : ")"));
    r.any_without_closest = r.any_without_closest || closest.empty();
  }
  return r;
}

namespace {

// A program file (a folder named lingprobe, a checkout's, is none).
bool executable(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// How to run the CLI from the user's shell: `lingprobe` where it is on PATH, else the one beside this library (a
// build tree's build/lingprobe; an install's PREFIX/bin/lingprobe from PREFIX/lib or PREFIX/lib/<multiarch>).
std::string cli_command() {
  const char* env_path = std::getenv("PATH");
  const std::string path = env_path ? env_path : "";
  for (size_t begin = 0; begin < path.size();) {
    const size_t end = std::min(path.find(':', begin), path.size());
    if (end > begin && executable(path.substr(begin, end - begin) + "/lingprobe")) return "lingprobe";
    begin = end + 1;
  }
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&cli_command), &info) || !info.dli_fname) return "lingprobe";
  std::string lib_dir = info.dli_fname;
  lib_dir = lib_dir.find('/') == std::string::npos ? "." : lib_dir.substr(0, lib_dir.find_last_of('/'));
  for (const char* relative : {"/lingprobe", "/../bin/lingprobe", "/../../bin/lingprobe"}) {
    if (!executable(lib_dir + relative)) continue;
    char* real = ::realpath((lib_dir + relative).c_str(), nullptr);
    std::string found = real ? real : lib_dir + relative;
    std::free(real);
    return found;
  }
  return "lingprobe";
}

// Where counter windows spent LINGPROBE_PROFILE_BUDGET_S and later sampled calls went without counters: the line
// that says so ("" otherwise).
std::string profile_budget_line(const SamplingTally& t, double budget_s) {
  if (t.budget_profile_calls == 0) return "";
  char held[32], budget[32];
  std::snprintf(held, sizeof held, "%.1f", t.stall_s);
  std::snprintf(budget, sizeof budget, "%g", budget_s);
  return std::string("counter windows held the program ") + held + " s, all of LINGPROBE_PROFILE_BUDGET_S=" + budget +
         ": " + std::to_string(t.budget_profile_calls) +
         " later sampled call(s) got no counters (budget_profile; the audit's summary names their keys). Raise it "
         "for their counters, or lower it for a shorter run";
}

}  // namespace

void say_exit_report(const ExitReport& r, const Config& config, const std::string& metadata_path,
                     const std::string& run_dir, const std::optional<SamplingTally>& sampling) {
  if (!r.speaks) return;
  if (!r.unmatched.empty() || (r.stats.calls_recorded == 0 && !config.ops.empty())) {
    std::string line = "LINGPROBE_OPS='" + config.ops + "': " + std::to_string(r.stats.calls_recorded) + " of " +
                       std::to_string(r.stats.calls_seen) + " calls matched";
    const char* none =
        config.nested ? "; no operator this process ran matched " : "; no top-level operator this process ran matched ";
    for (size_t i = 0; i < r.unmatched.size(); ++i) line += (i ? "; " : none) + r.unmatched[i];
    if (!config.nested && r.any_without_closest)  // a name with no close match: likely a nested op, not a typo
      line +=
          " (an operator called only inside another, such as aten::addmm inside aten::linear, is recorded with "
          "LINGPROBE_NESTED=1)";
    log_warn(line);
  }
  if (!r.absent_stages.empty()) {
    std::string line = "LINGPROBE_OPS: stage";
    for (size_t i = 0; i < r.absent_stages.size(); ++i) line += (i ? ", " : " ") + r.absent_stages[i];
    line += " never began in this process, so its rules matched nothing";
    if (r.stages_begun.empty())
      line += "; no stage began at all: mark them with lingprobe.stage(...), LINGPROBE_STAGE_MAP or LINGPROBE_NVTX_MAP";
    else
      for (size_t i = 0; i < r.stages_begun.size() && i < 8; ++i)
        line += (i ? ", " : "; stages that did: ") + r.stages_begun[i];
    log_warn(line);
  }
  if (::access(metadata_path.c_str(), F_OK) != 0) return;  // never name what was not written
  if (sampling)
    if (const std::string line = profile_budget_line(*sampling, config.profile_budget_s); !line.empty()) log_info(line);
  log_info("recorded " + std::to_string(r.stats.calls_recorded) + " calls, " + std::to_string(r.stats.signatures) +
           " signatures" + (sampling ? ", " + std::to_string(sampling->snapshots) + " snapshots" : "") + " into " +
           run_dir + "; next: " + cli_command() + " audit " + run_dir);
}

}  // namespace lingprobe::api
