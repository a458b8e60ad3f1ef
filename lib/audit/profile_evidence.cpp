#include "audit/profile_evidence.h"

#include "format/json_parse.h"

#include <optional>

#include <algorithm>

#include <map>

namespace lingprobe::audit {

using format::JsonValue;

bool evidence_path_inside(const std::string& p) {
  return !p.empty() && p[0] != '/' && p.find("..") == std::string::npos;
}

namespace {

// The metric in units of `per` base units (1: seconds or bytes; 1e-6: µs),
// exact where its unit is already that one.
std::optional<double> metric_in(const JsonValue& kernel, const char* name, const char* unit_if_absent, double per) {
  const JsonValue* metrics = kernel.find("metrics");
  const JsonValue* m = metrics ? metrics->find(name) : nullptr;
  const JsonValue* v = m ? m->find("value") : nullptr;
  if (!v || (v->kind() != JsonValue::Kind::Float && v->kind() != JsonValue::Kind::Int)) return std::nullopt;
  const JsonValue* u = m->find("unit");
  const std::string unit = u && u->kind() == JsonValue::Kind::String ? u->as_string() : unit_if_absent;
  static const std::map<std::string, double> kScale = {
      {"s", 1},          {"second", 1},  {"ms", 1e-3},      {"msecond", 1e-3}, {"us", 1e-6},
      {"usecond", 1e-6}, {"ns", 1e-9},   {"nsecond", 1e-9}, {"byte", 1},       {"Kbyte", 1e3},
      {"Mbyte", 1e6},    {"Gbyte", 1e9}, {"Tbyte", 1e12}};
  auto it = kScale.find(unit);
  if (it == kScale.end()) return std::nullopt;
  return (v->kind() == JsonValue::Kind::Float ? v->as_float() : static_cast<double>(v->as_int())) * (it->second / per);
}

}  // namespace

std::optional<double> kernel_metric_si(const JsonValue& kernel, const char* name, const char* unit_if_absent) {
  return metric_in(kernel, name, unit_if_absent, 1.0);
}

std::optional<double> kernels_time_us(const JsonValue& doc) {
  const JsonValue* kernels = doc.kind() == JsonValue::Kind::Array ? &doc : doc.find("kernels");
  if (!kernels || kernels->kind() != JsonValue::Kind::Array || kernels->items().empty()) return std::nullopt;
  double total = 0;
  for (const auto& k : kernels->items()) {
    const auto t = metric_in(k, "gpu__time_duration.sum", "us", 1e-6);
    if (!t) return std::nullopt;
    total += *t;
  }
  return total;
}

std::optional<JsonValue> timed_kernels(const KernelTiming& timing) {
  if (timing.status != "passed") return std::nullopt;
  auto kernels = format::parse_json(timing.kernels);
  if (!kernels.status.ok() || !kernels_time_us(kernels.value)) return std::nullopt;
  return std::move(kernels.value);
}

double copy_kernels_time_us(const JsonValue& doc) {
  const JsonValue* kernels = doc.kind() == JsonValue::Kind::Array ? &doc : doc.find("kernels");
  double total = 0;
  if (!kernels || kernels->kind() != JsonValue::Kind::Array) return total;
  for (const auto& k : kernels->items()) {
    const JsonValue* name = k.find("name");
    if (!name || name->kind() != JsonValue::Kind::String || name->as_string().find("_copy_kernel") == std::string::npos)
      continue;
    total += metric_in(k, "gpu__time_duration.sum", "us", 1e-6).value_or(0.0);
  }
  return total;
}

format::JsonValue kernel_metric_changes(const format::JsonValue& ka, const format::JsonValue& kb) {
  using format::JsonValue;
  using Kind = JsonValue::Kind;
  auto relative = [](double a, double b) { return a != 0 ? JsonValue::floating((b - a) / a) : JsonValue::null(); };
  auto list = [](const JsonValue& doc) -> const JsonValue* {
    return doc.kind() == Kind::Array ? &doc : doc.find("kernels");
  };
  const JsonValue *la = list(ka), *lb = list(kb);
  if (!la || !lb || la->kind() != Kind::Array || lb->kind() != Kind::Array) return JsonValue::null();
  JsonValue kernels = JsonValue::array();
  for (size_t i = 0; i < std::min(la->items().size(), lb->items().size()); ++i) {
    const JsonValue &x = la->items()[i], &y = lb->items()[i];
    JsonValue metrics = JsonValue::object();
    const JsonValue *mx = x.find("metrics"), *my = y.find("metrics");
    if (mx && my)
      for (const auto& [name, m] : mx->members()) {
        const JsonValue* n = my->find(name);
        const JsonValue *va = m.find("value"), *vb = n ? n->find("value") : nullptr;
        auto num = [](const JsonValue* v) -> std::optional<double> {
          if (v && v->kind() == Kind::Float) return v->as_float();
          if (v && v->kind() == Kind::Int) return static_cast<double>(v->as_int());
          return std::nullopt;
        };
        const auto da = num(va), db = num(vb);
        if (!da || !db) continue;
        const JsonValue* unit = m.find("unit");
        metrics.set(name, JsonValue::object({{"a", JsonValue::floating(*da)},
                                             {"b", JsonValue::floating(*db)},
                                             {"change_relative", relative(*da, *db)},
                                             {"unit", unit ? *unit : JsonValue::null()}}));
      }
    const JsonValue *na = x.find("name"), *nb = y.find("name");
    kernels.push_back(JsonValue::object({{"index", JsonValue::integer(static_cast<int64_t>(i))},
                                         {"name_a", na ? *na : JsonValue::null()},
                                         {"name_b", nb ? *nb : JsonValue::null()},
                                         {"metrics", std::move(metrics)}}));
  }
  return JsonValue::object({{"kernels_a", JsonValue::integer(static_cast<int64_t>(la->items().size()))},
                            {"kernels_b", JsonValue::integer(static_cast<int64_t>(lb->items().size()))},
                            {"kernels", std::move(kernels)}});
}

}  // namespace lingprobe::audit
