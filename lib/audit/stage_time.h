// The capability report's measured denominator: GPU time per stage from the
// ranks' counts records ("stage_gpu", LINGPROBE_STAGE_GPU_TIME), set against
// the time the profiled signatures account for (kernel time per call x calls).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "audit/metadata_reader.h"
#include "format/json_value.h"

namespace lingprobe::audit {

struct StageTimeView {
  format::JsonValue json = format::JsonValue::null();  // whole_run.measured_gpu_time; null without measurements
  double denominator_us = 0;  // the run's GPU time with the counter windows' cost taken out (0: not measured)
  std::string markdown;       // a table for summary.md ("" without measurements)
  std::map<std::string, double> without_windows_us;  // the stages whose time without windows is known
};

// `files`: the ranks' metadata summaries; `attributed_us`: by stage, the passed jobs' estimated GPU time.
StageTimeView stage_time_view(const std::vector<const FileSummary*>& files,
                              const std::map<std::string, double>& attributed_us);

}  // namespace lingprobe::audit
