// `lingprobe report [--generated-at TIME] [--quiet] [RUN_DIR]`: the capability
// report of a profiled run (lib/audit/capability_report.h).
#pragma once

namespace lingprobe::tools {

int report_command(int argc, char** argv);

}  // namespace lingprobe::tools
