// lingprobe's configuration: one table (name, type, default, description)
// from which LINGPROBE_* environment variables, the C ABI's settings and the
// Python shim's keyword options are all parsed, and which `lingprobe config`
// prints. Pure: no torch, no threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/json_value.h"
#include "format/status.h"

namespace lingprobe::api {

enum class OverflowPolicy { Drop, Block };
enum class SampleCoordination { Claims, Hash, None };
enum class Role { Auto, Rank, Single, Launcher, Child };
enum class SuppressNested { Auto, Always, Never };

// Which calls may be sampled: auto (GPU calls only on a machine with an
// NVIDIA GPU, any call elsewhere) or any.
enum class SampleDevices { Auto, Any, Gpu };

struct Config {
  bool enable = true;
  std::string out_dir = "lingprobe-out";
  std::string ops;       // selection: globs, optionally per stage ("dit:aten::linear;vae:aten::conv3d")
  std::string ops_deny;  // globs never recorded
  bool nested = false;
  SuppressNested suppress_nested = SuppressNested::Auto;
  int64_t suppress_nested_min = 4;
  bool call_records = true;
  bool call_times = true;     // the call records' host times (two clock reads per call); 0: t0_ns = t1_ns = 0
  bool fold_scalars = false;  // scalar values in signatures written as their type
  std::string stage_map;      // module classes / functions -> stage (Python shim)
  std::string nvtx_map;       // NVTX range-name regex -> stage
  int64_t flush_interval_ms = 500;
  bool signal_flush = true;  // SIGTERM/SIGHUP/SIGINT with the default disposition: finalize, then die by the signal
  int64_t buffer_records = 65536;
  OverflowPolicy overflow = OverflowPolicy::Drop;
  std::string control_file;
  int64_t skip_calls = 0;
  double skip_seconds = 0.0;
  int64_t rank = -1;        // -1: from RANK (torchrun)
  int64_t local_rank = -1;  // -1: from LOCAL_RANK
  int64_t world_size = -1;  // -1: from WORLD_SIZE
  Role role = Role::Auto;
  std::string run_id;  // "" or "none": TORCHELASTIC_RUN_ID, a scheduler's job id, else generated
  std::string log_level = "info";
  // Sampling (snapshots of sampled calls' tensors; docs/SNAPSHOTS.md).
  bool snapshots = false;
  bool profile = false;            // inline CUPTI counters of sampled calls
  std::string profile_metrics;     // "" : the capability seed's eight
  bool stage_gpu_time = true;      // with profile: GPU time per stage (CUDA events at stage changes)
  bool profile_timing = true;      // each key's next call after its counters timed by CUPTI Activity alone
  bool profile_unguarded = false;  // windows without CUPTI's subscriber (no hold on other threads' launches)
  int64_t sample_first = 1;        // samples per input key per launch
  int64_t sample_skip = 0;         // calls of each key skipped first (warm-up)
  int64_t sample_every = 1;        // then every M-th call
  double sample_probability = 1.0;
  int64_t sample_seed = 0;
  std::string sample_ops;  // which (stage, op) are sampled, as OPS; "" all recorded
  SampleCoordination sample_coordination = SampleCoordination::Claims;
  int64_t sample_budget_process = int64_t(4) << 30;
  int64_t sample_budget_run = int64_t(16) << 30;
  int64_t sample_budget_device = int64_t(2) << 30;
  double profile_budget_s = 300;  // wall seconds one process may stall in counter windows
  SampleDevices sample_devices = SampleDevices::Auto;
  std::string sample_plan;  // an earlier run's coverage_audit.json: sample only its dominant keys; "" none
};

// SAMPLE_PLAN's file: a run directory's reports/coverage_audit.json, or the
// value itself when it names a file.
std::string sample_plan_file(const std::string& value);

// "4G", "512M", "1024", "1.5T" (binary multiples) -> bytes; kBadInput otherwise.
format::Status parse_bytes(const std::string& text, int64_t& out);

struct ConfigEntry {
  const char* name;  // without the LINGPROBE_ prefix, e.g. "OUT"
  const char* type;  // bool, int, float, string, path, enum values
  const char* default_text;
  const char* description;
  // Parses `value` into the option's field; kBadInput (kIoFailed for a file
  // that cannot be read) with what is accepted, leaving the field as it was.
  format::Status (*apply)(Config& config, const std::string& value);
};

// The table, in the order `lingprobe config` prints it.
const std::vector<ConfigEntry>& config_table();

// Sets one option by table name (case-insensitive, with or without the
// LINGPROBE_ prefix). Returns ok, or kBadInput (an unknown name, a bad value;
// kIoFailed: SAMPLE_PLAN's file cannot be read) with a message that says what
// was wrong and what is accepted.
format::Status apply_setting(Config& config, const std::string& name, const std::string& value);

// Reads every LINGPROBE_* variable of the table from `environ`. Returns ok or
// the first invalid value's status, as apply_setting. Unknown LINGPROBE_* names (a typo, or a
// variable of someone else's) are not errors: each one is appended to
// `unknown` so that the caller can warn about it.
format::Status apply_environment(Config& config, char** environ_ptr, std::vector<std::string>* unknown = nullptr);

// " (did you mean LINGPROBE_X?)" for a LINGPROBE_* name close to an option's, else "".
std::string did_you_mean(const std::string& variable);

// LINGPROBE_STAGE_MAP's syntax (stage=Class|pkg.module:function;...), as the shim reads it, checked before a job
// starts by `lingprobe run` (a wrong separator read as one long class name that never ran, named only at exit). The
// option itself takes any text: under LD_PRELOAD the shim reports a bad map in one line and recording goes on
// unstaged. kBadInput naming the bad rule or name.
format::Status check_stage_map(const std::string& stage_map);

// The table as text (name, type, default, description).
std::string describe_config_table();

// The effective values as a JSON object (the header's "config": options that apply only beside another, such as
// the sampling options beside SNAPSHOTS or PROFILE, only where they apply; `every_key`: all of them, and those the
// header never had: STAGE_GPU_TIME, PROFILE_TIMING, PROFILE_UNGUARDED, SAMPLE_PLAN).
format::JsonValue config_json(const Config& config, bool every_key = false);
// The options on which two configurations differ, by their variables' names, comma-separated ("" when none):
// config_json's keys with every_key, those that apply on at least one side (SAMPLE_* only beside SNAPSHOTS or
// PROFILE), and LINGPROBE_RANK, _LOCAL_RANK, _WORLD_SIZE ("LINGPROBE_OUT, LINGPROBE_OPS"). One output directory spelt
// two ways ("out", "./out/") is the same; a relative and an absolute path are not (the cwd may have moved between
// the inits). Not the run id: the first init exports LINGPROBE_RUN_ID, which a later init reads.
std::string config_differences(const Config& a, const Config& b);

}  // namespace lingprobe::api
