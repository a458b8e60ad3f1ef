#include "trace_command.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <string>

#include "audit/trace_export.h"

namespace lingprobe::tools {
namespace {

int usage(std::ostream& os = std::cerr) {
  os << "usage: lingprobe trace RUN_DIR [-o FILE] [--ranks LIST] [--from T] [--to T] [--max-events N]\n"
        "  Writes the run's call records as a JSON trace (RUN/reports/trace.json, or -o FILE) that opens in\n"
        "  https://ui.perfetto.dev (Open trace file) or chrome://tracing: a process track per rank and pid, a\n"
        "  thread track per thread, a slice per call (op, stage, signature, shapes), snapshots and counter\n"
        "  windows marked.\n"
        "  --ranks LIST   only these ranks: 0,2 or 0-3 (processes that are not ranks count as their rank)\n"
        "  --from T --to T  only calls overlapping [T_from, T_to], times from the run's first process start:\n"
        "                 seconds (12.5, 12.5s) or with ms/us\n"
        "  --max-events N write at most N call slices; the rest are counted in the trace's otherData\n";
  return 2;
}

// "12.5", "12.5s", "300ms", "150us" -> seconds; -1 when malformed.
double parse_time(const std::string& text) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || errno || !std::isfinite(v) || v < 0) return -1;
  const std::string unit(end);
  if (unit.empty() || unit == "s") return v;
  if (unit == "ms") return v / 1e3;
  if (unit == "us") return v / 1e6;
  return -1;
}

// "0,2,5-7" -> ranks; false when malformed.
bool parse_ranks(const std::string& text, std::set<int64_t>& out) {
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    char* end = nullptr;
    const long long a = std::strtoll(part.c_str(), &end, 10);
    if (end == part.c_str() || a < 0) return false;
    long long b = a;
    if (*end == '-') {
      const char* second = end + 1;
      b = std::strtoll(second, &end, 10);
      if (end == second || b < a || b - a > 100000) return false;
    }
    if (*end) return false;
    for (long long r = a; r <= b; ++r) out.insert(r);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return !out.empty();
}

}  // namespace

int trace_command(int argc, char** argv) {
  audit::TraceOptions options;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = nullptr;
    auto value = [&]() {
      v = i + 1 < argc ? argv[++i] : nullptr;
      if (!v) std::cerr << "lingprobe trace: " << a << " needs a value\n";
      return v != nullptr;
    };
    if (a == "-o" || a == "--output") {
      if (!value()) return usage();
      options.output = v;
    } else if (a == "--ranks") {
      if (!value()) return usage();
      if (!parse_ranks(v, options.ranks)) {
        std::cerr << "lingprobe trace: --ranks '" << v << "' is not a list of ranks (0,2 or 0-3)\n";
        return 2;
      }
    } else if (a == "--from" || a == "--to") {
      if (!value()) return usage();
      const double t = parse_time(v);
      if (t < 0) {
        std::cerr << "lingprobe trace: " << a << " '" << v << "' is not a time (seconds, or with ms/us)\n";
        return 2;
      }
      (a == "--from" ? options.from_s : options.to_s) = t;
    } else if (a == "--max-events") {
      if (!value()) return usage();
      char* end = nullptr;
      const long long n = std::strtoll(v, &end, 10);
      if (end == v || *end || n <= 0) {
        std::cerr << "lingprobe trace: --max-events '" << v << "' is not a positive count\n";
        return 2;
      }
      options.max_events = static_cast<uint64_t>(n);
    } else if (a == "-h" || a == "--help") {
      usage(std::cout);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::cerr << "lingprobe trace: unknown option '" << a << "'\n";
      return usage();
    } else if (options.run_dir.empty()) {
      options.run_dir = a;
    } else {
      std::cerr << "lingprobe trace: one run directory, not '" << options.run_dir << "' and '" << a << "'\n";
      return usage();
    }
  }
  if (options.run_dir.empty()) return usage();
  if (options.from_s >= 0 && options.to_s >= 0 && options.to_s < options.from_s) {
    std::cerr << "lingprobe trace: --to comes before --from\n";
    return 2;
  }
  const audit::TraceOutcome o = audit::write_trace(options);
  for (const auto& w : o.warnings) std::cerr << audit::warning_line("trace", w) << "\n";
  if (!o.status.ok()) {
    std::cerr << "lingprobe trace: error: " << o.status.message() << "\nnothing was written.\n";
    return 1;
  }
  std::cerr << "lingprobe trace: wrote " << o.output_path << ": " << o.processes << " process(es), " << o.threads
            << " thread(s), " << o.slices << " call slice(s), " << o.snapshots << " snapshot(s), " << o.windows
            << " counter window(s), " << o.timed_calls << " timed call(s)";
  if (o.outside_filters) std::cerr << "; " << o.outside_filters << " call(s) outside --from/--to";
  if (o.without_times)
    std::cerr << "; " << o.without_times
              << " call record(s) without host times (LINGPROBE_CALL_TIMES=0, or times no clock gives): neither they "
                 "nor their snapshots, counter windows and timed calls are drawn";
  std::cerr << "\n  open it in https://ui.perfetto.dev (Open trace file) or chrome://tracing\n";
  return 0;
}

}  // namespace lingprobe::tools
