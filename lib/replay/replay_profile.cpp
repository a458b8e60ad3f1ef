#include "replay/replay_profile.h"

#include <cmath>
#include <cstdio>

#include "format/json_parse.h"

namespace lingprobe::replay {

using format::JsonValue;

namespace {

const std::string& text(const JsonValue* v) {
  static const std::string empty;
  return v && v->kind() == JsonValue::Kind::String ? v->as_string() : empty;
}

double number(const JsonValue* v, bool& ok) {
  ok = v && (v->kind() == JsonValue::Kind::Int || v->kind() == JsonValue::Kind::Float);
  return !ok ? 0.0 : v->kind() == JsonValue::Kind::Int ? static_cast<double>(v->as_int()) : v->as_float();
}

constexpr const char* kTime = "gpu__time_duration.sum";

}  // namespace

JsonValue compare_profiles(const std::string& run_dir, const std::string& replay_dir, std::string& error) {
  JsonValue run_k, replay_k, run_id, replay_id;
  if (!format::parse_json_file(run_dir + "/kernels.json", run_k) || run_k.kind() != JsonValue::Kind::Array) {
    error = run_dir + "/kernels.json: missing or not a kernel list";
    return JsonValue::null();
  }
  if (!format::parse_json_file(replay_dir + "/kernels.json", replay_k) || replay_k.kind() != JsonValue::Kind::Array) {
    error = replay_dir + "/kernels.json: missing or not a kernel list (the replay's window did not pass?)";
    return JsonValue::null();
  }
  (void)format::parse_json_file(run_dir + "/identity.json", run_id);
  (void)format::parse_json_file(replay_dir + "/identity.json", replay_id);
  const auto& a = run_k.items();
  const auto& b = replay_k.items();
  bool names_match = a.size() == b.size();
  JsonValue kernels = JsonValue::array();
  double run_time = 0, replay_time = 0, worst = 0;
  std::string worst_metric;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const bool same = text(a[i].find("mangled_name")) == text(b[i].find("mangled_name"));
    names_match = names_match && same;
    JsonValue k = JsonValue::object();
    k.set("launch", JsonValue::integer(static_cast<int64_t>(i)));
    k.set("name", JsonValue::string(text(a[i].find("name"))));
    k.set("mangled_name", JsonValue::string(text(a[i].find("mangled_name"))));
    k.set("same_kernel", JsonValue::boolean(same));
    if (!same) k.set("replay_mangled_name", JsonValue::string(text(b[i].find("mangled_name"))));
    JsonValue metrics = JsonValue::object();
    const JsonValue* ma = a[i].find("metrics");
    const JsonValue* mb = b[i].find("metrics");
    if (ma && mb)
      for (const auto& [name, va] : ma->members()) {
        const JsonValue* vb = mb->find(name);
        bool oka = false, okb = false;
        const double x = number(va.find("value"), oka);
        const double y = vb ? number(vb->find("value"), okb) : 0.0;
        if (!oka || !okb) continue;
        JsonValue m = JsonValue::object();
        m.set("run", JsonValue::floating(x));
        m.set("replay", JsonValue::floating(y));
        m.set("unit", JsonValue::string(text(va.find("unit"))));
        const bool defined = x != 0;
        m.set("rel_diff", defined ? JsonValue::floating((y - x) / x) : JsonValue::null());
        if (same && defined && name.rfind("launch__", 0) != 0 && std::fabs((y - x) / x) > worst)
          worst = std::fabs((y - x) / x), worst_metric = name;
        if (name == kTime) run_time += x, replay_time += y;
        metrics.set(name, std::move(m));
      }
    k.set("metrics", std::move(metrics));
    kernels.push_back(std::move(k));
  }
  JsonValue out = JsonValue::object();
  out.set("run_profile", JsonValue::string(run_dir));
  out.set("replay_profile", JsonValue::string(replay_dir));
  out.set("run_status", JsonValue::string(text(run_id.find("status"))));
  out.set("replay_status", JsonValue::string(text(replay_id.find("status"))));
  out.set("run_kernels", JsonValue::integer(static_cast<int64_t>(a.size())));
  out.set("replay_kernels", JsonValue::integer(static_cast<int64_t>(b.size())));
  out.set("kernels_match", JsonValue::boolean(names_match));
  out.set("run_time_us", JsonValue::floating(run_time));
  out.set("replay_time_us", JsonValue::floating(replay_time));
  out.set("max_abs_rel_diff", JsonValue::floating(worst));
  out.set("max_abs_rel_diff_metric", JsonValue::string(worst_metric));
  out.set("kernels", std::move(kernels));
  out.set(
      "scope",
      JsonValue::string(
          "Both measured inline by lingprobe (CUPTI range profiler, kernel replay, the same metrics): the run's call "
          "after "
          "the run's own work, the replay's in the replayer after its inputs were rebuilt (and the replays before it). "
          "DRAM writes and the L2/DRAM figures they drive depend on what that earlier work left in L2 "
          "(docs/COUNTERS.md)."));
  return out;
}

std::string profile_line(const JsonValue& c) {
  bool ok = false;
  const double rt = number(c.find("run_time_us"), ok), pt = number(c.find("replay_time_us"), ok);
  const double worst = number(c.find("max_abs_rel_diff"), ok);
  const int64_t n = c.find("run_kernels") ? c.find("run_kernels")->as_int() : 0;
  const int64_t m = c.find("replay_kernels") ? c.find("replay_kernels")->as_int() : 0;
  const bool match = c.find("kernels_match") && c.find("kernels_match")->as_bool();
  char line[384];
  std::snprintf(line, sizeof line,
                "profile kernels %lld run / %lld replay (%s), time %.1f -> %.1f us (%+.1f%%), "
                "max |diff| %.1f%% (%s)",
                static_cast<long long>(n), static_cast<long long>(m), match ? "same" : "DIFFER", rt, pt,
                rt > 0 ? 100.0 * (pt - rt) / rt : 0.0, 100.0 * worst, text(c.find("max_abs_rel_diff_metric")).c_str());
  return line;
}

}  // namespace lingprobe::replay
