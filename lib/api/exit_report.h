// What a process says at exit (rank 0, or a single process): where its
// records went and the next command to run, and, with an op selection, how
// many calls matched and the patterns that matched no operator the process
// ran, with the closest names it did run, and the rules' stages that never began, with the closest stage that did
// (docs/USAGE.md, "At exit").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/config.h"
#include "api/identity.h"
#include "api/sampling.h"
#include "capture/recorder.h"

namespace lingprobe::api {

struct ExitReport {
  bool speaks = false;  // rank 0, or a single process
  bool keep_empty =
      false;  // the metadata file is written even with nothing recorded (a selection that matched nothing)
  capture::RecorderStats stats;
  std::vector<std::string> unmatched;      // "'pattern' (closest ran: a, b)"
  bool any_without_closest = false;        // an unmatched pattern with no name close to it (a nested op, not a typo)
  std::vector<std::string> absent_stages;  // "'stage' (did you mean 'x'?)": named by a per-stage rule, never begun
  std::vector<std::string> stages_begun;   // the stages that did begin
};

// After the recorder is uninstalled, before the writer's finalize.
ExitReport exit_report(const Config& config, const Identity& identity, bool config_ok);

// After the writer's finalize: a warning for the selection, then one info line
// naming the run directory, only if the metadata file exists. `sampling`:
// what sampling left (nullopt when it is off); where counter windows spent
// LINGPROBE_PROFILE_BUDGET_S and later calls went without counters, an info
// line says so before the last one.
void say_exit_report(const ExitReport& report, const Config& config, const std::string& metadata_path,
                     const std::string& run_dir, const std::optional<SamplingTally>& sampling);

}  // namespace lingprobe::api
