// The configuration table: each LINGPROBE_* option's name, type, default,
// description and parser, in the order `lingprobe config` prints them.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <utility>

#include "api/config.h"
#include "format/op_selection.h"

namespace lingprobe::api {

using format::Status;
using format::StatusCode;

namespace {

constexpr double kMaxSeconds = 1e7;                      // SKIP_SECONDS: about 115 days
constexpr int64_t kMaxFlushIntervalMs = 3600 * 1000;     // an hour
constexpr int64_t kMaxBufferRecords = int64_t{1} << 24;  // 16 Mi records, 768 MiB per thread
constexpr int64_t kMaxRank = int64_t{1} << 24;

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

Status bad(std::string message) { return Status(StatusCode::kBadInput, std::move(message)); }

Status parse_bool(const std::string& v, bool& out) {
  const std::string u = upper(v);
  if (u == "1" || u == "TRUE" || u == "YES" || u == "ON") {
    out = true;
  } else if (u == "0" || u == "FALSE" || u == "NO" || u == "OFF") {
    out = false;
  } else {
    return bad("expected a boolean (1/0, true/false, yes/no, on/off), got '" + v + "'");
  }
  return Status();
}

Status parse_int(const std::string& v, int64_t& out, int64_t min, int64_t max = std::numeric_limits<int64_t>::max()) {
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || errno || *end) return bad("expected an integer, got '" + v + "'");
  if (x < min || x > max)
    return bad("expected an integer from " + std::to_string(min) +
               (max == std::numeric_limits<int64_t>::max() ? " up" : " to " + std::to_string(max)) + ", got '" + v +
               "'");
  out = x;
  return Status();
}

Status parse_seconds(const std::string& v, double& out) {
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || errno || *end || !std::isfinite(x) || x < 0 || x > kMaxSeconds)
    return bad("expected seconds from 0 to " + std::to_string(static_cast<int64_t>(kMaxSeconds)) + ", got '" + v + "'");
  out = x;
  return Status();
}

Status parse_probability(const std::string& v, double& out) {
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || errno || *end || !std::isfinite(x) || !(x >= 0.0 && x <= 1.0))
    return bad("expected a probability in [0, 1], got '" + v + "'");
  out = x;
  return Status();
}

// One of an enum's names (case-insensitive); `accepted` says which.
template <typename E>
Status parse_choice(const std::string& v, std::initializer_list<std::pair<const char*, E>> names, E& out,
                    const char* accepted) {
  const std::string u = upper(v);
  for (const auto& [name, value] : names)
    if (u == name) {
      out = value;
      return Status();
    }
  return bad(std::string(accepted) + ", got '" + v + "'");
}

Status parse_op_patterns(const std::string& v, bool stages, std::string& out) {
  if (std::string err = format::op_patterns_error(v, stages); !err.empty()) return bad(err);
  out = v;
  return Status();
}

Status parse_log_level(const std::string& v, std::string& out) {
  static const char* const kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
  std::string lower = v;
  for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (std::none_of(std::begin(kLevels), std::end(kLevels), [&](const char* l) { return lower == l; }))
    return bad("expected trace, debug, info, warn, error or off, got '" + v + "'");
  out = lower;
  return Status();
}

}  // namespace

std::string sample_plan_file(const std::string& value) {
  struct stat st {};
  if (stat(value.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return value + "/reports/coverage_audit.json";
  return value;
}

Status parse_bytes(const std::string& v, int64_t& out) {
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
    return bad("expected bytes such as 4G, 512M or 1048576, got '" + v + "'");
  if (v.empty() || end == v.c_str() || errno || !(x >= 0) || x * mult > 9.0e18)
    return bad("expected bytes such as 4G, 512M or 1048576, got '" + v + "'");
  out = static_cast<int64_t>(x * mult);
  return Status();
}

namespace {

Status parse_sample_plan(const std::string& v, std::string& out) {
  struct stat st {};
  if (!v.empty() && stat(v.c_str(), &st) != 0)
    return Status(StatusCode::kIoFailed, "no such run directory or file: " + v + " (" + std::strerror(errno) +
                                             "); give an earlier run's directory (lingprobe-out/RUN_ID)");
  if (!v.empty() && access(sample_plan_file(v).c_str(), R_OK) != 0)
    return Status(StatusCode::kIoFailed, "cannot read " + sample_plan_file(v) + " (" + std::strerror(errno) +
                                             "): run `lingprobe audit " + v + "` on that run first");
  out = v;
  return Status();
}

// A class ("WanModel", "wan.modules.model.WanModel") or function ("pkg.module:qualname") name of a stage rule.
bool stage_rule_target(const std::string& t) {
  const auto name = [](const std::string& s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) {
      return std::isalnum(c) || c == '_' || c == '.' || c >= 0x80;  // a UTF-8 byte: Python names may have them
    });
  };
  const size_t colon = t.find(':');
  return colon == std::string::npos ? name(t) : name(t.substr(0, colon)) && name(t.substr(colon + 1));
}

// Python's str.strip() whitespace, which the shim's parser strips (_SPACE in python_shim/lingprobe/_stage_map.py).
constexpr const char* kSpace = " \t\r\n\v\f";

}  // namespace

Status check_stage_map(const std::string& v) {
  size_t begin = 0;
  while (begin <= v.size()) {
    const size_t end = std::min(v.find(';', begin), v.size());
    const std::string rule = v.substr(begin, end - begin);
    begin = end + 1;
    if (rule.find_first_not_of(kSpace) == std::string::npos) continue;
    const size_t eq = rule.find('=');
    if (eq == std::string::npos || rule.find_first_not_of(kSpace) == eq ||
        rule.find_first_not_of(std::string(kSpace) + "|", eq + 1) == std::string::npos)
      return Status(StatusCode::kBadInput, "rule '" + rule + "' is not stage=Class|pkg.module:function");
    size_t t = eq + 1;
    while (t <= rule.size()) {
      const size_t bar = std::min(rule.find('|', t), rule.size());
      std::string target = rule.substr(t, bar - t);
      target.erase(0, target.find_first_not_of(kSpace));
      target.erase(target.find_last_not_of(kSpace) + 1);
      t = bar + 1;
      if (target.empty() || stage_rule_target(target)) continue;  // an empty one is skipped, as the shim does
      return Status(StatusCode::kBadInput,
                    "'" + target + "' is not a class or pkg.module:function name" +
                        (target.find_first_of(",=") != std::string::npos ? ": rules are separated by ';'" : "") +
                        " (stage=Class|pkg.module:function;..., e.g. dit=WanModel;vae=WanVAE|Decoder3d)");
    }
  }
  return Status();
}

namespace {

// The table in five groups, in the order `lingprobe config` prints it: each
// entry's setter beside its documentation.
// Whether and what is recorded, and where.
void recording_entries(std::vector<ConfigEntry>& table) {
  table.insert(
      table.end(),
      {
          {"ENABLE", "bool", "1",
           "Record from initialisation on. 0: load and wait for start (API, shim or control file).",
           [](Config& c, const std::string& v) { return parse_bool(v, c.enable); }},
          {"OUT", "path", "lingprobe-out",
           "Output root; each launch writes its own run directory OUT/{run_id}/ "
           "(metadata/metadata_rank{R}_pid{P}.jsonl, ...); OUT/latest points at the newest.",
           [](Config& c, const std::string& v) {
             return v.empty() ? bad("expected a directory path, got ''") : (c.out_dir = v, Status());
           }},
          {"OPS", "string", "",
           "Ops to record: comma-separated names or globs (aten::linear,aten::*conv*); "
           "per stage with 'stage:glob,...;stage:glob' (dit:aten::linear;vae:aten::conv3d). Empty: all.",
           [](Config& c, const std::string& v) { return parse_op_patterns(v, true, c.ops); }},
          {"OPS_DENY", "string", "", "Comma-separated ops or globs never recorded (applied after OPS).",
           [](Config& c, const std::string& v) { return parse_op_patterns(v, false, c.ops_deny); }},
          {"NESTED", "bool", "0",
           "Also record calls made inside another op (with their depth). Default: top-level calls only.",
           [](Config& c, const std::string& v) { return parse_bool(v, c.nested); }},
          {"SUPPRESS_NESTED", "auto|always|never", "auto",
           "Below a recorded top-level call, switch RecordFunction off on the thread (at::enableRecordFunction) so its "
           "nested calls are not boxed; back on at the call's end. auto: only below ops whose first 8 calls made at "
           "least "
           "SUPPRESS_NESTED_MIN nested calls each on average (one off/on pair costs about 3-4 nested calls' boxing); "
           "always: below every top-level call; never: nested calls are boxed and seen, as before. Never while another "
           "RecordFunction callback is registered (torch.profiler, the execution-trace observer): they keep seeing "
           "nested "
           "calls. Ignored with NESTED=1.",
           [](Config& c, const std::string& v) {
             return parse_choice(
                 v,
                 {{"AUTO", SuppressNested::Auto}, {"ALWAYS", SuppressNested::Always}, {"NEVER", SuppressNested::Never}},
                 c.suppress_nested, "expected auto, always or never");
           }},
          {"SUPPRESS_NESTED_MIN", "int", "4",
           "auto suppression: the nested calls per call an op must make (at least 1).",
           [](Config& c, const std::string& v) { return parse_int(v, c.suppress_nested_min, 1, 1 << 20); }},
          {"CALL_RECORDS", "bool", "1",
           "Write one 'call' record per call (timing); 0 keeps only signatures and counts.",
           [](Config& c, const std::string& v) { return parse_bool(v, c.call_records); }},
          {"CALL_TIMES", "bool", "1",
           "Read the clock twice per recorded call for its call record's t0_ns and t1_ns (host time per call and per "
           "stage, the trace's slices, the ranks' spans); 0 keeps the records (ids, order, depth, thread: enough to "
           "match a run with torch.profiler's by call order) with both times 0, and saves the two clock reads, "
           "about 40 instructions per call. Ignored with CALL_RECORDS=0.",
           [](Config& c, const std::string& v) { return parse_bool(v, c.call_times); }},
      });
}

// Stages, and how the writer thread drains the buffers.
void writer_entries(std::vector<ConfigEntry>& table) {
  table.insert(
      table.end(),
      {
          {"FOLD_SCALARS", "bool", "0",
           "Write the values of scalar arguments (int, float and Scalar schema types: indices, positions, alphas) and "
           "of scalar outputs (item, _local_scalar_dense) as their type (\"<int>\", \"<float>\") in signatures, so "
           "that a decode loop's position scalars do not mint a signature per step. Tensors, dtypes and int[] "
           "shapes keep their values. The header says so; audit and diff refuse to mix folded and unfolded runs.",
           [](Config& c, const std::string& v) { return parse_bool(v, c.fold_scalars); }},
          {"STAGE_MAP", "string", "",
           "Python stage rules: stage=ModuleClass|pkg.module:function;... (e.g. "
           "dit=WanModel;vae=WanVAE|Decoder3d;output=wan.utils.utils:save_video).",
           [](Config& c, const std::string& v) {
             c.stage_map = v;  // checked by `lingprobe run` and the shim (check_stage_map); a bad one records unstaged
             return Status();
           }},
          {"NVTX_MAP", "string", "",
           "NVTX range name (regex) -> stage: stage=regex;... (e.g. dit=^(dit|transformer)). "
           "Unmapped ranges leave the stage unchanged.",
           [](Config& c, const std::string& v) {
             c.nvtx_map = v;
             return Status();
           }},
          {"FLUSH_INTERVAL_MS", "int", "500",
           "How often the writer thread drains buffers and writes cumulative counts (1 to 3600000). A "
           "SIGKILL loses at most about this much of the calls' records.",
           [](Config& c, const std::string& v) { return parse_int(v, c.flush_interval_ms, 1, kMaxFlushIntervalMs); }},
          {"SIGNAL_FLUSH", "bool", "1",
           "SIGTERM, SIGHUP and SIGINT whose disposition at init is the default (they would end the process without "
           "atexit; Python's SIGINT handler or the program's own are left alone): finalize first (at most 10 s), then "
           "end by the same signal, so the exit status is unchanged. A second signal ends the process at once.",
           [](Config& c, const std::string& v) { return parse_bool(v, c.signal_flush); }},
          {"BUFFER_RECORDS", "int", "65536",
           "Call records buffered per thread before the overflow policy applies (16 to 16777216).",
           [](Config& c, const std::string& v) { return parse_int(v, c.buffer_records, 16, kMaxBufferRecords); }},
          {"OVERFLOW", "drop|block", "drop",
           "When a thread's buffer is full: drop the call record (counted in 'dropped') "
           "or block the calling thread until the writer drains it.",
           [](Config& c, const std::string& v) {
             return parse_choice(v, {{"DROP", OverflowPolicy::Drop}, {"BLOCK", OverflowPolicy::Block}}, c.overflow,
                                 "expected 'drop' or 'block'");
           }},
          {"CONTROL_FILE", "path", "",
           "A file the writer polls: first word 'start' or 'stop' switches recording (no signals).",
           [](Config& c, const std::string& v) {
             c.control_file = v;
             return Status();
           }},
      });
}

// Warm-up, ranks and the launch's identity.
void launch_entries(std::vector<ConfigEntry>& table) {
  table.insert(
      table.end(),
      {
          {"SKIP_CALLS", "int", "0", "Warm-up: ignore the first N top-level calls after recording starts.",
           [](Config& c, const std::string& v) { return parse_int(v, c.skip_calls, 0); }},
          {"SKIP_SECONDS", "float", "0",
           "Warm-up: ignore calls in the first S seconds after recording starts (0 to 1e7).",
           [](Config& c, const std::string& v) { return parse_seconds(v, c.skip_seconds); }},
          {"RANK", "int", "-1", "This process's rank (below 2^24); -1 takes RANK from the environment (torchrun).",
           [](Config& c, const std::string& v) { return parse_int(v, c.rank, -1, kMaxRank - 1); }},
          {"LOCAL_RANK", "int", "-1", "Local rank; -1 takes LOCAL_RANK from the environment.",
           [](Config& c, const std::string& v) { return parse_int(v, c.local_rank, -1, kMaxRank - 1); }},
          {"WORLD_SIZE", "int", "-1", "World size; -1 takes WORLD_SIZE from the environment.",
           [](Config& c, const std::string& v) { return parse_int(v, c.world_size, -1, kMaxRank); }},
          {"ROLE", "auto|rank|single|launcher|child", "auto",
           "auto: 'launcher' for torchrun's agent (writes nothing); 'child' for a process started by a recording "
           "process (its own file, never a rank's); 'rank' when the rank is known (RANK, SLURM_PROCID, "
           "OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, later init_process_group or set_rank); else 'single' (rank 0 of "
           "1).",
           [](Config& c, const std::string& v) {
             return parse_choice(v,
                                 {{"AUTO", Role::Auto},
                                  {"RANK", Role::Rank},
                                  {"SINGLE", Role::Single},
                                  {"LAUNCHER", Role::Launcher},
                                  {"CHILD", Role::Child}},
                                 c.role, "expected auto, rank, single, launcher or child");
           }},
          {"RUN_ID", "string", "",
           "The launch id all processes of a launch share; names the run directory OUT/{run_id}. "
           "Default: TORCHELASTIC_RUN_ID, SLURM_JOB_ID.STEP, PMIX_NAMESPACE, the one torchrun's agent "
           "or a recording parent exports, else generated (UTC time and pid). 'none' counts as unset.",
           [](Config& c, const std::string& v) {
             c.run_id = v;
             return Status();
           }},
          {"LOG_LEVEL", "trace|debug|info|warn|error|off", "info", "Log level of lingprobe's stderr messages.",
           [](Config& c, const std::string& v) { return parse_log_level(v, c.log_level); }},
      });
}

// Snapshots and counters of sampled calls.
void evidence_entries(std::vector<ConfigEntry>& table) {
  table.insert(
      table.end(),
      {
          {"SNAPSHOTS", "bool", "0",
           "Snapshot sampled calls: their real input and output tensors to "
           "RUN_DIR/snapshots/{stage}_rank{R}_{h16}.pt (torch.load-able; `lingprobe replay` reruns them).",
           [](Config& c, const std::string& v) { return parse_bool(v, c.snapshots); }},
          {"PROFILE", "bool", "0",
           "Measure sampled calls' kernels inline with CUPTI (range profiler, kernel replay): "
           "RUN_DIR/profiles/{stage}_rank{R}_{h16}/ (kernels.json, metrics.csv, identity.json).",
           [](Config& c, const std::string& v) { return parse_bool(v, c.profile); }},
          {"PROFILE_METRICS", "string", "",
           "Comma-separated metrics for PROFILE; empty: the capability seed's eight "
           "(gpu__time_duration.sum, sm__/dram/lts throughput %, warps active %, DRAM bytes).",
           [](Config& c, const std::string& v) {
             c.profile_metrics = v;
             return Status();
           }},
          {"PROFILE_TIMING", "bool", "1",
           "With PROFILE: time each key's next call after its counters by CUPTI Activity alone (no replay, nothing "
           "held: the kernels run as without lingprobe, and their durations are what torch.profiler's trace shows). "
           "The capability report's kernel time and FLOP rate then come from that call (kernel_time_source "
           "activity); a key called once keeps its counters' own time. Costs one more window per key; the op does "
           "not wait for its kernels (their records are read on the writer's thread).",
           [](Config& c, const std::string& v) { return parse_bool(v, c.profile_timing); }},
          {"PROFILE_UNGUARDED", "bool", "0",
           "Open counter windows even while another tool holds CUPTI's callback subscriber (torch.profiler's Kineto "
           "keeps "
           "it after its first session). Off: such windows are refused (subscriber_held). On: other threads' kernel "
           "and "
           "graph launches are not held at their entry during a window: they run under kernel replay inside it "
           "(contaminated; a graph would run only its first node).",
           [](Config& c, const std::string& v) { return parse_bool(v, c.profile_unguarded); }},
          {"STAGE_GPU_TIME", "bool", "1",
           "With PROFILE: measure each stage's GPU time with CUDA timing events at its first op and at its end, on "
           "that "
           "op's stream (the capability report's denominator; intervals during which a counter window opened on the "
           "GPU "
           "are told apart). Costs two events per stage change of a thread.",
           [](Config& c, const std::string& v) { return parse_bool(v, c.stage_gpu_time); }},
      });
}

// Which calls are sampled, and the budgets that bound them.
void selection_entries(std::vector<ConfigEntry>& table) {
  table.insert(
      table.end(),
      {
          {"SAMPLE_FIRST", "int", "1", "Samples per input key (op, stage, arguments) per launch.",
           [](Config& c, const std::string& v) { return parse_int(v, c.sample_first, 1); }},
          {"SAMPLE_SKIP", "int", "0",
           "Skip the first N calls of each input key before sampling (warm-up: cuDNN "
           "heuristics, lazy loading); counted per process.",
           [](Config& c, const std::string& v) { return parse_int(v, c.sample_skip, 0); }},
          {"SAMPLE_EVERY", "int", "1", "After the skipped calls, consider every M-th call of a key.",
           [](Config& c, const std::string& v) { return parse_int(v, c.sample_every, 1); }},
          {"SAMPLE_PROBABILITY", "float", "1", "Sample a considered call with this probability (seeded, reproducible).",
           [](Config& c, const std::string& v) { return parse_probability(v, c.sample_probability); }},
          {"SAMPLE_SEED", "int", "0", "Seed of SAMPLE_PROBABILITY.",
           [](Config& c, const std::string& v) { return parse_int(v, c.sample_seed, 0); }},
          {"SAMPLE_OPS", "string", "",
           "Which (stage, op) are sampled, in OPS syntax (dit:aten::linear;vae:aten::conv3d). "
           "Empty: every recorded op.",
           [](Config& c, const std::string& v) { return parse_op_patterns(v, true, c.sample_ops); }},
          {"SAMPLE_COORDINATION", "claims|hash|none", "claims",
           "claims: each input key sampled once per launch by whichever process reaches it first (exclusive files in "
           "RUN_DIR/claims, which ranks must share); hash: by rank hash(key) mod world_size (no shared directory "
           "needed; "
           "keys that rank never runs stay unsampled, and the counts say so); none: every process samples on its own.",
           [](Config& c, const std::string& v) {
             return parse_choice(v,
                                 {{"CLAIMS", SampleCoordination::Claims},
                                  {"HASH", SampleCoordination::Hash},
                                  {"NONE", SampleCoordination::None}},
                                 c.sample_coordination, "expected claims, hash or none");
           }},
          {"SAMPLE_BUDGET_PROCESS", "bytes", "4G",
           "Tensor bytes one process may snapshot (disk, and host memory in flight).",
           [](Config& c, const std::string& v) { return parse_bytes(v, c.sample_budget_process); }},
          {"SAMPLE_BUDGET_RUN", "bytes", "16G", "Tensor bytes the whole launch may snapshot (RUN_DIR/claims/bytes).",
           [](Config& c, const std::string& v) { return parse_bytes(v, c.sample_budget_run); }},
          {"SAMPLE_BUDGET_DEVICE", "bytes", "2G",
           "Device memory held by copies waiting for the writer (per process). A call whose device copies could never "
           "fit it copies them into pinned host memory on its stream instead, at its key's next try "
           "(docs/SNAPSHOTS.md, Large tensors); 0 sends every device copy that way.",
           [](Config& c, const std::string& v) { return parse_bytes(v, c.sample_budget_device); }},
          {"PROFILE_BUDGET_S", "float", "300",
           "Wall seconds one process may stall in counter windows (PROFILE); once spent, sampled calls keep their "
           "snapshots and are refused counters (budget_profile). Set-up calls (model construction and loading, "
           "docs/SNAPSHOTS.md) may use an eighth of it, as of SAMPLE_BUDGET_PROCESS.",
           [](Config& c, const std::string& v) { return parse_seconds(v, c.profile_budget_s); }},
          {"SAMPLE_DEVICES", "auto|any|gpu", "auto",
           "auto: on a machine with an NVIDIA GPU, only calls that run on it are sampled (a meta or CPU call of a key "
           "leaves it to a later GPU call); elsewhere any call. any: the first due call, whatever its device. gpu: "
           "only "
           "GPU calls, whatever the machine shows. A process whose keys all ran off the GPU says so at exit.",
           [](Config& c, const std::string& v) {
             return parse_choice(
                 v, {{"AUTO", SampleDevices::Auto}, {"ANY", SampleDevices::Any}, {"GPU", SampleDevices::Gpu}},
                 c.sample_devices, "expected auto, any or gpu");
           }},
          {"SAMPLE_PLAN", "path", "",
           "An earlier run directory (audited: RUN_DIR/reports/coverage_audit.json) or that file: sample only the "
           "input "
           "keys that dominated it (their share of its measured kernel time or FLOPs), in that order until the byte "
           "and "
           "stall budgets are spent. Planned keys this run never meets are reported (docs/SNAPSHOTS.md).",
           [](Config& c, const std::string& v) { return parse_sample_plan(v, c.sample_plan); }},
      });
}

}  // namespace

const std::vector<ConfigEntry>& config_table() {
  static const std::vector<ConfigEntry> table = [] {
    std::vector<ConfigEntry> t;
    recording_entries(t);
    writer_entries(t);
    launch_entries(t);
    evidence_entries(t);
    selection_entries(t);
    return t;
  }();
  return table;
}

}  // namespace lingprobe::api
