#include "format/profile_files.h"

#include <cstdio>

#include "format/canonical_json.h"
#include "format/float_repr.h"

namespace lingprobe::format {
namespace {

const char* base_unit(const std::string& m) {
  if (m.find("pct_of_peak") != std::string::npos) return "%";
  if (m.rfind("gpu__time_duration", 0) == 0) return "nsecond";
  if (m.find(".per_second") != std::string::npos) return "byte/second";
  if (m.find("bytes") != std::string::npos) return "byte";
  return "";
}

std::string csv_field(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  std::string s = buf;
  while (s.size() > 1 && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

JsonValue metric(double value, const char* unit) {
  return JsonValue::object({{"value", JsonValue::floating(value)}, {"unit", JsonValue::string(unit)}});
}

}  // namespace

SeedUnit seed_unit(const std::string& m) {
  if (m.find("pct_of_peak") != std::string::npos) return {"%", 1.0};
  if (m.rfind("gpu__time_duration", 0) == 0) return {"us", 1e-3};
  if (m.find(".per_second") != std::string::npos) return {"Tbyte/s", 1e-12};
  if (m.find("bytes") != std::string::npos) return {"Mbyte", 1e-6};
  return {"", 1.0};
}

JsonValue kernels_json(const ProfileData& p) {
  JsonValue list = JsonValue::array();
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const ProfiledKernel& k = p.kernels[i];
    JsonValue m = JsonValue::object();
    for (size_t j = 0; j < p.metrics.size() && j < k.values.size(); ++j) {
      const SeedUnit u = seed_unit(p.metrics[j]);
      m.set(p.metrics[j], metric(k.values[j] * u.factor, u.unit));
    }
    m.set("launch__registers_per_thread", metric(k.registers_per_thread, "register/thread"));
    m.set("launch__shared_mem_per_block",
          metric(static_cast<double>(k.shared_bytes_per_block) / 1000.0, "Kbyte/block"));
    JsonValue grid =
        JsonValue::array({JsonValue::integer(k.grid[0]), JsonValue::integer(k.grid[1]), JsonValue::integer(k.grid[2])});
    JsonValue block = JsonValue::array(
        {JsonValue::integer(k.block[0]), JsonValue::integer(k.block[1]), JsonValue::integer(k.block[2])});
    JsonValue kernel = JsonValue::object({{"id", JsonValue::string(std::to_string(i))},
                                          {"name", JsonValue::string(k.name)},
                                          {"mangled_name", JsonValue::string(k.mangled_name)},
                                          {"device", JsonValue::string(std::to_string(k.device))},
                                          {"grid", std::move(grid)},
                                          {"block", std::move(block)},
                                          {"metrics", std::move(m)}});
    if (k.gpu_end_ns != 0) {  // a timed call's kernel (a kept one always has both)
      kernel.set("gpu_start_ns", JsonValue::integer(static_cast<int64_t>(k.gpu_start_ns)));
      kernel.set("gpu_end_ns", JsonValue::integer(static_cast<int64_t>(k.gpu_end_ns)));
    }
    list.push_back(std::move(kernel));
  }
  return list;
}

std::string metrics_csv(const ProfileData& p, int pid, const std::string& process, const std::string& host) {
  std::vector<std::string> head = {"ID",     "Process ID", "Process Name", "Host Name", "Kernel Name", "Context",
                                   "Stream", "Block Size", "Grid Size",    "Device",    "CC"};
  std::vector<std::string> metrics = p.metrics;
  metrics.push_back("launch__registers_per_thread");
  metrics.push_back("launch__shared_mem_per_block");
  std::string out;
  auto row = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + csv_field(cells[i]);
    out += "\n";
  };
  std::vector<std::string> names = head, units(head.size(), "");
  for (const auto& m : metrics) {
    names.push_back(m);
    units.push_back(m == "launch__registers_per_thread"   ? "register/thread"
                    : m == "launch__shared_mem_per_block" ? "byte/block"
                                                          : base_unit(m));
  }
  row(names);
  row(units);
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const ProfiledKernel& k = p.kernels[i];
    std::vector<std::string> cells = {
        std::to_string(i),
        std::to_string(pid),
        process,
        host,
        k.mangled_name,
        "1",
        "",
        "(" + std::to_string(k.block[0]) + ", " + std::to_string(k.block[1]) + ", " + std::to_string(k.block[2]) + ")",
        "(" + std::to_string(k.grid[0]) + ", " + std::to_string(k.grid[1]) + ", " + std::to_string(k.grid[2]) + ")",
        std::to_string(k.device),
        p.compute_capability};
    for (size_t j = 0; j < p.metrics.size(); ++j) cells.push_back(j < k.values.size() ? number(k.values[j]) : "");
    cells.push_back(std::to_string(k.registers_per_thread));
    cells.push_back(std::to_string(k.shared_bytes_per_block));
    row(cells);
  }
  return out;
}

}  // namespace lingprobe::format
