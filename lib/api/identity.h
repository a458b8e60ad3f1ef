// Who this process is in a distributed job, and which launch it belongs to.
// Pure functions of the configuration, an environment lookup and the
// command line (parameters, so that tests drive them); no torch.
//
// Roles (SPEC section 4, docs/USAGE.md):
//   rank      the rank is known: configuration, RANK (torchrun), a scheduler's
//             variable (SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK),
//             or later init_process_group / lingprobe_set_rank;
//   launcher  torchrun's elastic agent (no RANK): writes nothing;
//   child     started by a recording process (LINGPROBE_PARENT_PID names it):
//             DataLoader and compile workers, multiprocessing children. Its own
//             file, never summed into a rank; a later init_process_group makes
//             it a rank (mp.spawn);
//   single    anything else: rank 0 of 1.
#pragma once

#include <cstdint>
#include <string>

#include "api/config.h"

namespace lingprobe::api {

using GetenvFn = const char* (*)(const char*);

struct Identity {
  Role role = Role::Single;
  int64_t rank = 0;
  int64_t local_rank = 0;
  int64_t world_size = 1;
  std::string rank_source = "none";  // where the rank came from: "config", "RANK", "SLURM_PROCID", "api", ...
  int64_t parent_pid = -1;           // child: the recording process that started this one
  int64_t parent_rank = -1;          // child: that process's rank (-1: none)
};

Identity resolve_identity(const Config& config, GetenvFn getenv_fn, const std::string& cmdline, int64_t own_pid);

// The launch id all processes of one launch share: LINGPROBE_RUN_ID (config),
// else TORCHELASTIC_RUN_ID, else a scheduler's job id (SLURM, PMIx), else one
// derived from torchrun's agent (workers of one agent share its pid), else
// generated from the time and pid. "none" (torchrun without --rdzv-id) counts
// as unset. The result is safe as a directory name.
std::string resolve_run_id(const Config& config, GetenvFn getenv_fn, int64_t own_pid, int64_t parent_pid,
                           int64_t unix_seconds);

// Letters, digits, '.', '_' and '-' kept, anything else '_'; never "", "." or "..".
std::string sanitize_run_id(const std::string& id);

std::string read_own_cmdline();
const char* role_name(Role role);

// Snapshot files are named by it: rank{R}, or child{PID}.
std::string who_of(const Identity& id);
// RUN_DIR/metadata/metadata_rank{R}_pid{P}.jsonl, or metadata_child_pid{P}.jsonl (never summed into a rank).
std::string metadata_path_for(const std::string& run_dir, const Identity& id);

}  // namespace lingprobe::api
