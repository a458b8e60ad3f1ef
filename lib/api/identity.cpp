#include "api/identity.h"

#include "format/file_names.h"

#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

namespace lingprobe::api {
namespace {

int64_t env_int(GetenvFn getenv_fn, const char* name, int64_t fallback) {
  const char* v = getenv_fn(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  return (*end || x < 0) ? fallback : x;
}

std::string env_string(GetenvFn getenv_fn, const char* name) {
  const char* v = getenv_fn(name);
  return v ? v : "";
}

std::string basename(const std::string& p) {
  const size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

// torchrun's agent: `torchrun ...`, `python -m torch.distributed.run ...`
// (or .launch), or a Python running the torchrun script. Only the first
// tokens count, so a worker script's arguments never make it a launcher.
bool looks_like_launcher(const std::string& cmdline) {
  std::istringstream in(cmdline);
  std::vector<std::string> tokens;
  for (std::string t; tokens.size() < 4 && in >> t;) tokens.push_back(t);
  for (size_t i = 0; i < tokens.size() && i < 3; ++i) {
    if (basename(tokens[i]) == "torchrun") return true;
    if (i > 0 && tokens[i - 1] == "-m" &&
        (tokens[i] == "torch.distributed.run" || tokens[i] == "torch.distributed.launch"))
      return true;
  }
  return false;
}

// The variables launchers and schedulers set for each rank, most specific first.
struct RankVariables {
  const char* rank;
  const char* local_rank;
  const char* world_size;
};
constexpr RankVariables kRankVariables[] = {
    {"RANK", "LOCAL_RANK", "WORLD_SIZE"},                                            // torchrun
    {"SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"},                               // Slurm srun
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"},  // Open MPI
    {"PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"},                                     // MPICH, Intel MPI
    {"PMIX_RANK", "PMIX_LOCAL_RANK", "PMIX_SIZE"},                                   // PMIx
};

}  // namespace

std::string read_own_cmdline() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (auto& c : s)
    if (c == '\0') c = ' ';
  return s;
}

const char* role_name(Role role) {
  switch (role) {
    case Role::Rank: return "rank";
    case Role::Launcher: return "launcher";
    case Role::Single: return "single";
    case Role::Child: return "child";
    case Role::Auto: break;
  }
  return "auto";
}

Identity resolve_identity(const Config& c, GetenvFn getenv_fn, const std::string& cmdline, int64_t own_pid) {
  Identity id;
  int64_t rank = -1, local_rank = -1, world_size = -1;
  const RankVariables* from = nullptr;
  for (const auto& v : kRankVariables) {
    if ((rank = env_int(getenv_fn, v.rank, -1)) >= 0) {
      from = &v;
      local_rank = env_int(getenv_fn, v.local_rank, -1);
      world_size = env_int(getenv_fn, v.world_size, -1);
      break;
    }
  }
  const bool torchrun_worker = from == &kRankVariables[0];
  const int64_t parent = env_int(getenv_fn, "LINGPROBE_PARENT_PID", -1);
  if (c.role != Role::Auto) {
    id.role = c.role;
  } else if (!torchrun_worker && looks_like_launcher(cmdline)) {
    id.role = Role::Launcher;  // under srun too: the agent has SLURM_PROCID but no RANK
  } else if (parent >= 0 && parent != own_pid && !(rank >= 0 && env_int(getenv_fn, "LINGPROBE_PARENT_RANK", -1) < 0)) {
    // A child inherits its parent rank's RANK and is not that rank. A process
    // with a RANK whose recording parent was no rank was started by a launcher
    // lingprobe does not know (accelerate, deepspeed, start_processes): a rank.
    id.role = Role::Child;
  } else if (rank >= 0 || c.rank >= 0) {
    id.role = Role::Rank;
  } else {
    id.role = Role::Single;
  }
  if (id.role == Role::Child) {
    id.parent_pid = parent;
    id.parent_rank = env_int(getenv_fn, "LINGPROBE_PARENT_RANK", -1);
    rank = local_rank = world_size = -1;  // the parent's, not this process's
    from = nullptr;
  }
  id.rank = c.rank >= 0 ? c.rank : rank;
  id.local_rank = c.local_rank >= 0 ? c.local_rank : local_rank;
  id.world_size = c.world_size >= 0 ? c.world_size : world_size;
  id.rank_source = c.rank >= 0 ? "config" : from ? from->rank : "none";
  if (id.rank < 0) id.rank = 0;
  if (id.local_rank < 0) id.local_rank = id.rank;
  if (id.world_size < 0) id.world_size = id.rank + 1;
  return id;
}

std::string sanitize_run_id(const std::string& raw) {
  std::string id = format::safe_name_part(raw, 128);
  if (id.empty() || id.find_first_not_of('.') == std::string::npos) id = "run_" + id;
  return id;
}

std::string resolve_run_id(const Config& c, GetenvFn getenv_fn, int64_t own_pid, int64_t parent_pid,
                           int64_t unix_seconds) {
  auto usable = [](const std::string& v) { return !v.empty() && v != "none"; };
  if (usable(c.run_id)) return sanitize_run_id(c.run_id);
  if (std::string v = env_string(getenv_fn, "TORCHELASTIC_RUN_ID"); usable(v)) return sanitize_run_id(v);
  if (std::string job = env_string(getenv_fn, "SLURM_JOB_ID"); !job.empty()) {
    const std::string step = env_string(getenv_fn, "SLURM_STEP_ID");
    return sanitize_run_id("slurm-" + job + (step.empty() ? "" : "." + step));
  }
  if (std::string ns = env_string(getenv_fn, "PMIX_NAMESPACE"); !ns.empty()) return sanitize_run_id("pmix-" + ns);
  // torchrun without --rdzv-id whose agent did not export one (lingprobe was not
  // loaded there): the workers of one agent share its pid.
  if (getenv_fn("TORCHELASTIC_RESTART_COUNT") && parent_pid > 0) return "torchrun-agent" + std::to_string(parent_pid);
  std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return std::string(buf) + "-" + std::to_string(own_pid);
}

// Snapshot files are named by it: rank{R}, or child{PID}.
std::string who_of(const Identity& id) {
  return id.role == Role::Child ? "child" + std::to_string(getpid()) : "rank" + std::to_string(id.rank);
}

// A child's file is named apart, so that nothing sums it into a rank.
std::string metadata_path_for(const std::string& run_dir, const Identity& id) {
  const std::string pid = std::to_string(getpid());
  if (id.role == Role::Child) return run_dir + "/metadata/metadata_child_pid" + pid + ".jsonl";
  return run_dir + "/metadata/metadata_rank" + std::to_string(id.rank) + "_pid" + pid + ".jsonl";
}

}  // namespace lingprobe::api
