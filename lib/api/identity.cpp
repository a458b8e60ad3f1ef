#include "api/identity.h"

#include <cstdlib>
#include <fstream>
#include <iterator>

namespace lingprobe::api {
namespace {

int64_t env_int(const char* (*getenv_fn)(const char*), const char* name, int64_t fallback) {
  const char* v = getenv_fn(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  long long x = std::strtoll(v, &end, 10);
  return (*end || x < 0) ? fallback : x;
}

bool looks_like_launcher(const std::string& cmdline) {
  return cmdline.find("torch.distributed.run") != std::string::npos ||
         cmdline.find("torch.distributed.launch") != std::string::npos ||
         cmdline.find("torchrun") != std::string::npos;
}

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
    case Role::Auto: break;
  }
  return "auto";
}

Identity resolve_identity(const Config& c, const char* (*getenv_fn)(const char*), const std::string& cmdline) {
  Identity id;
  const int64_t env_rank = env_int(getenv_fn, "RANK", -1);
  id.rank = c.rank >= 0 ? c.rank : env_rank;
  id.local_rank = c.local_rank >= 0 ? c.local_rank : env_int(getenv_fn, "LOCAL_RANK", -1);
  id.world_size = c.world_size >= 0 ? c.world_size : env_int(getenv_fn, "WORLD_SIZE", -1);
  if (c.role != Role::Auto) {
    id.role = c.role;
  } else if (id.rank >= 0) {
    id.role = Role::Rank;
  } else if (looks_like_launcher(cmdline)) {
    id.role = Role::Launcher;
  } else {
    id.role = Role::Single;
  }
  if (id.rank < 0) id.rank = 0;
  if (id.local_rank < 0) id.local_rank = id.rank;
  if (id.world_size < 0) id.world_size = id.rank + 1;
  return id;
}

}  // namespace lingprobe::api
