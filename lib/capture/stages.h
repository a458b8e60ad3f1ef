// Pipeline stages: names interned to small ids (0 is "unstaged"), and a
// per-thread stage stack set by the C API, the Python shim and NVTX ranges.
// Pure C++; no torch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lingprobe::capture {

using StageId = uint16_t;
constexpr StageId kUnstaged = 0;
constexpr size_t kMaxStages = 1024;
constexpr size_t kMaxStageDepth = 64;

// Interns `name` (thread-safe). Returns kUnstaged for "" and, past
// kMaxStages distinct names, kUnstaged too (the overflow is counted).
StageId intern_stage(std::string_view name);
std::string stage_name(StageId id);
uint64_t stages_overflowed();
// The stages pushed at least once in this process (by any thread), "unstaged" aside.
std::vector<std::string> stages_pushed();

// The calling thread's stack. push returns false (and ignores the push) past
// kMaxStageDepth; pop returns false when the stack is empty.
bool push_stage(StageId id);
bool pop_stage();

// The calling thread's stack itself, for the recorder, which keeps the
// pointer (stable for the thread's life) and reads the top (the current
// stage) without another thread-local lookup.
struct StageStack {
  StageId ids[kMaxStageDepth];
  uint32_t size = 0;
  uint32_t ignored = 0;  // pushes past the limit, popped silently
  uint32_t changes = 0;  // pushes and pops that took effect, for the stage clock
};
StageStack* this_thread_stage_stack();

// Called on the pushing or popping thread after each push or pop that took
// effect (the stage clock ends its interval there); nullptr for none.
using StageListener = void (*)();
void set_stage_listener(StageListener listener);
inline StageId top_stage(const StageStack& s) { return s.size ? s.ids[s.size - 1] : kUnstaged; }

}  // namespace lingprobe::capture
