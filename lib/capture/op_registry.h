// The operators the recorder has met: one OpInfo per operator overload, found
// by the stable name pointer the dispatcher gives RecordFunction::name(), with
// its selection per stage and its nested-call suppression state. A registry
// shared by all threads (under its mutex, at an op's first sighting) and a
// per-thread cache in front of it (no lock, no allocation once an op is known).
#pragma once

#include "capture/torch_guard.h"

#include <ATen/core/function_schema.h>
#include <ATen/record_function.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "capture/recorder.h"
#include "capture/signature_builder.h"
#include "capture/stages.h"

namespace lingprobe::capture {

struct OpInfo {
  c10::FunctionSchema schema;
  std::string name;                          // "aten::to"
  std::string with_overload;                 // "aten::to.dtype"
  std::string dotted;                        // "aten.to.dtype"
  std::atomic<int8_t> selected[kMaxStages];  // -1 unknown, 0 no, 1 yes
  // Auto suppression of the calls nested below this op (all threads learn together).
  std::atomic<uint32_t> learn_calls{0};
  std::atomic<uint64_t> learn_nested{0};
  std::atomic<int8_t> suppress;  // -1 learning (auto), 0 no (never, nested, too few nested calls), 1 yes (always)
  ScalarFold fold;               // with FOLD_SCALARS, the scalar positions; else none
  mutable std::atomic<uint32_t> signatures{0};  // minted so far (the warning at kManySignaturesPerOp)
  // A c10d op, timed whatever the selection (CollectiveTimes): 1 a collective, 2 a wait for one
  // (_c10d_functional::wait_tensor: its time counts, the call does not), 0 neither.
  const uint8_t collective;
  OpInfo(c10::FunctionSchema s, int8_t suppress_at_start, uint8_t collective_kind);
};

// Every thread's operators. Thread-safe; OpInfo objects are never freed
// (callbacks may run during exit).
class OpRegistry {
 public:
  // `options`: the recorder's (selection, nested suppression), read at each op's first sighting; they
  // outlive the registry and change only while no callback runs (install).
  explicit OpRegistry(const RecorderOptions& options) : options_(options) {}
  // The op of a call whose name pointer was not met before; nullptr for a named scope (no schema).
  OpInfo* find_or_add(const at::RecordFunction& fn);
  // Whether calls of `op` in `stage` are recorded (decided once per op and stage, then read).
  bool selected(OpInfo* op, StageId stage) {
    const int8_t s = op->selected[stage].load(std::memory_order_relaxed);
    return s >= 0 ? s == 1 : decide_selected(op, stage);
  }
  // Every operator met so far: (name, name with overload), in no order.
  std::vector<std::pair<std::string, std::string>> names();
  // In a forked child: the mutex as new (its holder may be gone).
  void reset_lock_after_fork() { new (&mu_) std::mutex(); }

 private:
  bool decide_selected(OpInfo* op, StageId stage);
  std::mutex mu_;
  const RecorderOptions& options_;
  std::unordered_map<const char*, OpInfo*> ops_;  // under mu_
};

// One thread's view of the registry: a direct-mapped cache by name pointer in
// front of a map, both of this thread only.
class OpCache {
 public:
  OpInfo* find(OpRegistry& registry, const at::RecordFunction& fn) {
    const char* name = fn.name();
    Slot& slot = slots_[(reinterpret_cast<uintptr_t>(name) >> 4) % kSlots];
    if (slot.name == name) return slot.op;
    return find_slow(registry, fn, slot);
  }

 private:
  static constexpr size_t kSlots = 256;
  struct Slot {
    const char* name;
    OpInfo* op;
  };
  OpInfo* find_slow(OpRegistry& registry, const at::RecordFunction& fn, Slot& slot);
  Slot slots_[kSlots] = {};
  std::unordered_map<const char*, OpInfo*> ops_;  // behind the cache
};

}  // namespace lingprobe::capture
