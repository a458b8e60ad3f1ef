// `lingprobe replay --profile`: the replayed call measured inline the same way
// as the run's call (lingprobe's own counter window, kernel replay), and the
// two profiles set side by side kernel by kernel: the live call in the run's
// cache and clock state against the same call in isolation. Torch-free.
#pragma once

#include <string>

#include "format/json_value.h"

namespace lingprobe::replay {

// replay_profile.json: per kernel in launch order (matched by mangled name),
// per metric the run's value, the replay's and (replay - run) / run; whether
// the kernel lists agree; both profiles' status. `error` on unreadable files.
format::JsonValue compare_profiles(const std::string& run_profile_dir, const std::string& replay_profile_dir,
                                   std::string& error);

// One line for the terminal: "profile  kernels 5/5 match, time 187.3 -> 186.9 us (-0.2%), max |diff| 4.1%
// (dram__bytes_write.sum)".
std::string profile_line(const format::JsonValue& comparison);

}  // namespace lingprobe::replay
