// How liblingprobe.so came into this process. Preloaded directly
// (LD_PRELOAD=liblingprobe.so), it would drag libtorch into every child
// (shells, ffmpeg, compilers), so it refuses to record and says, once per
// process tree, to preload the torch-free stub liblingprobe_preload.so.
#pragma once

#include <string>

namespace lingprobe::api {

// True when this copy of liblingprobe.so is named in LD_PRELOAD (decided once,
// at load). `message` is the line printed then.
bool loaded_by_ld_preload(std::string* message = nullptr);

}  // namespace lingprobe::api
