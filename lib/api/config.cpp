#include "api/config.h"

#include "format/glob.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace lingprobe::api {

using format::Status;
using format::StatusCode;

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
    "CLI", "PYTHON", "NVTX_HELPER",              // read by scripts/reference-run.sh and the reference workload
    "PREFIX_PATH",                               // read by scripts/build-python-torch.sh
    "FUZZ_SECONDS", "FUZZ_BUILD_DIR",            // read by scripts/test.sh and scripts/fuzz.sh
    "TEST_JOBS",                                 // read by scripts/test.sh: Python test files run at once
    "TEST_PYTHON"};                              // read by scripts/sanitize.sh
// clang-format on

std::string upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Status apply_setting(Config& c, const std::string& raw_name, const std::string& v) {
  std::string name = upper(raw_name);
  if (name.rfind("LINGPROBE_", 0) == 0) name = name.substr(10);
  const auto& table = config_table();
  const auto entry = std::find_if(table.begin(), table.end(), [&](const ConfigEntry& e) { return name == e.name; });
  if (entry == table.end())
    return Status(StatusCode::kBadInput, "unknown option LINGPROBE_" + name + did_you_mean("LINGPROBE_" + name) +
                                             " (run `lingprobe config` for the list)");
  Status status = entry->apply(c, v);
  if (!status.ok()) return Status(status.code(), "LINGPROBE_" + name + ": " + status.message());
  return status;
}

Status apply_environment(Config& config, char** env, std::vector<std::string>* unknown) {
  if (!env) return Status();
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
    if (Status status = apply_setting(config, name, eq + 1); !status.ok()) return status;
  }
  return Status();
}

std::string did_you_mean(const std::string& variable) {
  const std::string name = upper(variable.rfind("LINGPROBE_", 0) == 0 ? variable.substr(10) : variable);
  const ConfigEntry* best = nullptr;
  size_t best_distance = name.size() / 3 + 1;  // a typo, not another word
  for (const auto& e : config_table()) {
    const size_t d = format::edit_distance(name, e.name);
    if (d < best_distance) best = &e, best_distance = d;
  }
  return best ? std::string(" (did you mean LINGPROBE_") + best->name + "?)" : "";
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

namespace {

// A path without "." components, repeated or trailing slashes ("./out/", ".//out" and "out" are "out"): one output
// directory however it is spelt. Lexical only: a relative path means the directory of the cwd at each init, which
// may have changed between them, so two spellings that resolve alike today are not taken as one.
std::string plain_path(const std::string& path) {
  std::string out = !path.empty() && path[0] == '/' ? "/" : "";
  size_t i = 0;
  while (i <= path.size()) {
    const size_t j = std::min(path.find('/', i), path.size());
    const std::string part = path.substr(i, j - i);
    if (!part.empty() && part != ".") out += (out.empty() || out == "/" ? "" : "/") + part;
    i = j + 1;
  }
  return out.empty() ? "." : out;
}

// Options not in the header's config (it predates them) that an init may still set: compared all the same.
bool outside_the_header(const std::string& key) {
  return key == "stage_gpu_time" || key == "profile_timing" || key == "profile_unguarded" || key == "sample_plan";
}

}  // namespace

std::string config_differences(const Config& a, const Config& b) {
  // every option, but those that apply on neither side (SAMPLE_* with SNAPSHOTS and PROFILE off in both): an
  // option without effect is not a difference
  const format::JsonValue ja = config_json(a, true), jb = config_json(b, true);
  const format::JsonValue applies_a = config_json(a), applies_b = config_json(b);
  std::string differ;
  auto note = [&](std::string name) {
    for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    differ += (differ.empty() ? "LINGPROBE_" : ", LINGPROBE_") + name;
  };
  for (const auto& [name, value] : jb.members()) {
    if (!applies_a.find(name) && !applies_b.find(name) && !outside_the_header(name)) continue;
    if (name == "out" && plain_path(a.out_dir) == plain_path(b.out_dir)) continue;
    const format::JsonValue* old = ja.find(name);
    if (!old || !(*old == value)) note(name);
  }
  if (a.rank != b.rank) note("rank");
  if (a.local_rank != b.local_rank) note("local_rank");
  if (a.world_size != b.world_size) note("world_size");
  return differ;
}

format::JsonValue config_json(const Config& c, bool every_key) {
  using format::JsonValue;
  static const char* const kRoles[] = {"auto", "rank", "single", "launcher", "child"};
  JsonValue o = JsonValue::object();
  o.set("enable", JsonValue::boolean(c.enable));
  o.set("out", JsonValue::string(c.out_dir));
  o.set("ops", JsonValue::string(c.ops));
  o.set("ops_deny", JsonValue::string(c.ops_deny));
  o.set("nested", JsonValue::boolean(c.nested));
  if (!c.nested || every_key) {
    static const char* const kSuppressNested[] = {"auto", "always", "never"};
    o.set("suppress_nested", JsonValue::string(kSuppressNested[static_cast<int>(c.suppress_nested)]));
    o.set("suppress_nested_min", JsonValue::integer(c.suppress_nested_min));
  }
  o.set("call_records", JsonValue::boolean(c.call_records));
  if ((!c.call_times && c.call_records) || every_key)  // absent: on, as before, or without effect (no records)
    o.set("call_times", JsonValue::boolean(c.call_times));
  if (c.fold_scalars || every_key)
    o.set("fold_scalars", JsonValue::boolean(c.fold_scalars));  // absent: values, as the seed's runs
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
  if (c.profile || every_key) o.set("profile_metrics", JsonValue::string(c.profile_metrics));
  if (c.snapshots || c.profile || every_key) {
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
  if (c.profile || every_key) o.set("profile_budget_s", JsonValue::floating(c.profile_budget_s));
  if (every_key) {  // outside the header, which predates them
    o.set("stage_gpu_time", JsonValue::boolean(c.stage_gpu_time));
    o.set("profile_timing", JsonValue::boolean(c.profile_timing));
    o.set("profile_unguarded", JsonValue::boolean(c.profile_unguarded));
    o.set("sample_plan", JsonValue::string(c.sample_plan));
  }
  return o;
}

}  // namespace lingprobe::api
