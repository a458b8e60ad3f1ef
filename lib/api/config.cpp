#include "api/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace lingprobe::api {
namespace {

// LINGPROBE_* variables that are not options: read by the shim, the preload
// stub and the build scripts.
const char* const kNonOptionVariables[] = {
    "LIBRARY", "REAL_LIBRARY", "PRELOAD", "BUILD_DIR", "PYTHON_SHIM",  // where things are; the stub's switch
    "PARENT_PID", "PARENT_RANK",                 // set by a recording process for the processes it starts
    "SHIM_PATH", "PYTHONPATH_BEFORE",            // the stub's PYTHONPATH entry, undone by the shim
    "PRELOAD_WARNED"};                           // one warning per process tree

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string parse_bool(const std::string& v, bool& out) {
  const std::string u = upper(v);
  if (u == "1" || u == "TRUE" || u == "YES" || u == "ON") {
    out = true;
  } else if (u == "0" || u == "FALSE" || u == "NO" || u == "OFF") {
    out = false;
  } else {
    return "expected a boolean (1/0, true/false, yes/no, on/off), got '" + v + "'";
  }
  return "";
}

std::string parse_int(const std::string& v, int64_t& out, int64_t min) {
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || errno || *end) return "expected an integer, got '" + v + "'";
  if (x < min) return "expected an integer >= " + std::to_string(min) + ", got '" + v + "'";
  out = x;
  return "";
}

std::string parse_double(const std::string& v, double& out) {
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || errno || *end || x < 0) return "expected a non-negative number, got '" + v + "'";
  out = x;
  return "";
}

}  // namespace

const std::vector<ConfigEntry>& config_table() {
  static const std::vector<ConfigEntry> table = {
      {"ENABLE", "bool", "1", "Record from initialisation on. 0: load and wait for start (API, shim or control file)."},
      {"OUT", "path", "lingprobe-out", "Output root; each launch writes its own run directory OUT/{run_id}/ "
                                        "(metadata/metadata_rank{R}_pid{P}.jsonl, ...); OUT/latest points at the newest."},
      {"OPS", "string", "", "Ops to record: comma-separated names or globs (aten::linear,aten::*conv*); "
                            "per stage with 'stage:glob,...;stage:glob' (dit:aten::linear;vae:aten::conv3d). Empty: all."},
      {"OPS_DENY", "string", "", "Comma-separated ops or globs never recorded (applied after OPS)."},
      {"NESTED", "bool", "0", "Also record calls made inside another op (with their depth). Default: top-level calls only."},
      {"CALL_RECORDS", "bool", "1", "Write one 'call' record per call (timing); 0 keeps only signatures and counts."},
      {"STAGE_MAP", "string", "", "Python stage rules: stage=ModuleClass|pkg.module:function;... (e.g. "
                                  "dit=WanModel;vae=WanVAE|Decoder3d;output=wan.utils.utils:save_video)."},
      {"NVTX_MAP", "string", "", "NVTX range name (regex) -> stage: stage=regex;... (e.g. dit=^(dit|transformer)). "
                                 "Unmapped ranges leave the stage unchanged."},
      {"FLUSH_INTERVAL_MS", "int", "500", "How often the writer thread drains buffers and writes cumulative counts."},
      {"BUFFER_RECORDS", "int", "65536", "Call records buffered per thread before the overflow policy applies."},
      {"OVERFLOW", "drop|block", "drop", "When a thread's buffer is full: drop the call record (counted in 'dropped') "
                                         "or block the calling thread until the writer drains it."},
      {"CONTROL_FILE", "path", "", "A file the writer polls: first word 'start' or 'stop' switches recording (no signals)."},
      {"SKIP_CALLS", "int", "0", "Warm-up: ignore the first N top-level calls after recording starts."},
      {"SKIP_SECONDS", "float", "0", "Warm-up: ignore calls in the first S seconds after recording starts."},
      {"RANK", "int", "-1", "This process's rank; -1 takes RANK from the environment (torchrun)."},
      {"LOCAL_RANK", "int", "-1", "Local rank; -1 takes LOCAL_RANK from the environment."},
      {"WORLD_SIZE", "int", "-1", "World size; -1 takes WORLD_SIZE from the environment."},
      {"ROLE", "auto|rank|single|launcher|child", "auto",
       "auto: 'launcher' for torchrun's agent (writes nothing); 'child' for a process started by a recording "
       "process (its own file, never a rank's); 'rank' when the rank is known (RANK, SLURM_PROCID, "
       "OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, later init_process_group or set_rank); else 'single' (rank 0 of 1)."},
      {"RUN_ID", "string", "", "The launch id all processes of a launch share; names the run directory OUT/{run_id}. "
                               "Default: TORCHELASTIC_RUN_ID, SLURM_JOB_ID.STEP, PMIX_NAMESPACE, the one torchrun's agent "
                               "or a recording parent exports, else generated (UTC time and pid). 'none' counts as unset."},
      {"LOG_LEVEL", "trace|debug|info|warn|error|off", "info", "Log level of lingprobe's stderr messages."},
  };
  return table;
}

std::string apply_setting(Config& c, const std::string& raw_name, const std::string& v) {
  std::string name = upper(raw_name);
  if (name.rfind("LINGPROBE_", 0) == 0) name = name.substr(10);
  std::string err;
  if (name == "ENABLE") err = parse_bool(v, c.enable);
  else if (name == "OUT") {
    if (v.empty()) err = "expected a directory path, got ''";
    else c.out_dir = v;
  } else if (name == "OPS") c.ops = v;
  else if (name == "OPS_DENY") c.ops_deny = v;
  else if (name == "NESTED") err = parse_bool(v, c.nested);
  else if (name == "CALL_RECORDS") err = parse_bool(v, c.call_records);
  else if (name == "STAGE_MAP") c.stage_map = v;
  else if (name == "NVTX_MAP") c.nvtx_map = v;
  else if (name == "FLUSH_INTERVAL_MS") err = parse_int(v, c.flush_interval_ms, 1);
  else if (name == "BUFFER_RECORDS") err = parse_int(v, c.buffer_records, 16);
  else if (name == "OVERFLOW") {
    const std::string u = upper(v);
    if (u == "DROP") c.overflow = OverflowPolicy::Drop;
    else if (u == "BLOCK") c.overflow = OverflowPolicy::Block;
    else err = "expected 'drop' or 'block', got '" + v + "'";
  } else if (name == "CONTROL_FILE") c.control_file = v;
  else if (name == "SKIP_CALLS") err = parse_int(v, c.skip_calls, 0);
  else if (name == "SKIP_SECONDS") err = parse_double(v, c.skip_seconds);
  else if (name == "RANK") err = parse_int(v, c.rank, -1);
  else if (name == "LOCAL_RANK") err = parse_int(v, c.local_rank, -1);
  else if (name == "WORLD_SIZE") err = parse_int(v, c.world_size, -1);
  else if (name == "ROLE") {
    const std::string u = upper(v);
    if (u == "AUTO") c.role = Role::Auto;
    else if (u == "RANK") c.role = Role::Rank;
    else if (u == "SINGLE") c.role = Role::Single;
    else if (u == "LAUNCHER") c.role = Role::Launcher;
    else if (u == "CHILD") c.role = Role::Child;
    else err = "expected auto, rank, single, launcher or child, got '" + v + "'";
  } else if (name == "RUN_ID") c.run_id = v;
  else if (name == "LOG_LEVEL") {
    static const char* const kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
    std::string lower = v;
    for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (std::none_of(std::begin(kLevels), std::end(kLevels), [&](const char* l) { return lower == l; }))
      err = "expected trace, debug, info, warn, error or off, got '" + v + "'";
    else c.log_level = lower;
  } else {
    return "unknown option LINGPROBE_" + name + " (run `lingprobe config` for the list)";
  }
  if (!err.empty()) return "LINGPROBE_" + name + ": " + err;
  return "";
}

std::string apply_environment(Config& config, char** env, std::vector<std::string>* unknown) {
  if (!env) return "";
  for (char** e = env; *e; ++e) {
    if (std::strncmp(*e, "LINGPROBE_", 10) != 0) continue;
    const char* eq = std::strchr(*e, '=');
    if (!eq) continue;
    std::string name(static_cast<const char*>(*e + 10), eq);
    if (std::any_of(std::begin(kNonOptionVariables), std::end(kNonOptionVariables),
                    [&](const char* n) { return name == n; }))
      continue;
    if (std::none_of(config_table().begin(), config_table().end(),
                     [&](const ConfigEntry& e) { return name == e.name; })) {
      if (unknown) unknown->push_back("LINGPROBE_" + name);
      continue;
    }
    std::string err = apply_setting(config, name, eq + 1);
    if (!err.empty()) return err;
  }
  return "";
}

std::string describe_config_table() {
  std::string out = "lingprobe configuration (environment variables; the same names, without the prefix,\n"
                    "are the C ABI's settings and the Python shim's keyword options)\n\n";
  for (const auto& e : config_table()) {
    out += "LINGPROBE_";
    out += e.name;
    out += "  (";
    out += e.type;
    out += ", default '";
    out += e.default_text;
    out += "')\n    ";
    out += e.description;
    out += "\n";
  }
  return out;
}

format::JsonValue config_json(const Config& c) {
  using format::JsonValue;
  static const char* const kRoles[] = {"auto", "rank", "single", "launcher", "child"};
  JsonValue o = JsonValue::object();
  o.set("enable", JsonValue::boolean(c.enable));
  o.set("out", JsonValue::string(c.out_dir));
  o.set("ops", JsonValue::string(c.ops));
  o.set("ops_deny", JsonValue::string(c.ops_deny));
  o.set("nested", JsonValue::boolean(c.nested));
  o.set("call_records", JsonValue::boolean(c.call_records));
  o.set("stage_map", JsonValue::string(c.stage_map));
  o.set("nvtx_map", JsonValue::string(c.nvtx_map));
  o.set("flush_interval_ms", JsonValue::integer(c.flush_interval_ms));
  o.set("buffer_records", JsonValue::integer(c.buffer_records));
  o.set("overflow", JsonValue::string(c.overflow == OverflowPolicy::Drop ? "drop" : "block"));
  o.set("control_file", JsonValue::string(c.control_file));
  o.set("skip_calls", JsonValue::integer(c.skip_calls));
  o.set("skip_seconds", JsonValue::floating(c.skip_seconds));
  o.set("role", JsonValue::string(kRoles[static_cast<int>(c.role)]));
  o.set("log_level", JsonValue::string(c.log_level));
  return o;
}

}  // namespace lingprobe::api
