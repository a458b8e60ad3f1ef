#include "api/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <limits>
#include <cstdlib>
#include <cstring>

namespace lingprobe::api {
namespace {

// LINGPROBE_* variables that are not options: read by the shim, the preload
// stub and the build scripts.
// One line per group of names, each with what it is.
// clang-format off
const char* const kNonOptionVariables[] = {
    "LIBRARY", "REAL_LIBRARY", "PRELOAD", "BUILD_DIR", "PYTHON_SHIM",  // where things are; the stub's switch
    "PARENT_PID", "PARENT_RANK",                 // set by a recording process for the processes it starts
    "SHIM_PATH", "PYTHONPATH_BEFORE",            // the stub's PYTHONPATH entry, undone by the shim
    "PRELOAD_WARNED",                            // one warning per process tree
    "CLI", "PYTHON", "NVTX_HELPER"};             // read by scripts/reference-run.sh and the reference workload
// clang-format on

constexpr double kMaxSeconds = 1e7;                      // SKIP_SECONDS: about 115 days
constexpr int64_t kMaxFlushIntervalMs = 3600 * 1000;     // an hour
constexpr int64_t kMaxBufferRecords = int64_t{1} << 24;  // 16 Mi records, 768 MiB per thread
constexpr int64_t kMaxRank = int64_t{1} << 24;

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

std::string parse_int(const std::string& v, int64_t& out, int64_t min,
                      int64_t max = std::numeric_limits<int64_t>::max()) {
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || errno || *end) return "expected an integer, got '" + v + "'";
  if (x < min || x > max)
    return "expected an integer from " + std::to_string(min) +
           (max == std::numeric_limits<int64_t>::max() ? " up" : " to " + std::to_string(max)) + ", got '" + v + "'";
  out = x;
  return "";
}

std::string parse_seconds(const std::string& v, double& out) {
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || errno || *end || !std::isfinite(x) || x < 0 || x > kMaxSeconds)
    return "expected seconds from 0 to " + std::to_string(static_cast<int64_t>(kMaxSeconds)) + ", got '" + v + "'";
  out = x;
  return "";
}

std::string parse_probability(const std::string& v, double& out) {
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || errno || *end || !std::isfinite(x) || !(x >= 0.0 && x <= 1.0))
    return "expected a probability in [0, 1], got '" + v + "'";
  out = x;
  return "";
}

}  // namespace

std::string sample_plan_file(const std::string& value) {
  struct stat st {};
  if (stat(value.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return value + "/reports/coverage_audit.json";
  return value;
}

std::string parse_bytes(const std::string& v, int64_t& out) {
  errno = 0;
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  double mult = 1;
  std::string unit = upper(end ? std::string(end) : "");
  if (unit == "K" || unit == "KB" || unit == "KIB")
    mult = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty())
    return "expected bytes such as 4G, 512M or 1048576, got '" + v + "'";
  if (v.empty() || end == v.c_str() || errno || !(x >= 0) || x * mult > 9.0e18)
    return "expected bytes such as 4G, 512M or 1048576, got '" + v + "'";
  out = static_cast<int64_t>(x * mult);
  return "";
}

const std::vector<ConfigEntry>& config_table() {
  static const std::vector<ConfigEntry> table = {
      {"ENABLE", "bool", "1", "Record from initialisation on. 0: load and wait for start (API, shim or control file)."},
      {"OUT", "path", "lingprobe-out",
       "Output root; each launch writes its own run directory OUT/{run_id}/ "
       "(metadata/metadata_rank{R}_pid{P}.jsonl, ...); OUT/latest points at the newest."},
      {"OPS", "string", "",
       "Ops to record: comma-separated names or globs (aten::linear,aten::*conv*); "
       "per stage with 'stage:glob,...;stage:glob' (dit:aten::linear;vae:aten::conv3d). Empty: all."},
      {"OPS_DENY", "string", "", "Comma-separated ops or globs never recorded (applied after OPS)."},
      {"NESTED", "bool", "0",
       "Also record calls made inside another op (with their depth). Default: top-level calls only."},
      {"SUPPRESS_NESTED", "auto|always|never", "auto",
       "Below a recorded top-level call, switch RecordFunction off on the thread (at::enableRecordFunction) so its "
       "nested calls are not boxed; back on at the call's end. auto: only below ops whose first 8 calls made at least "
       "SUPPRESS_NESTED_MIN nested calls each on average (one off/on pair costs about 3-4 nested calls' boxing); "
       "always: below every top-level call; never: nested calls are boxed and seen, as before. Never while another "
       "RecordFunction callback is registered (torch.profiler, the execution-trace observer): they keep seeing nested "
       "calls. Ignored with NESTED=1."},
      {"SUPPRESS_NESTED_MIN", "int", "4", "auto suppression: the nested calls per call an op must make (at least 1)."},
      {"CALL_RECORDS", "bool", "1", "Write one 'call' record per call (timing); 0 keeps only signatures and counts."},
      {"STAGE_MAP", "string", "",
       "Python stage rules: stage=ModuleClass|pkg.module:function;... (e.g. "
       "dit=WanModel;vae=WanVAE|Decoder3d;output=wan.utils.utils:save_video)."},
      {"NVTX_MAP", "string", "",
       "NVTX range name (regex) -> stage: stage=regex;... (e.g. dit=^(dit|transformer)). "
       "Unmapped ranges leave the stage unchanged."},
      {"FLUSH_INTERVAL_MS", "int", "500",
       "How often the writer thread drains buffers and writes cumulative counts (1 to 3600000). A "
       "SIGKILL loses at most about this much of the calls' records."},
      {"SIGNAL_FLUSH", "bool", "1",
       "SIGTERM, SIGHUP and SIGINT whose disposition at init is the default (they would end the process without "
       "atexit; Python's SIGINT handler or the program's own are left alone): finalize first (at most 10 s), then "
       "end by the same signal, so the exit status is unchanged. A second signal ends the process at once."},
      {"BUFFER_RECORDS", "int", "65536",
       "Call records buffered per thread before the overflow policy applies (16 to 16777216)."},
      {"OVERFLOW", "drop|block", "drop",
       "When a thread's buffer is full: drop the call record (counted in 'dropped') "
       "or block the calling thread until the writer drains it."},
      {"CONTROL_FILE", "path", "",
       "A file the writer polls: first word 'start' or 'stop' switches recording (no signals)."},
      {"SKIP_CALLS", "int", "0", "Warm-up: ignore the first N top-level calls after recording starts."},
      {"SKIP_SECONDS", "float", "0", "Warm-up: ignore calls in the first S seconds after recording starts (0 to 1e7)."},
      {"RANK", "int", "-1", "This process's rank (below 2^24); -1 takes RANK from the environment (torchrun)."},
      {"LOCAL_RANK", "int", "-1", "Local rank; -1 takes LOCAL_RANK from the environment."},
      {"WORLD_SIZE", "int", "-1", "World size; -1 takes WORLD_SIZE from the environment."},
      {"ROLE", "auto|rank|single|launcher|child", "auto",
       "auto: 'launcher' for torchrun's agent (writes nothing); 'child' for a process started by a recording "
       "process (its own file, never a rank's); 'rank' when the rank is known (RANK, SLURM_PROCID, "
       "OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, later init_process_group or set_rank); else 'single' (rank 0 of "
       "1)."},
      {"RUN_ID", "string", "",
       "The launch id all processes of a launch share; names the run directory OUT/{run_id}. "
       "Default: TORCHELASTIC_RUN_ID, SLURM_JOB_ID.STEP, PMIX_NAMESPACE, the one torchrun's agent "
       "or a recording parent exports, else generated (UTC time and pid). 'none' counts as unset."},
      {"LOG_LEVEL", "trace|debug|info|warn|error|off", "info", "Log level of lingprobe's stderr messages."},
      {"SNAPSHOTS", "bool", "0",
       "Snapshot sampled calls: their real input and output tensors to "
       "RUN_DIR/snapshots/{stage}_rank{R}_{h16}.pt (torch.load-able; `lingprobe replay` reruns them)."},
      {"PROFILE", "bool", "0",
       "Measure sampled calls' kernels inline with CUPTI (range profiler, kernel replay): "
       "RUN_DIR/profiles/{stage}_rank{R}_{h16}/ (kernels.json, metrics.csv, identity.json)."},
      {"PROFILE_METRICS", "string", "",
       "Comma-separated metrics for PROFILE; empty: the capability seed's eight "
       "(gpu__time_duration.sum, sm__/dram/lts throughput %, warps active %, DRAM bytes)."},
      {"PROFILE_UNGUARDED", "bool", "0",
       "Open counter windows even while another tool holds CUPTI's callback subscriber (torch.profiler's Kineto keeps "
       "it after its first session). Off: such windows are refused (subscriber_held). On: other threads' kernel and "
       "graph launches are not held at their entry during a window: they run under kernel replay inside it "
       "(contaminated; a graph would run only its first node)."},
      {"STAGE_GPU_TIME", "bool", "1",
       "With PROFILE: measure each stage's GPU time with CUDA timing events at its first op and at its end, on that "
       "op's stream (the capability report's denominator; intervals during which a counter window opened on the GPU "
       "are told apart). Costs two events per stage change of a thread."},
      {"SAMPLE_FIRST", "int", "1", "Samples per input key (op, stage, arguments) per launch."},
      {"SAMPLE_SKIP", "int", "0",
       "Skip the first N calls of each input key before sampling (warm-up: cuDNN "
       "heuristics, lazy loading); counted per process."},
      {"SAMPLE_EVERY", "int", "1", "After the skipped calls, consider every M-th call of a key."},
      {"SAMPLE_PROBABILITY", "float", "1", "Sample a considered call with this probability (seeded, reproducible)."},
      {"SAMPLE_SEED", "int", "0", "Seed of SAMPLE_PROBABILITY."},
      {"SAMPLE_OPS", "string", "",
       "Which (stage, op) are sampled, in OPS syntax (dit:aten::linear;vae:aten::conv3d). "
       "Empty: every recorded op."},
      {"SAMPLE_COORDINATION", "claims|hash|none", "claims",
       "claims: each input key sampled once per launch by whichever process reaches it first (exclusive files in "
       "RUN_DIR/claims, which ranks must share); hash: by rank hash(key) mod world_size (no shared directory needed; "
       "keys that rank never runs stay unsampled, and the counts say so); none: every process samples on its own."},
      {"SAMPLE_BUDGET_PROCESS", "bytes", "4G",
       "Tensor bytes one process may snapshot (disk, and host memory in flight)."},
      {"SAMPLE_BUDGET_RUN", "bytes", "16G", "Tensor bytes the whole launch may snapshot (RUN_DIR/claims/bytes)."},
      {"SAMPLE_BUDGET_DEVICE", "bytes", "2G", "Device memory held by copies waiting for the writer (per process)."},
      {"PROFILE_BUDGET_S", "float", "300",
       "Wall seconds one process may stall in counter windows (PROFILE); once spent, sampled calls keep their "
       "snapshots and are refused counters (budget_profile). Set-up calls (model construction and loading, "
       "docs/SNAPSHOTS.md) may use an eighth of it, as of SAMPLE_BUDGET_PROCESS."},
      {"SAMPLE_DEVICES", "auto|any|gpu", "auto",
       "auto: on a machine with an NVIDIA GPU, only calls that run on it are sampled (a meta or CPU call of a key "
       "leaves it to a later GPU call); elsewhere any call. any: the first due call, whatever its device. gpu: only "
       "GPU calls, whatever the machine shows. A process whose keys all ran off the GPU says so at exit."},
      {"SAMPLE_PLAN", "path", "",
       "An earlier run directory (audited: RUN_DIR/reports/coverage_audit.json) or that file: sample only the input "
       "keys that dominated it (their share of its measured kernel time or FLOPs), in that order until the byte and "
       "stall budgets are spent. Planned keys this run never meets are reported (docs/SNAPSHOTS.md)."},
  };
  return table;
}

std::string apply_setting(Config& c, const std::string& raw_name, const std::string& v) {
  std::string name = upper(raw_name);
  if (name.rfind("LINGPROBE_", 0) == 0) name = name.substr(10);
  std::string err;
  if (name == "ENABLE")
    err = parse_bool(v, c.enable);
  else if (name == "OUT") {
    if (v.empty())
      err = "expected a directory path, got ''";
    else
      c.out_dir = v;
  } else if (name == "OPS")
    c.ops = v;
  else if (name == "OPS_DENY")
    c.ops_deny = v;
  else if (name == "NESTED")
    err = parse_bool(v, c.nested);
  else if (name == "SUPPRESS_NESTED") {
    const std::string u = upper(v);
    if (u == "AUTO")
      c.suppress_nested = SuppressNested::Auto;
    else if (u == "ALWAYS")
      c.suppress_nested = SuppressNested::Always;
    else if (u == "NEVER")
      c.suppress_nested = SuppressNested::Never;
    else
      err = "expected auto, always or never, got '" + v + "'";
  } else if (name == "SUPPRESS_NESTED_MIN")
    err = parse_int(v, c.suppress_nested_min, 1, 1 << 20);
  else if (name == "CALL_RECORDS")
    err = parse_bool(v, c.call_records);
  else if (name == "STAGE_MAP")
    c.stage_map = v;
  else if (name == "NVTX_MAP")
    c.nvtx_map = v;
  else if (name == "FLUSH_INTERVAL_MS")
    err = parse_int(v, c.flush_interval_ms, 1, kMaxFlushIntervalMs);
  else if (name == "SIGNAL_FLUSH")
    err = parse_bool(v, c.signal_flush);
  else if (name == "BUFFER_RECORDS")
    err = parse_int(v, c.buffer_records, 16, kMaxBufferRecords);
  else if (name == "OVERFLOW") {
    const std::string u = upper(v);
    if (u == "DROP")
      c.overflow = OverflowPolicy::Drop;
    else if (u == "BLOCK")
      c.overflow = OverflowPolicy::Block;
    else
      err = "expected 'drop' or 'block', got '" + v + "'";
  } else if (name == "CONTROL_FILE")
    c.control_file = v;
  else if (name == "SKIP_CALLS")
    err = parse_int(v, c.skip_calls, 0);
  else if (name == "SKIP_SECONDS")
    err = parse_seconds(v, c.skip_seconds);
  else if (name == "RANK")
    err = parse_int(v, c.rank, -1, kMaxRank - 1);
  else if (name == "LOCAL_RANK")
    err = parse_int(v, c.local_rank, -1, kMaxRank - 1);
  else if (name == "WORLD_SIZE")
    err = parse_int(v, c.world_size, -1, kMaxRank);
  else if (name == "ROLE") {
    const std::string u = upper(v);
    if (u == "AUTO")
      c.role = Role::Auto;
    else if (u == "RANK")
      c.role = Role::Rank;
    else if (u == "SINGLE")
      c.role = Role::Single;
    else if (u == "LAUNCHER")
      c.role = Role::Launcher;
    else if (u == "CHILD")
      c.role = Role::Child;
    else
      err = "expected auto, rank, single, launcher or child, got '" + v + "'";
  } else if (name == "RUN_ID")
    c.run_id = v;
  else if (name == "SNAPSHOTS")
    err = parse_bool(v, c.snapshots);
  else if (name == "PROFILE")
    err = parse_bool(v, c.profile);
  else if (name == "PROFILE_METRICS")
    c.profile_metrics = v;
  else if (name == "PROFILE_UNGUARDED")
    err = parse_bool(v, c.profile_unguarded);
  else if (name == "STAGE_GPU_TIME")
    err = parse_bool(v, c.stage_gpu_time);
  else if (name == "SAMPLE_FIRST")
    err = parse_int(v, c.sample_first, 1);
  else if (name == "SAMPLE_SKIP")
    err = parse_int(v, c.sample_skip, 0);
  else if (name == "SAMPLE_EVERY")
    err = parse_int(v, c.sample_every, 1);
  else if (name == "SAMPLE_PROBABILITY")
    err = parse_probability(v, c.sample_probability);
  else if (name == "SAMPLE_SEED")
    err = parse_int(v, c.sample_seed, 0);
  else if (name == "SAMPLE_OPS")
    c.sample_ops = v;
  else if (name == "SAMPLE_PLAN") {
    if (!v.empty() && access(sample_plan_file(v).c_str(), R_OK) != 0)
      err = "cannot read " + sample_plan_file(v) + " (" + std::strerror(errno) + "): run `lingprobe audit " + v +
            "` on that run first";
    else
      c.sample_plan = v;
  } else if (name == "SAMPLE_COORDINATION") {
    const std::string u = upper(v);
    if (u == "CLAIMS")
      c.sample_coordination = SampleCoordination::Claims;
    else if (u == "HASH")
      c.sample_coordination = SampleCoordination::Hash;
    else if (u == "NONE")
      c.sample_coordination = SampleCoordination::None;
    else
      err = "expected claims, hash or none, got '" + v + "'";
  } else if (name == "SAMPLE_BUDGET_PROCESS")
    err = parse_bytes(v, c.sample_budget_process);
  else if (name == "SAMPLE_BUDGET_RUN")
    err = parse_bytes(v, c.sample_budget_run);
  else if (name == "SAMPLE_BUDGET_DEVICE")
    err = parse_bytes(v, c.sample_budget_device);
  else if (name == "PROFILE_BUDGET_S")
    err = parse_seconds(v, c.profile_budget_s);
  else if (name == "SAMPLE_DEVICES") {
    const std::string u = upper(v);
    if (u == "AUTO")
      c.sample_devices = SampleDevices::Auto;
    else if (u == "ANY")
      c.sample_devices = SampleDevices::Any;
    else if (u == "GPU")
      c.sample_devices = SampleDevices::Gpu;
    else
      err = "expected auto, any or gpu, got '" + v + "'";
  } else if (name == "LOG_LEVEL") {
    static const char* const kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
    std::string lower = v;
    for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    if (std::none_of(std::begin(kLevels), std::end(kLevels), [&](const char* l) { return lower == l; }))
      err = "expected trace, debug, info, warn, error or off, got '" + v + "'";
    else
      c.log_level = lower;
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
  std::string out =
      "lingprobe configuration (environment variables; the same names, without the prefix,\n"
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
  if (!c.nested) {
    static const char* const kSuppressNested[] = {"auto", "always", "never"};
    o.set("suppress_nested", JsonValue::string(kSuppressNested[static_cast<int>(c.suppress_nested)]));
    o.set("suppress_nested_min", JsonValue::integer(c.suppress_nested_min));
  }
  o.set("call_records", JsonValue::boolean(c.call_records));
  o.set("stage_map", JsonValue::string(c.stage_map));
  o.set("nvtx_map", JsonValue::string(c.nvtx_map));
  o.set("flush_interval_ms", JsonValue::integer(c.flush_interval_ms));
  o.set("signal_flush", JsonValue::boolean(c.signal_flush));
  o.set("buffer_records", JsonValue::integer(c.buffer_records));
  o.set("overflow", JsonValue::string(c.overflow == OverflowPolicy::Drop ? "drop" : "block"));
  o.set("control_file", JsonValue::string(c.control_file));
  o.set("skip_calls", JsonValue::integer(c.skip_calls));
  o.set("skip_seconds", JsonValue::floating(c.skip_seconds));
  o.set("role", JsonValue::string(kRoles[static_cast<int>(c.role)]));
  o.set("log_level", JsonValue::string(c.log_level));
  o.set("snapshots", JsonValue::boolean(c.snapshots));
  o.set("profile", JsonValue::boolean(c.profile));
  if (c.profile) o.set("profile_metrics", JsonValue::string(c.profile_metrics));
  if (c.snapshots || c.profile) {
    static const char* const kCoordination[] = {"claims", "hash", "none"};
    o.set("sample_first", JsonValue::integer(c.sample_first));
    o.set("sample_skip", JsonValue::integer(c.sample_skip));
    o.set("sample_every", JsonValue::integer(c.sample_every));
    o.set("sample_probability", JsonValue::floating(c.sample_probability));
    o.set("sample_seed", JsonValue::integer(c.sample_seed));
    o.set("sample_ops", JsonValue::string(c.sample_ops));
    o.set("sample_coordination", JsonValue::string(kCoordination[static_cast<int>(c.sample_coordination)]));
    o.set("sample_budget_process", JsonValue::integer(c.sample_budget_process));
    o.set("sample_budget_run", JsonValue::integer(c.sample_budget_run));
    o.set("sample_budget_device", JsonValue::integer(c.sample_budget_device));
    o.set("sample_devices", JsonValue::string(c.sample_devices == SampleDevices::Auto  ? "auto"
                                              : c.sample_devices == SampleDevices::Any ? "any"
                                                                                       : "gpu"));
  }
  if (c.profile) o.set("profile_budget_s", JsonValue::floating(c.profile_budget_s));
  return o;
}

}  // namespace lingprobe::api
