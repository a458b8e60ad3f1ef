#include "diff_command.h"

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>

#include "audit/run_diff.h"
#include "format/canonical_json.h"
#include "sink/run_directory.h"

namespace lingprobe::tools {
namespace {

int usage(std::ostream& os = std::cerr) {
  os << "usage: lingprobe diff RUN_A RUN_B [--json] [-o FILE] [--stage STAGE] [--rows N]\n"
        "  Compares two runs (each audited in memory; nothing is written into them): signatures in both whose\n"
        "  calls changed, signatures paired across runs that changed only in shapes (one to one, or as groups),\n"
        "  and those only in A or only in B, per stage, sorted by FLOPs moved; with counters on both sides,\n"
        "  their kernels' metrics.\n"
        "  --json      print the JSON document instead of Markdown\n"
        "  -o FILE     write it to FILE instead of stdout\n"
        "  --stage S   only stage S\n"
        "  --rows N    entries per stage in the Markdown (default 15; 0: all of them)\n";
  return 2;
}

// A count for --rows; 0 shows every row.
bool parse_rows(const char* text, size_t& rows) {
  if (!std::isdigit(static_cast<unsigned char>(text[0]))) return false;  // strtoull takes " -5" and wraps it
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  rows = n == 0 ? SIZE_MAX : static_cast<size_t>(n);
  return true;
}

}  // namespace

int diff_command(int argc, char** argv) {
  audit::DiffOptions options;
  std::vector<std::string> runs;
  bool json = false;
  std::string output;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 < argc) return argv[++i];
      std::cerr << "lingprobe diff: " << a << " needs a value\n";
      return nullptr;
    };
    if (a == "--json") {
      json = true;
    } else if (a == "-o" || a == "--output" || a == "--stage") {
      const char* v = value();
      if (!v) return usage();
      (a == "--stage" ? options.stage : output) = v;
    } else if (a == "--rows") {
      const char* v = value();
      if (!v) return usage();
      if (!parse_rows(v, options.markdown_rows)) {
        std::cerr << "lingprobe diff: --rows takes a count of rows (0: all of them), not '" << v << "'\n";
        return 2;
      }
    } else if (a == "-h" || a == "--help") {
      usage(std::cout);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "lingprobe diff: unknown option '" << a << "'\n";
      return usage();
    } else {
      runs.push_back(a);
    }
  }
  if (runs.size() != 2) {
    std::cerr << "lingprobe diff: needs two run directories, got " << runs.size() << "\n";
    return usage();
  }
  options.run_a = runs[0];
  options.run_b = runs[1];
  const audit::DiffOutcome o = audit::diff_runs(options);
  for (const auto& w : o.warnings) std::cerr << audit::warning_line("diff", w) << "\n";
  if (!o.status.ok()) {
    std::cerr << "lingprobe diff: error: " << o.status.message() << "\n";
    return 1;
  }
  const std::string text = json ? format::pretty_json(o.report) + "\n" : o.markdown;
  if (output.empty()) {
    std::cout << text;
    return 0;
  }
  if (std::string err = sink::replace_file(output, text); !err.empty()) {
    std::cerr << "lingprobe diff: error: " << err << "\n";
    return 1;
  }
  std::cerr << "lingprobe diff: wrote " << output << "\n";
  return 0;
}

}  // namespace lingprobe::tools
