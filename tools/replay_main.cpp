// lingprobe-replay: the torch-linked half of `lingprobe replay` (the
// `lingprobe` CLI itself never links libtorch and forwards here).
//   lingprobe replay SNAPSHOT|RUN_DIR [-o DIR] [--device DEV] [--profile] [--quiet]
#include <dirent.h>
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <algorithm>
#include <ctime>
#include <map>

#include "audit/metadata_reader.h"
#include "format/canonical_json.h"
#include "format/sha256.h"
#include "lingprobe/lingprobe.h"
#include "replay/replay.h"
#include "replay/replay_profile.h"
#include "sink/run_directory.h"

namespace {

int usage(std::ostream& os = std::cerr) {
  os << "usage: lingprobe replay SNAPSHOT|RUN_DIR [-o DIR] [--device DEV] [--load-library LIB.so]... "
        "[--profile] [--quiet]\n"
        "  SNAPSHOT  a snapshot file (.pt); its replay goes to RUN_DIR/replays/{stem}/\n"
        "  RUN_DIR   replays every snapshot this run's metadata names (each checked against its sha256)\n"
        "  -o DIR    write replays/{stem}/ under DIR instead of the run directory\n"
        "  --device  replay on this device (cpu, cuda, cuda:1) instead of the recorded one\n"
        "  --load-library  load this shared library first (an extension whose ops the run called: torchvision's\n"
        "            _C.so, a custom op's library; --library is the same), where the library the snapshot names\n"
        "            (the recorded process's, loaded by itself) is not on this machine; without either, such\n"
        "            snapshots are skipped, with their op named, and leave the exit status to the ops replayed\n"
        "  --profile then replay each again under lingprobe's inline counters (as the run measured it, into\n"
        "            replay_profiles/{run}/) and set that profile beside the run's: "
        "replays/{stem}/replay_profile.json\n"
        "Exit status 0 when every deterministic op replays exactly (skipped ones aside), 1 otherwise, 2 for bad "
        "usage.\n";
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
  std::string op, stage;          // from its first replay
};

// "aten.linear.default" -> "aten::linear" (OPS syntax: the name matches every overload).
std::string op_rule_name(const std::string& dotted) {
  const size_t dot = dotted.find('.');
  if (dot == std::string::npos) return dotted;
  const size_t second = dotted.find('.', dot + 1);
  return dotted.substr(0, dot) +
         "::" + dotted.substr(dot + 1, second == std::string::npos ? std::string::npos : second - dot - 1);
}

// The signature's 16 hex digits in a stem "{stage}_rank{R}_{h16}[_s{seq}][_p{pid}]" ("" if it has none).
std::string stem_hash(const std::string& name) {
  const size_t rank = name.rfind("_rank");
  const size_t at = rank == std::string::npos ? std::string::npos : name.find('_', rank + 5);
  if (at == std::string::npos || name.size() < at + 17) return "";
  const std::string h = name.substr(at + 1, 16);
  if (h.find_first_not_of("0123456789abcdef") != std::string::npos) return "";
  if (name.size() > at + 17 && name[at + 17] != '_') return "";
  return h;
}

// The replay run's profile of the signature with these 16 hex digits: the first by name ("" if none).
std::string profile_with_hash(const std::string& run_dir, const std::string& h16) {
  std::vector<std::string> found;
  if (DIR* d = ::opendir((run_dir + "/profiles").c_str())) {
    while (dirent* e = ::readdir(d))
      if (stem_hash(e->d_name) == h16) found.push_back(run_dir + "/profiles/" + e->d_name);
    ::closedir(d);
  }
  std::sort(found.begin(), found.end());
  return found.empty() ? "" : found.front();
}

// Replays each target whose call the run profiled again, with lingprobe's inline counters on (its own run
// directory under BASE/replay_profiles/), then compares each replay's profile with the run's. Returns the failures.
int profile_replays(std::vector<Target>& targets, const std::string& run_dir, const std::string& base,
                    const std::string& device) {
  const std::string replays = base + "/replays";
  std::string ops;
  std::vector<Target*> chosen;
  for (auto& t : targets) {
    if (t.op.empty()) continue;  // its first replay failed (reported above)
    const std::string name = stem(t.path);
    if (stem_hash(name).empty() || !is_dir(run_dir + "/profiles/" + name)) {
      std::cout << "skipped --profile " << t.rel << ": the run has no profile of this call, nothing to compare\n";
      continue;
    }
    if (t.stage.find_first_of(":;,") != std::string::npos) {
      std::cout << "skipped --profile " << t.rel << ": its stage name '" << t.stage
                << "' has a character of the OPS syntax (: ; ,)\n";
      continue;
    }
    ops += (ops.empty() ? "" : ";") + t.stage + ":" + op_rule_name(t.op);
    chosen.push_back(&t);
  }
  if (chosen.empty()) return 0;
  if (lingprobe_get_state() != LINGPROBE_STATE_FRESH) {
    std::cout << "FAILED  --profile: lingprobe is already running in this process (preloaded into the replayer?); "
                 "run `lingprobe replay --profile` without LD_PRELOAD\n";
    return 1;
  }
  const std::string out = base + "/replay_profiles";
  const std::string run_id = "replay-" + std::to_string(std::time(nullptr)) + "-" + std::to_string(::getpid());
  // The job's environment is not this measurement's: no LINGPROBE_* settings, a single process of rank 0. Each
  // replayed call is the one to profile, whatever its device (auto would leave a CPU call on a GPU machine to a later
  // GPU call that never comes, and say nothing of it).
  const std::vector<std::string> settings = {
      "ENABLE=0",          "PROFILE=1",   "SNAPSHOTS=0", "STAGE_GPU_TIME=0",         "RUN_ID=" + run_id,
      "OPS=" + ops,        "ROLE=single", "RANK=0",      "SAMPLE_COORDINATION=none", "LOG_LEVEL=warn",
      "SAMPLE_DEVICES=any"};
  std::vector<const char*> raw;
  for (const auto& x : settings) raw.push_back(x.c_str());
  lingprobe_options o{};
  o.struct_size = sizeof o;
  o.use_environment = 0;
  o.out_dir = out.c_str();
  o.settings = raw.data();
  o.settings_count = raw.size();
  char dir[4096] = {0};
  if (lingprobe_status st = lingprobe_init(&o);
      st != LINGPROBE_OK || (st = lingprobe_get_run_dir(dir, sizeof dir)) != LINGPROBE_OK) {
    std::cout << "FAILED  --profile: lingprobe: " << lingprobe_status_string(st) << ": " << lingprobe_last_error()
              << "\n";
    return 1;
  }
  std::vector<std::string> errors(chosen.size());
  for (size_t i = 0; i < chosen.size(); ++i) {
    lingprobe::replay::ReplayOptions ro;
    ro.device = device;                          // ro.out_dir empty: this pass writes no replay files
    ro.before_call = [] { lingprobe_start(); };  // recording the call only, not its inputs' rebuilding
    ro.after_call = [] { lingprobe_stop(); };
    lingprobe_stage_push(chosen[i]->stage.c_str());
    const lingprobe::replay::ReplayResult r = lingprobe::replay::replay_snapshot(chosen[i]->path, ro);
    lingprobe_stage_pop();
    if (!r.status.ok()) errors[i] = "its replay under counters failed: " + r.status.message();
  }
  lingprobe_finalize();
  int failed = 0;
  for (size_t i = 0; i < chosen.size(); ++i) {
    const Target& t = *chosen[i];
    const std::string name = stem(t.path);
    const std::string mine = errors[i].empty() ? profile_with_hash(dir, stem_hash(name)) : "";
    std::string error = errors[i];
    lingprobe::format::JsonValue c = lingprobe::format::JsonValue::null();
    if (!mine.empty())
      c = lingprobe::replay::compare_profiles(run_dir + "/profiles/" + name, mine, error);
    else if (error.empty())
      error = "the replay opened no counter window (its reasons are in " + std::string(dir) +
              "'s counts record: `lingprobe audit " + dir + "`)";
    if (c.is_null()) {
      std::cout << "FAILED  --profile " << t.rel << ": " << error << "\n";
      ++failed;
      continue;
    }
    const std::string path = replays + "/" + name + "/replay_profile.json";
    if (!lingprobe::sink::replace_file(path, lingprobe::format::pretty_json(c) + "\n").empty()) ++failed;
    std::cout << lingprobe::replay::profile_line(c) << "  " << t.rel << "\n";
  }
  std::cout << "replay profiles: " << dir << "/profiles/; comparisons in " << replays
            << "/{stem}/replay_profile.json\n";
  return failed;
}

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
  bool quiet = false, profile = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "-o" || a == "--output") && i + 1 < argc)
      out_dir = argv[++i];
    else if (a == "--device" && i + 1 < argc)
      device = argv[++i];
    else if ((a == "--load-library" || a == "--library") && i + 1 < argc) {
      const char* lib = argv[++i];
      if (!::dlopen(lib, RTLD_NOW | RTLD_GLOBAL)) {
        std::cerr << "lingprobe replay: " << a << " " << lib << ": " << ::dlerror() << "\n";
        return 2;
      }
    } else if (a == "--quiet" || a == "-q")
      quiet = true;
    else if (a == "--profile")
      profile = true;
    else if (a == "-h" || a == "--help")
      return usage(std::cout), 0;
    else if (!a.empty() && a[0] == '-')
      return usage();
    else if (input.empty())
      input = a;
    else
      return usage();
  }
  if (input.empty()) return usage();
  if (::access(input.c_str(), F_OK) != 0) {
    std::cerr << "lingprobe replay: " << input << " does not exist: give a snapshot (.pt) or a run directory\n";
    return 2;
  }
  if (!out_dir.empty()) {  // one line up front, not a failure per snapshot
    if (std::string why = lingprobe::sink::check_writable_directory(out_dir); !why.empty()) {
      std::cerr << "lingprobe replay: -o " << out_dir << ": " << why << "; give a directory this user can write\n";
      return 2;
    }
  }
  while (input.size() > 1 && input.back() == '/') input.pop_back();

  std::string run_dir;
  std::vector<Target> targets;
  if (is_dir(input)) {
    run_dir = input;
    if (std::string why = lingprobe::sink::find_run_directory(run_dir); !why.empty()) {
      std::cerr << "lingprobe replay: " << why << "\n";
      return 2;
    }
    const std::vector<std::string> files = lingprobe::sink::metadata_files(run_dir);
    for (const auto& f : files) {
      lingprobe::audit::FileSummary s;
      auto rr = lingprobe::audit::read_metadata_file(f, s);
      if (!rr.status.ok()) {
        std::cerr << "lingprobe replay: " << rr.status.message() << "\n";
        return 1;
      }
      for (const auto& e : s.snapshots) targets.push_back({run_dir + "/" + e.path, e.path, e.sha256, "", ""});
    }
    if (targets.empty()) {
      std::cerr << "lingprobe replay: " << run_dir << "'s metadata names no snapshot (was LINGPROBE_SNAPSHOTS=1?)\n";
      return 1;
    }
  } else {
    const std::string dir = parent(input);
    run_dir = dir.size() >= 9 && dir.compare(dir.size() - 9, 9, "snapshots") == 0 ? parent(dir) : dir;
    const std::string rel = input.rfind(run_dir + "/", 0) == 0 ? input.substr(run_dir.size() + 1) : input;
    targets.push_back({input, rel, "", "", ""});
  }
  const std::string replays = (out_dir.empty() ? run_dir : out_dir) + "/replays";

  int exact = 0, inexact = 0, nondet = 0, failed = 0, skipped = 0;
  for (auto& t : targets) {
    if (!t.sha256.empty()) {
      std::string sha;
      if (!lingprobe::format::sha256_file_hex(t.path, sha) || sha != t.sha256) {
        std::cout << "FAILED  " << t.rel << ": "
                  << (sha.empty() ? "missing or unreadable"
                                  : "its SHA-256 differs from "
                                    "the one the metadata recorded (the file was changed after the run)")
                  << "\n";
        ++failed;
        continue;
      }
    }
    lingprobe::replay::ReplayOptions o;
    o.device = device;
    o.out_dir = replays + "/" + stem(t.path);
    o.snapshot_rel = t.rel;
    lingprobe::replay::ReplayResult r = lingprobe::replay::replay_snapshot(t.path, o);
    if (r.status.code() == lingprobe::format::StatusCode::kUnsupported) {
      std::cout << "skipped " << t.rel << ": " << r.status.message() << "\n";
      ++skipped;
      continue;
    }
    if (!r.status.ok()) {
      std::cout << "FAILED  " << t.rel << ": " << r.status.message() << "\n";
      ++failed;
      continue;
    }
    t.op = r.op;
    t.stage = r.stage;
    const char* verdict = !r.exact ? "nondet " : *r.exact ? "exact  " : "INEXACT";
    (!r.exact ? nondet : *r.exact ? exact : inexact)++;
    if (!quiet || (r.exact && !*r.exact)) {
      char line[512];
      std::snprintf(line, sizeof line, "%s %-8s %-28s max_abs %-10.3g rmse %-10.3g %s%s%s", verdict, r.stage.c_str(),
                    r.op.c_str(), r.max_abs, r.rmse, r.signature_matches ? "" : "signature differs! ", r.device.c_str(),
                    r.nondeterministic.empty() ? "" : (" (" + r.nondeterministic + ")").c_str());
      std::cout << line << "  " << t.rel << "\n";
    }
  }
  std::cout << "replayed " << targets.size() << " snapshot(s): " << exact << " exact, " << inexact << " inexact, "
            << nondet << " nondeterministic (exact null), " << failed << " failed"
            << (skipped ? ", " + std::to_string(skipped) + " skipped (their op's library not loaded)" : std::string())
            << (exact + inexact + nondet > 0 ? "; results in " + replays + "/" : std::string("; nothing was written"))
            << "\n";
  if (profile) failed += profile_replays(targets, run_dir, out_dir.empty() ? run_dir : out_dir, device);
  return inexact || failed ? 1 : 0;
}
