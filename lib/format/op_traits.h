// What an op's result is by definition, whatever its inputs: uninitialised
// memory (empty*) or random (normal_, uniform_, dropout...). Replay marks
// such calls nondeterministic; sampling counts them as set-up calls
// (capture/snapshot_capture), whose evidence is worth least.
#pragma once

#include <string>

namespace lingprobe::format {

// "" or why the op's result is not a function of its inputs
// ("uninitialised memory (empty*)", "random op"). `op` is "aten::name".
std::string result_by_definition(const std::string& op);

}  // namespace lingprobe::format
