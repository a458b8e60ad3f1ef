#include "report_command.h"

#include <sys/stat.h>

#include <cstdlib>
#include <iostream>
#include <string>

#include "audit/capability_report.h"

namespace lingprobe::tools {
namespace {

int usage(std::ostream& os = std::cerr) {
  os << "usage: lingprobe report [--generated-at TIME] [--quiet] [RUN_DIR]\n"
        "  RUN_DIR: a run directory OUT/{run_id} of a run with LINGPROBE_PROFILE=1 (default: $LINGPROBE_OUT/latest,\n"
        "  else ./lingprobe-out/latest). Writes RUN_DIR/reports/capability_report.json and roofline.svg, adds a\n"
        "  \"Capability\" section to RUN_DIR/reports/summary.md and prints that section.\n";
  return 2;
}

}  // namespace

int report_command(int argc, char** argv) {
  audit::ReportOptions options;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--generated-at") {
      if (i + 1 >= argc) {
        std::cerr << "lingprobe report: --generated-at needs a value\n";
        return usage();
      }
      options.generated_at = argv[++i];
    } else if (a == "--quiet" || a == "-q") {
      quiet = true;
    } else if (a == "-h" || a == "--help") {
      usage(std::cout);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "lingprobe report: unknown option '" << a << "'\n";
      return usage();
    } else if (!options.run_dir.empty()) {
      std::cerr << "lingprobe report: one run directory at a time\n";
      return usage();
    } else {
      options.run_dir = a;
    }
  }
  if (options.run_dir.empty()) {
    const char* out = std::getenv("LINGPROBE_OUT");
    options.run_dir = std::string(out && *out ? out : "lingprobe-out") + "/latest";
    struct stat st;
    if (stat(options.run_dir.c_str(), &st) != 0) {
      std::cerr << "lingprobe report: no run directory given and " << options.run_dir << " does not exist\n";
      return usage();
    }
  }
  audit::ReportOutcome outcome = audit::run_report(options);
  for (const auto& w : outcome.warnings) std::cerr << audit::warning_line("report", w) << "\n";
  if (!outcome.status.ok()) {
    std::cerr << "lingprobe report: error: " << outcome.status.message() << "\n";
    if (outcome.written.empty()) std::cerr << "nothing was written.\n";
    for (const auto& f : outcome.written) std::cerr << "already replaced: " << f << "\n";
    return 1;
  }
  if (!quiet) std::cout << outcome.summary << "\n";
  std::cerr << "lingprobe report: wrote " << outcome.report_path << " and " << outcome.svg_path << "\n";
  return 0;
}

}  // namespace lingprobe::tools
