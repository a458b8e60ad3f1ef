#include <catch2/catch.hpp>

#include <map>
#include <string>

#include "api/identity.h"

using namespace lingprobe;

namespace {
std::map<std::string, std::string> g_env;
const char* fake_getenv(const char* name) {
  auto it = g_env.find(name);
  return it == g_env.end() ? nullptr : it->second.c_str();
}
api::Identity resolve(const std::string& cmdline = "python3 job.py", int64_t pid = 100, api::Config c = {}) {
  return api::resolve_identity(c, fake_getenv, cmdline, pid);
}
}  // namespace

TEST_CASE("identity: torchrun's RANK makes a rank, its agent the launcher, else single", "[identity]") {
  g_env = {{"RANK", "3"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "4"}};
  auto id = resolve();
  CHECK(id.role == api::Role::Rank);
  CHECK((id.rank == 3 && id.local_rank == 1 && id.world_size == 4));
  CHECK(id.rank_source == "RANK");
  g_env = {};
  CHECK(resolve("/usr/bin/python3 -m torch.distributed.run --nproc_per_node=4 x.py").role == api::Role::Launcher);
  CHECK(resolve("/usr/bin/python3 /usr/local/bin/torchrun --standalone x.py").role == api::Role::Launcher);
  // a worker script's own arguments never make it a launcher
  CHECK(resolve("python3 job.py --launcher torchrun").role == api::Role::Single);
  id = resolve("python3 notebook.py");
  CHECK(id.role == api::Role::Single);
  CHECK((id.rank == 0 && id.world_size == 1 && id.rank_source == "none"));
}

TEST_CASE("identity: schedulers' rank variables, and srun's torchrun agent stays the launcher", "[identity]") {
  g_env = {{"SLURM_PROCID", "5"}, {"SLURM_LOCALID", "1"}, {"SLURM_NTASKS", "8"}};
  auto id = resolve();
  CHECK((id.role == api::Role::Rank && id.rank == 5 && id.local_rank == 1 && id.world_size == 8));
  CHECK(id.rank_source == "SLURM_PROCID");
  CHECK(resolve("torchrun --nnodes 2 job.py").role == api::Role::Launcher);
  g_env = {{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}};
  CHECK((resolve().rank == 2 && resolve().world_size == 4));
  g_env = {{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}};
  CHECK((resolve().rank == 1 && resolve().rank_source == "PMI_RANK"));
  g_env = {{"PMIX_RANK", "7"}};
  CHECK((resolve().rank == 7 && resolve().world_size == 8));
}

TEST_CASE("identity: a process started by a recording process is a child, not its parent's rank", "[identity]") {
  g_env = {{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LINGPROBE_PARENT_PID", "77"}, {"LINGPROBE_PARENT_RANK", "2"}};
  auto id = resolve("python3 -c from multiprocessing.spawn import spawn_main", 100);
  CHECK(id.role == api::Role::Child);
  CHECK((id.parent_pid == 77 && id.parent_rank == 2));
  CHECK((id.rank == 0 && id.rank_source == "none"));
  // the marker naming this very process (it exec'd itself) does not make it a child
  CHECK(resolve("python3 job.py", 77).role == api::Role::Rank);
  // torchrun started by a recording driver: the agent is still the launcher
  g_env = {{"LINGPROBE_PARENT_PID", "77"}};
  CHECK(resolve("torchrun --nproc_per_node=4 job.py", 100).role == api::Role::Launcher);
  // a launcher lingprobe does not know: its workers have their own RANK, their recording parent none
  g_env = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LINGPROBE_PARENT_PID", "77"}, {"LINGPROBE_PARENT_RANK", "-1"}};
  id = resolve("python3 train.py", 100);
  CHECK((id.role == api::Role::Rank && id.rank == 1 && id.world_size == 2));
  g_env = {{"LINGPROBE_PARENT_PID", "77"}, {"LINGPROBE_PARENT_RANK", "-1"}};  // mp.spawn: no RANK yet
  CHECK(resolve("python3 -c spawn_main", 100).role == api::Role::Child);
  // an explicit role wins
  api::Config c;
  c.role = api::Role::Rank;
  c.rank = 1;
  id = resolve("python3 job.py", 100, c);
  CHECK((id.role == api::Role::Rank && id.rank == 1 && id.rank_source == "config"));
  g_env = {};
}

TEST_CASE("run id: one launch id, torchrun's 'none' unset, scheduler ids, generated otherwise", "[identity]") {
  api::Config c;
  g_env = {};
  CHECK(api::resolve_run_id(c, fake_getenv, 42, 1, 1795000000) == "20261118-110640-42");
  g_env = {{"TORCHELASTIC_RUN_ID", "none"}, {"TORCHELASTIC_RESTART_COUNT", "0"}};
  CHECK(api::resolve_run_id(c, fake_getenv, 42, 9, 0) == "torchrun-agent9");  // workers of one agent agree
  g_env = {{"TORCHELASTIC_RUN_ID", "5c6a0ec7-2f31"}};
  CHECK(api::resolve_run_id(c, fake_getenv, 42, 9, 0) == "5c6a0ec7-2f31");
  g_env = {{"SLURM_JOB_ID", "1234"}, {"SLURM_STEP_ID", "0"}};
  CHECK(api::resolve_run_id(c, fake_getenv, 42, 9, 0) == "slurm-1234.0");
  c.run_id = "none";
  CHECK(api::resolve_run_id(c, fake_getenv, 42, 9, 0) == "slurm-1234.0");
  c.run_id = "../../etc/x y";
  CHECK(api::resolve_run_id(c, fake_getenv, 42, 9, 0) == ".._.._etc_x_y");
  CHECK(api::sanitize_run_id("..") == "run_..");
  CHECK(api::sanitize_run_id("") == "run_");
  g_env = {};
}
