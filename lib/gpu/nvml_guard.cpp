#include "gpu/nvml_guard.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>
#include <type_traits>

namespace lingprobe::gpu {
namespace {

using nvmlReturn = int;
using nvmlDevice = void*;
constexpr nvmlReturn kSuccess = 0, kInsufficientSize = 7;
constexpr int kClockSm = 1, kClockMem = 2;

struct NvmlProcessInfo {  // nvmlProcessInfo_v2_t / _t of the _v3 call: the same layout
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

struct Nvml {
  nvmlReturn (*Init)() = nullptr;
  nvmlReturn (*HandleByUuid)(const char*, nvmlDevice*) = nullptr;
  nvmlReturn (*ComputeProcesses)(nvmlDevice, unsigned*, NvmlProcessInfo*) = nullptr;
  nvmlReturn (*ClockInfo)(nvmlDevice, int, unsigned*) = nullptr;
  nvmlReturn (*MaxClockInfo)(nvmlDevice, int, unsigned*) = nullptr;
  nvmlReturn (*DriverVersion)(char*, unsigned) = nullptr;
  const char* (*ErrorString)(nvmlReturn) = nullptr;
  std::string error;  // why NVML cannot be used ("" when it can)

  std::string describe(nvmlReturn r) const {
    const char* s = ErrorString ? ErrorString(r) : nullptr;
    return s ? s : "NVML error " + std::to_string(r);
  }
};

// Loaded and initialised once per process; never unloaded (other threads may sample).
const Nvml& nvml() {
  static Nvml* n = [] {
    auto* x = new Nvml;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      x->error = "libnvidia-ml.so.1 not found (NVML comes with the NVIDIA driver)";
      return x;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    };
    sym(x->Init, "nvmlInit_v2");
    sym(x->HandleByUuid, "nvmlDeviceGetHandleByUUID");
    sym(x->ComputeProcesses, "nvmlDeviceGetComputeRunningProcesses_v3");
    if (!x->ComputeProcesses) sym(x->ComputeProcesses, "nvmlDeviceGetComputeRunningProcesses_v2");
    sym(x->ClockInfo, "nvmlDeviceGetClockInfo");
    sym(x->MaxClockInfo, "nvmlDeviceGetMaxClockInfo");
    sym(x->DriverVersion, "nvmlSystemGetDriverVersion");
    sym(x->ErrorString, "nvmlErrorString");
    if (!x->Init || !x->HandleByUuid || !x->ComputeProcesses) {
      x->error = "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByUUID or the compute-process query";
    } else if (nvmlReturn r = x->Init(); r != kSuccess) {
      x->error = "nvmlInit_v2: " + x->describe(r);
    }
    return x;
  }();
  return *n;
}

nvmlDevice device_of(const std::string& uuid, std::string& error) {
  const Nvml& n = nvml();
  if (!n.error.empty()) {
    error = n.error;
    return nullptr;
  }
  nvmlDevice d = nullptr;
  if (nvmlReturn r = n.HandleByUuid(uuid.c_str(), &d); r != kSuccess) {
    error = "nvmlDeviceGetHandleByUUID(" + uuid + "): " + n.describe(r);
    return nullptr;
  }
  return d;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

format::JsonValue processes_json(const std::vector<ComputeProcess>& ps) {
  format::JsonValue a = format::JsonValue::array();
  for (const auto& p : ps)
    a.push_back(format::JsonValue::object(
        {{"pid", format::JsonValue::integer(p.pid)},
         {"used_memory_bytes", format::JsonValue::integer(static_cast<int64_t>(p.used_memory_bytes))}}));
  return a;
}

format::JsonValue sample_json(const GuardSample& s) {
  return format::JsonValue::object({{"t_s", format::JsonValue::floating(s.t_seconds)},
                                    {"ok", format::JsonValue::boolean(s.ok)},
                                    {"processes", processes_json(s.processes)}});
}

std::vector<uint32_t> pids_of(const GuardSample& s) {
  std::vector<uint32_t> p;
  for (const auto& x : s.processes) p.push_back(x.pid);
  std::sort(p.begin(), p.end());
  return p;
}

}  // namespace

std::vector<uint32_t> own_pids() {
  std::vector<uint32_t> out;
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream in(line.substr(6));
    uint32_t p;
    while (in >> p) out.push_back(p);
  }
  if (out.empty()) out.push_back(static_cast<uint32_t>(getpid()));
  return out;
}

GuardVerdict judge(const std::vector<GuardSample>& samples, const std::vector<uint32_t>& own) {
  GuardVerdict v;
  const std::set<uint32_t> mine(own.begin(), own.end());
  size_t answered = 0, max_count = 0;
  bool matched = false;
  std::set<uint32_t> seen;
  for (const auto& s : samples) {
    if (!s.ok) continue;
    ++answered;
    max_count = std::max(max_count, s.processes.size());
    for (const auto& p : s.processes) {
      seen.insert(p.pid);
      if (mine.count(p.pid)) matched = true;
    }
  }
  if (answered == 0) {
    v.verdict = "unknown";
    v.reason = "NVML gave no process list";
    return v;
  }
  if (max_count == 0) {
    v.verdict = "unknown";
    v.reason =
        "NVML lists no compute process on the device while this process holds a context on it (a pid "
        "namespace or a container hides them)";
    return v;
  }
  if (matched) {
    for (uint32_t p : seen)
      if (!mine.count(p)) v.others.push_back(p);
    v.matched_by = "pid";
    v.verdict = v.others.empty() ? "alone" : "shared";
    return v;
  }
  if (max_count == 1 && seen.size() == 1) {
    // One compute process, the same in every sample, while this one holds a context there: it is this one.
    v.verdict = "alone";
    v.matched_by = "sole_process";
    return v;
  }
  // Several processes (or the one changed): at least one is not this one; which is ours NVML's pids do not say.
  v.verdict = "shared";
  v.matched_by = "none";
  v.others.assign(seen.begin(), seen.end());
  v.reason = "this process's pid is not among NVML's (pid namespace): every listed pid is reported";
  return v;
}

NvmlGuard::NvmlGuard(const std::string& uuid, int period_ms) : uuid_(uuid), period_ms_(period_ms) {
  t0_ = now_seconds();
  device_ = device_of(uuid, error_);
  clocks_before_ = clocks();
  before_.push_back(sample());
  if (!device_) return;
  thread_ = std::thread([this] {
    while (!stop_.load(std::memory_order_relaxed)) {
      during_.push_back(sample());
      std::this_thread::sleep_for(std::chrono::milliseconds(period_ms_));
    }
  });
}

NvmlGuard::~NvmlGuard() { finish(); }

GuardSample NvmlGuard::sample() {
  GuardSample s;
  s.t_seconds = now_seconds() - t0_;
  if (!device_) return s;
  const Nvml& n = nvml();
  std::vector<NvmlProcessInfo> info(16);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned count = static_cast<unsigned>(info.size());
    const nvmlReturn r = n.ComputeProcesses(device_, &count, info.data());
    if (r == kInsufficientSize) {
      info.resize(std::max<size_t>(count, info.size() * 2) + 4);
      continue;
    }
    if (r != kSuccess) return s;
    s.ok = true;
    for (unsigned i = 0; i < count; ++i) s.processes.push_back({info[i].pid, info[i].usedGpuMemory});
    return s;
  }
  return s;
}

format::JsonValue NvmlGuard::finish() {
  using format::JsonValue;
  if (finished_) return result_;
  finished_ = true;
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
  after_.push_back(sample());
  const std::vector<uint32_t> own = own_pids();
  std::vector<GuardSample> all = before_;
  all.insert(all.end(), during_.begin(), during_.end());
  all.insert(all.end(), after_.begin(), after_.end());
  GuardVerdict v = judge(all, own);
  if (!device_) v.reason = error_;
  JsonValue own_json = JsonValue::array();
  for (uint32_t p : own) own_json.push_back(JsonValue::integer(p));
  // During the window: the first sample, then each change of the pid set (the samples are many and alike).
  JsonValue changes = JsonValue::array();
  std::vector<uint32_t> last;
  bool first = true;
  for (const auto& s : during_) {
    std::vector<uint32_t> pids = pids_of(s);
    if (!first && pids == last) continue;
    changes.push_back(sample_json(s));
    last = std::move(pids);
    first = false;
  }
  JsonValue others = JsonValue::array();
  for (uint32_t p : v.others) others.push_back(JsonValue::integer(p));
  result_ = JsonValue::object();
  result_.set("device_uuid", JsonValue::string(uuid_));
  result_.set("nvml", JsonValue::string(error_.empty() ? "loaded" : error_));
  result_.set("own_pids", std::move(own_json));
  result_.set("before", sample_json(before_.front()));
  result_.set("during", JsonValue::object({{"samples", JsonValue::integer(static_cast<int64_t>(during_.size()))},
                                           {"period_ms", JsonValue::integer(period_ms_)},
                                           {"changes", std::move(changes)}}));
  result_.set("after", sample_json(after_.front()));
  result_.set("verdict", JsonValue::string(v.verdict));
  result_.set("matched_by", v.matched_by.empty() ? JsonValue::null() : JsonValue::string(v.matched_by));
  result_.set("other_pids", std::move(others));
  result_.set("reason", v.reason.empty() ? JsonValue::null() : JsonValue::string(v.reason));
  result_.set("clocks_mhz_before", clocks_before_);
  result_.set("clocks_mhz_after", clocks());
  return result_;
}

format::JsonValue NvmlGuard::clocks() const {
  using format::JsonValue;
  JsonValue out = JsonValue::object();
  nvmlDevice d = device_;
  const Nvml& n = nvml();
  if (!d || !n.ClockInfo) return out;
  unsigned mhz = 0;
  if (n.ClockInfo(d, kClockSm, &mhz) == kSuccess) out.set("sm", JsonValue::integer(mhz));
  if (n.ClockInfo(d, kClockMem, &mhz) == kSuccess) out.set("memory", JsonValue::integer(mhz));
  if (n.MaxClockInfo && n.MaxClockInfo(d, kClockSm, &mhz) == kSuccess) out.set("sm_max", JsonValue::integer(mhz));
  if (n.MaxClockInfo && n.MaxClockInfo(d, kClockMem, &mhz) == kSuccess) out.set("memory_max", JsonValue::integer(mhz));
  return out;
}

std::string NvmlGuard::driver_version() {
  const Nvml& n = nvml();
  char buf[96] = {0};
  if (!n.error.empty() || !n.DriverVersion || n.DriverVersion(buf, sizeof buf) != kSuccess) return "";
  return buf;
}

}  // namespace lingprobe::gpu
