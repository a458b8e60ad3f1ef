#include "run_command.h"

#include <dirent.h>
#include <limits.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <iostream>
#include <string>
#include <vector>

#include "api/config.h"
#include "api/identity.h"
#include "sink/run_directory.h"

extern "C" char** environ;

namespace lingprobe::tools {
namespace {

std::string self_dir() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string p(buf);
  return p.substr(0, p.rfind('/'));
}

bool exists(const std::string& p) { return access(p.c_str(), R_OK) == 0; }

std::string find_preload_stub() {
  const std::string dir = self_dir();
  for (const std::string& c : {dir + "/liblingprobe_preload.so", dir + "/../lib/liblingprobe_preload.so",
                               dir + "/../lib64/liblingprobe_preload.so"})
    if (exists(c)) return c;
  return "";
}

std::string absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char cwd[PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) return p;
  return std::string(cwd) + "/" + p;
}

void prepend_env(const char* name, const std::string& value, char sep) {
  const char* old = std::getenv(name);
  std::string v = value;
  if (old && *old) v += std::string(1, sep) + old;
  setenv(name, v.c_str(), 1);
}

int usage(std::ostream& os = std::cerr) {
  os << "usage: lingprobe run [-o DIR] [--ops SPEC] [--nested] [--no-call-records] [--stage-map MAP]\n"
        "                     [--nvtx-map MAP] [--set NAME=VALUE]... -- CMD [ARGS...]\n"
        "  e.g. lingprobe run -o out --ops 'dit:aten::linear;vae:aten::conv3d' -- torchrun --nproc_per_node=4 gen.py\n"
        "  NAME is any option `lingprobe config` lists.\n";
  return 2;
}

// torch 1.13's torchrun on Python 3.11 (Debian 12) cannot parse its own default --redirects=0 and fails with
// "'NoneType' object has no attribute 'get'", with or without lingprobe: a hint, never a rewrite of the command.
void hint_for_torchrun(char** command) {
  const std::string built = LINGPROBE_BUILT_TORCH;
  if (built.rfind("1.13", 0) != 0) return;
  bool torchrun = false, redirects = false;
  for (char** a = command; *a; ++a) {
    const std::string arg = *a;
    const std::string base = arg.substr(arg.rfind('/') == std::string::npos ? 0 : arg.rfind('/') + 1);
    torchrun = torchrun || base == "torchrun" || arg == "torch.distributed.run" || arg == "torch.distributed.launch";
    redirects = redirects || arg.rfind("--redirects", 0) == 0;
  }
  if (torchrun && !redirects)
    std::cerr << "lingprobe run: note: torch 1.13's torchrun under Python 3.11 (Debian 12) fails with \"'NoneType' "
                 "object has no attribute 'get'\" unless given --redirects=2 --tee=2, with or without lingprobe; "
                 "add them to the torchrun command if it does\n";
}

// After the job: what it wrote and the next command, or why there is nothing. The job's own exit status when it
// failed; 3 when it succeeded but no process recorded anything.
int report_job(int code, const std::string& run_dir) {
  size_t files = 0;
  if (DIR* d = opendir((run_dir + "/metadata").c_str())) {
    while (dirent* e = readdir(d)) files += std::strstr(e->d_name, ".jsonl") != nullptr;
    closedir(d);
  }
  if (files > 0) {
    std::cerr << "lingprobe run: command exited with status " << code << "; " << files << " metadata file(s) in "
              << run_dir << "/metadata (audit it: lingprobe audit " << run_dir << ")\n";
    return code;
  }
  std::cerr << "lingprobe run: command exited with status " << code << " and no process of it recorded anything ("
            << run_dir << " was not written)";
  if (code != 0) {
    std::cerr << "\n";
    return code;
  }
  std::cerr << ": was it a PyTorch program, and did it run any operator? (LINGPROBE_ENABLE=0 records only after "
               "start(); a launcher records nothing itself)\n";
  return 3;
}

}  // namespace

int config_command(int, char**) {
  std::cout << api::describe_config_table();
  return 0;
}

int run_command(int argc, char** argv) {
  std::vector<std::pair<std::string, std::string>> settings;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* opt) -> const char* {
      if (i + 1 >= argc) {
        std::cerr << "lingprobe run: " << opt << " needs a value\n";
        return nullptr;
      }
      return argv[++i];
    };
    if (a == "--") {
      ++i;
      break;
    } else if (a == "-o" || a == "--out") {
      const char* v = value("--out");
      if (!v) return 2;
      settings.emplace_back("OUT", absolute(v));
    } else if (a == "--ops") {
      const char* v = value("--ops");
      if (!v) return 2;
      settings.emplace_back("OPS", v);
    } else if (a == "--nested") {
      settings.emplace_back("NESTED", "1");
    } else if (a == "--no-call-records") {
      settings.emplace_back("CALL_RECORDS", "0");
    } else if (a == "--stage-map") {
      const char* v = value("--stage-map");
      if (!v) return 2;
      settings.emplace_back("STAGE_MAP", v);
    } else if (a == "--nvtx-map") {
      const char* v = value("--nvtx-map");
      if (!v) return 2;
      settings.emplace_back("NVTX_MAP", v);
    } else if (a == "--set") {
      const char* v = value("--set");
      if (!v) return 2;
      const char* eq = std::strchr(v, '=');
      if (!eq) {
        std::cerr << "lingprobe run: --set takes NAME=VALUE, got '" << v << "'\n";
        return 2;
      }
      settings.emplace_back(std::string(v, eq), eq + 1);
    } else if (a == "-h" || a == "--help") {
      usage(std::cout);
      return 0;
    } else {
      std::cerr << "lingprobe run: unknown option '" << a << "' (the command goes after --)\n";
      return usage();
    }
  }
  if (i >= argc) return usage();

  // Validate everything here, before the job starts: environment first, then options.
  // (An unknown LINGPROBE_* variable is the job's own warning, with its did-you-mean: said once, not twice.)
  api::Config config;
  format::Status config_status = api::apply_environment(config, environ);
  for (const auto& [k, v] : settings) {
    if (!config_status.ok()) break;
    config_status = api::apply_setting(config, k, v);
  }
  if (config_status.ok())
    if (format::Status map = api::check_stage_map(config.stage_map); !map.ok())
      config_status = format::Status(map.code(), "LINGPROBE_STAGE_MAP: " + map.message());
  if (!config_status.ok()) {
    std::cerr << "lingprobe run: " << config_status.message() << "\n";
    return 2;
  }
  const std::string out = absolute(config.out_dir);
  if (std::string why = sink::check_writable_directory(out); !why.empty()) {
    std::cerr << "lingprobe run: -o " << out << ": " << why << "; give a directory you can write\n";
    return 2;
  }
  if (!config.control_file.empty()) {
    if (std::string why = sink::check_file_path(config.control_file); !why.empty()) {
      std::cerr << "lingprobe run: LINGPROBE_CONTROL_FILE: " << why << "\n";
      return 2;
    }
  }
  const std::string stub = find_preload_stub();
  if (stub.empty()) {
    std::cerr << "lingprobe run: liblingprobe_preload.so not found next to " << self_dir() << " or in ../lib\n";
    return 2;
  }
  for (const auto& [k, v] : settings) {
    std::string name = k.rfind("LINGPROBE_", 0) == 0 ? k : "LINGPROBE_" + k;
    for (auto& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    setenv(name.c_str(), v.c_str(), 1);
  }
  setenv("LINGPROBE_OUT", out.c_str(), 1);
  // One launch id for every process of the command: its run directory is OUT/{run_id}.
  const std::string run_id = api::resolve_run_id(
      config, [](const char* n) -> const char* { return std::getenv(n); }, getpid(), getppid(),
      static_cast<int64_t>(std::time(nullptr)));
  setenv("LINGPROBE_RUN_ID", run_id.c_str(), 1);
  const std::string run_dir = out + "/" + run_id;
  // The stub puts the Python shim on PYTHONPATH in Python processes by itself.
  prepend_env("LD_PRELOAD", stub, ':');
  const std::string real = stub.substr(0, stub.rfind('/') + 1) + "liblingprobe.so";
  if (!std::getenv("LINGPROBE_LIBRARY") && exists(real)) setenv("LINGPROBE_LIBRARY", real.c_str(), 1);

  hint_for_torchrun(argv + i);
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("lingprobe run: fork");
    return 2;
  }
  if (pid == 0) {
    execvp(argv[i], argv + i);
    std::cerr << "lingprobe run: cannot run '" << argv[i] << "': " << std::strerror(errno) << "\n";
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);

  return report_job(code, run_dir);
}

}  // namespace lingprobe::tools
