// Who this process is in a distributed job: role, rank, local rank, world
// size, from configuration, then torchrun's environment, then /proc/self/cmdline
// (torchrun's elastic agent has no RANK: it is the launcher and records
// nothing). Pure; no torch.
#pragma once

#include <cstdint>
#include <string>

#include "api/config.h"

namespace lingprobe::api {

struct Identity {
  Role role = Role::Single;
  int64_t rank = 0;
  int64_t local_rank = 0;
  int64_t world_size = 1;
};

// `getenv` and `cmdline` are parameters so that tests can drive them.
Identity resolve_identity(const Config& config, const char* (*getenv_fn)(const char*), const std::string& cmdline);
std::string read_own_cmdline();
const char* role_name(Role role);

}  // namespace lingprobe::api
