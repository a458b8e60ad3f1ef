#include "audit_command.h"

#include <unistd.h>

#include <chrono>
#include <iostream>
#include <string>

#include "audit/coverage_audit.h"

namespace lingprobe::tools {
namespace {

int usage(std::ostream& os = std::cerr) {
  os << "usage: lingprobe audit [-o FILE] [--allow-mixed-runs] [--quiet] PATH...\n"
        "  PATH: a run directory OUT/{run_id} (its metadata/*.jsonl), an OUT holding one launch, or metadata\n"
        "  JSONL files. Files of several launches are refused unless --allow-mixed-runs.\n"
        "  Writes RUN/reports/coverage_audit.json and RUN/reports/summary.md (or -o FILE and summary.md beside it)\n"
        "  and prints the summary.\n";
  return 2;
}

}  // namespace

int audit_command(int argc, char** argv) {
  audit::AuditOptions options;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    if (a == "-o" || a == "--output") {
      const char* v = value();
      if (!v) {
        std::cerr << "lingprobe audit: " << a << " needs a value\n";
        return usage();
      }
      options.output = v;
    } else if (a == "--allow-mixed-runs") {
      options.allow_mixed_runs = true;
    } else if (a == "--quiet" || a == "-q") {
      quiet = true;
    } else if (a == "-h" || a == "--help") {
      usage(std::cout);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "lingprobe audit: unknown option '" << a << "'\n";
      return usage();
    } else {
      options.inputs.push_back(a);
    }
  }
  if (options.inputs.empty()) return usage();
  options.progress = isatty(STDERR_FILENO) && !quiet;
  const auto t0 = std::chrono::steady_clock::now();
  audit::AuditOutcome outcome = audit::run_audit(options);
  for (const auto& w : outcome.warnings) std::cerr << audit::warning_line("audit", w) << "\n";
  if (!outcome.status.ok()) {
    std::cerr << "lingprobe audit: error: " << outcome.status.message() << "\nnothing was written.\n";
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!quiet) std::cout << outcome.summary << "\n";
  std::cerr << "lingprobe audit: wrote " << outcome.report_path << " and " << outcome.summary_path << " in " << secs
            << " s\n";
  return 0;
}

}  // namespace lingprobe::tools
