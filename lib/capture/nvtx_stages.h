// NVTX ranges as stage markers: LINGPROBE_NVTX_MAP ("dit=^(dit|transformer);
// vae=^vae") maps a range name (regex search, first rule that matches wins)
// to a stage. A range that maps to nothing leaves the stage unchanged; every
// pop balances its push. Pure C++ (std::regex); no torch.
#pragma once

#include <string>

namespace lingprobe::capture {

// Parses and installs the map; returns "" or an error naming the bad rule.
std::string set_nvtx_map(const std::string& spec);
// Called from the NVTX injection (any thread). `name` may be NULL.
void nvtx_range_push(const char* name);
void nvtx_range_pop();

}  // namespace lingprobe::capture
