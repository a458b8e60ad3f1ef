// lingprobe-replay: the torch-linked half of `lingprobe replay` (the
// `lingprobe` CLI itself never links libtorch and forwards here).
//   lingprobe replay SNAPSHOT|RUN_DIR [-o DIR] [--device DEV] [--quiet]
#include <sys/stat.h>


#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "audit/metadata_reader.h"
#include "format/sha256.h"
#include "replay/replay.h"
#include "sink/run_directory.h"

namespace {

int usage() {
  std::cerr << "usage: lingprobe replay SNAPSHOT|RUN_DIR [-o DIR] [--device DEV] [--quiet]\n"
               "  SNAPSHOT  a snapshot file (.pt); its replay goes to RUN_DIR/replays/{stem}/\n"
               "  RUN_DIR   replays every snapshot this run's metadata names (each checked against its sha256)\n"
               "  -o DIR    write replays/{stem}/ under DIR instead of the run directory\n"
               "  --device  replay on this device (cpu, cuda, cuda:1) instead of the recorded one\n"
               "Exit status 0 when every deterministic op replays exactly, 1 otherwise, 2 for bad usage.\n";
  return 2;
}

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string parent(const std::string& p) {
  const size_t s = p.find_last_of('/');
  return s == std::string::npos ? "." : (s == 0 ? "/" : p.substr(0, s));
}

std::string stem(const std::string& p) {
  std::string b = p.substr(p.find_last_of('/') + 1);
  if (b.size() > 3 && b.compare(b.size() - 3, 3, ".pt") == 0) b.resize(b.size() - 3);
  return b;
}

struct Target {
  std::string path, rel, sha256;  // sha256: as the metadata names it ("" for a file given directly)
};

}  // namespace

int run(int argc, char** argv);

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "lingprobe replay: " << e.what() << "\n";
    return 1;
  }
}

int run(int argc, char** argv) {
  std::string input, out_dir, device;
  bool quiet = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "-o" || a == "--output") && i + 1 < argc) out_dir = argv[++i];
    else if (a == "--device" && i + 1 < argc) device = argv[++i];
    else if (a == "--quiet" || a == "-q") quiet = true;
    else if (a == "-h" || a == "--help") return usage(), 0;
    else if (!a.empty() && a[0] == '-') return usage();
    else if (input.empty()) input = a;
    else return usage();
  }
  if (input.empty()) return usage();
  while (input.size() > 1 && input.back() == '/') input.pop_back();

  std::string run_dir;
  std::vector<Target> targets;
  if (is_dir(input)) {
    run_dir = input;
    if (!is_dir(run_dir + "/metadata")) {
      std::cerr << "lingprobe replay: " << run_dir << " is not a run directory (no metadata/); give OUT/{run_id}\n";
      return 2;
    }
    const std::vector<std::string> files = lingprobe::sink::metadata_files(run_dir);
    for (const auto& f : files) {
      lingprobe::audit::FileSummary s;
      auto rr = lingprobe::audit::read_metadata_file(f, s);
      if (!rr.ok) {
        std::cerr << "lingprobe replay: " << rr.error << "\n";
        return 1;
      }
      for (const auto& e : s.snapshots) targets.push_back({run_dir + "/" + e.path, e.path, e.sha256});
    }
    if (targets.empty()) {
      std::cerr << "lingprobe replay: " << run_dir << "'s metadata names no snapshot (was LINGPROBE_SNAPSHOTS=1?)\n";
      return 1;
    }
  } else {
    const std::string dir = parent(input);
    run_dir = dir.size() >= 9 && dir.compare(dir.size() - 9, 9, "snapshots") == 0 ? parent(dir) : dir;
    const std::string rel = input.rfind(run_dir + "/", 0) == 0 ? input.substr(run_dir.size() + 1) : input;
    targets.push_back({input, rel, ""});
  }
  const std::string replays = (out_dir.empty() ? run_dir : out_dir) + "/replays";

  int exact = 0, inexact = 0, nondet = 0, failed = 0;
  for (const auto& t : targets) {
    if (!t.sha256.empty()) {
      std::string sha;
      if (!lingprobe::format::sha256_file_hex(t.path, sha) || sha != t.sha256) {
        std::cout << "FAILED  " << t.rel << ": " << (sha.empty() ? "missing or unreadable" : "its SHA-256 differs from "
                     "the one the metadata recorded (the file was changed after the run)") << "\n";
        ++failed;
        continue;
      }
    }
    lingprobe::replay::ReplayOptions o;
    o.device = device;
    o.out_dir = replays + "/" + stem(t.path);
    o.snapshot_rel = t.rel;
    lingprobe::replay::ReplayResult r = lingprobe::replay::replay_snapshot(t.path, o);
    if (!r.ok) {
      std::cout << "FAILED  " << t.rel << ": " << r.error << "\n";
      ++failed;
      continue;
    }
    const char* verdict = !r.exact ? "nondet " : *r.exact ? "exact  " : "INEXACT";
    (!r.exact ? nondet : *r.exact ? exact : inexact)++;
    if (!quiet || (r.exact && !*r.exact)) {
      char line[512];
      std::snprintf(line, sizeof line, "%s %-8s %-28s max_abs %-10.3g rmse %-10.3g %s%s%s", verdict, r.stage.c_str(),
                    r.op.c_str(), r.max_abs, r.rmse, r.signature_matches ? "" : "signature differs! ",
                    r.device.c_str(), r.nondeterministic.empty() ? "" : (" (" + r.nondeterministic + ")").c_str());
      std::cout << line << "  " << t.rel << "\n";
    }
  }
  std::cout << "replayed " << targets.size() << " snapshot(s): " << exact << " exact, " << inexact << " inexact, "
            << nondet << " nondeterministic (exact null), " << failed << " failed; results in " << replays << "/\n";
  return inexact || failed ? 1 : 0;
}
