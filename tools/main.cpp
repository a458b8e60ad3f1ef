// The `lingprobe` command line tool. Subcommands that read files only
// (hash-signature, audit, report, trace, diff) link no torch, so they run on a
// laptop where torch is not installed.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <iostream>
#include <string>

#include "hash_signature.h"
#include "run_command.h"
#ifdef LINGPROBE_HAVE_AUDIT
#include "audit_command.h"
#include "report_command.h"
#include "trace_command.h"
#include "diff_command.h"
#endif
#include "lingprobe/version.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

int cmd_hash_signature(int argc, char** argv) {
  if (argc > 2) {
    std::cerr << "lingprobe hash-signature: takes no arguments; it reads JSON objects from stdin\n";
    return 2;
  }
  (void)argv;
  std::ios::sync_with_stdio(false);
  return lingprobe::tools::hash_signature(std::cin, std::cout, std::cerr);
}

// The directory of this executable.
std::string self_dir() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(".");
  return dir.substr(0, dir.rfind('/'));
}

// `replay` needs torch: it lives in lingprobe-replay beside this binary.
int cmd_replay(int argc, char** argv) {
  const std::string dir = self_dir();
  for (const std::string& candidate : {dir + "/lingprobe-replay", dir + "/../libexec/lingprobe/lingprobe-replay"}) {
    if (access(candidate.c_str(), X_OK) != 0) continue;
    std::vector<char*> args{const_cast<char*>(candidate.c_str())};
    for (int i = 1; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    execv(candidate.c_str(), args.data());
    std::cerr << "lingprobe replay: cannot run " << candidate << ": " << std::strerror(errno) << "\n";
    return 2;
  }
  std::cerr << "lingprobe replay: lingprobe-replay (the torch-linked replayer) is not installed beside " << dir
            << "; build lingprobe with torch (scripts/build.sh)\n";
  return 2;
}

// `validate` drives Nsight Compute over replays: the Python module of the shim
// (installed beside the preload library, else the source tree's).
int cmd_validate(int argc, char** argv) {
  const std::string dir = self_dir();
  std::string shim;
  for (const std::string& candidate : {dir + "/../share/lingprobe/python", std::string(LINGPROBE_SOURCE_PYTHON_SHIM)})
    if (access((candidate + "/lingprobe/validate.py").c_str(), R_OK) == 0) {
      shim = candidate;
      break;
    }
  if (shim.empty()) {
    std::cerr << "lingprobe validate: the lingprobe Python package (validate.py) is not installed beside " << dir
              << " nor in " << LINGPROBE_SOURCE_PYTHON_SHIM << "\n";
    return 2;
  }
  const char* old = std::getenv("PYTHONPATH");
  const std::string path = shim + (old && *old ? ":" + std::string(old) : "");
  setenv("PYTHONPATH", path.c_str(), 1);
  const char* py = std::getenv("LINGPROBE_PYTHON");
  const std::string python = py && *py ? py : "python3";
  std::vector<std::string> words{python, "-m", "lingprobe.validate"};
  for (int i = 1; i < argc; ++i) words.emplace_back(argv[i]);
  std::vector<char*> args;
  for (auto& w : words) args.push_back(const_cast<char*>(w.c_str()));
  args.push_back(nullptr);
  execvp(python.c_str(), args.data());
  std::cerr << "lingprobe validate: cannot run " << python << ": " << std::strerror(errno)
            << " (set LINGPROBE_PYTHON to a Python that has torch)\n";
  return 2;
}

int cmd_version(int, char**) {
  std::cout << "lingprobe " << LINGPROBE_VERSION_STRING << '\n';
  return 0;
}

const Command kCommands[] = {
    {"hash-signature", "read JSON signatures (one per line) on stdin, print their canonical SHA-256",
     cmd_hash_signature},
#ifdef LINGPROBE_HAVE_AUDIT
    {"audit", "coverage audit of a run: lingprobe audit [-o FILE] [--allow-mixed-runs] [--quiet] RUN_DIR",
     lingprobe::tools::audit_command},
    {"report", "capability report of a profiled run: lingprobe report [--generated-at TIME] [--quiet] [RUN_DIR]",
     lingprobe::tools::report_command},
    {"trace",
     "a run's calls as a Perfetto/Chrome trace: lingprobe trace RUN_DIR [-o FILE] [--ranks LIST] [--from T] [--to T] "
     "[--max-events N]",
     lingprobe::tools::trace_command},
    {"diff", "compare two runs' signatures and calls: lingprobe diff RUN_A RUN_B [--json] [-o FILE] [--stage S]",
     lingprobe::tools::diff_command},
#endif
    {"replay",
     "rerun snapshots in isolation and check them: lingprobe replay SNAPSHOT|RUN_DIR [-o DIR] [--device DEV] "
     "[--load-library LIB.so] [--profile] [--quiet]",
     cmd_replay},
    {"validate",
     "inline counters against Nsight Compute on replays: lingprobe validate RUN_DIR [--top N] [--signatures H16,...] "
     "[--random N [--seed S] [--min-kernel-us US]] [--runs N] [--json OUT]; "
     "or against the real execution's kernel time: lingprobe validate RUN_DIR --against-trace TRACE.json "
     "[--min-kernel-us US] [--tolerance F] [--noise-trace TRACE2.json] [--json OUT]",
     cmd_validate},
    {"run", "run a command with lingprobe preloaded: lingprobe run [options] -- CMD ARGS",
     lingprobe::tools::run_command},
    {"config", "print every LINGPROBE_* option with its type, default and meaning", lingprobe::tools::config_command},
    {"version", "print the lingprobe version", cmd_version},
};

void usage(std::ostream& os) {
  os << "usage: lingprobe <command> [options]    (lingprobe help <command>: that command's own help)\n\ncommands:\n";
  for (const auto& c : kCommands)
    os << "  " << c.name << std::string(16 - std::strlen(c.name), ' ') << c.summary << '\n';
}

// `lingprobe help COMMAND` is `lingprobe COMMAND --help`.
int help_for(const char* name) {
  for (const auto& c : kCommands)
    if (!std::strcmp(name, c.name)) {
      char help[] = "--help";
      char* argv[] = {const_cast<char*>(c.name), help, nullptr};
      return c.run(2, argv);
    }
  std::cerr << "lingprobe help: unknown command '" << name << "'\n";
  usage(std::cerr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && !std::strcmp(argv[1], "help")) return help_for(argv[2]);
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    usage(argc < 2 ? std::cerr : std::cout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version")) return cmd_version(argc - 1, argv + 1);
  for (const auto& c : kCommands)
    if (!std::strcmp(argv[1], c.name)) return c.run(argc - 1, argv + 1);
  std::cerr << "lingprobe: unknown command '" << argv[1] << "'\n";
  usage(std::cerr);
  return 2;
}
