// A recorded call's keys on the hot path (recorder.cpp's callbacks, inlined):
// its input key matched in place against the entry the thread guessed (a loop
// repeating its calls writes nothing), or written into the thread's
// KeyBuffer; its output key matched in place against the outputs seen after
// its entry, or written after the input key for a first sighting.
#pragma once

#include "capture/torch_guard.h"

#include <ATen/record_function.h>

#include <cstring>

#include "capture/op_registry.h"
#include "capture/signature_key.h"
#include "capture/thread_state.h"

namespace lingprobe::capture {

// The call's input key into the thread's key buffer (capture/signature_key), and where it ends.
C10_ALWAYS_INLINE void input_key(ThreadState& ts, Frame& f, OpInfo* op, StageId stage,
                                 c10::ArrayRef<const c10::IValue> inputs, InputScan& scan) {
  f.key_begin = static_cast<uint32_t>(ts.key.size());
  append_call_input_key(ts.key, reinterpret_cast<uintptr_t>(op), stage, inputs.data(), inputs.size(),
                        op->fold.arguments, scan);
  f.input_end = static_cast<uint32_t>(ts.key.size());
  f.key_written = true;
}

// The repeated call: its inputs compared in place with the stored key of the
// entry the thread guessed (thread_state). true: they match, f.entry is the
// guess and nothing was written; false: `scan` cleared for input_key's pass.
// Not for ops whose scalar arguments are folded (their keys differ from the values').
C10_ALWAYS_INLINE bool inputs_match_guess(ThreadState& ts, Frame& f, OpInfo* op, StageId stage,
                                          c10::ArrayRef<const c10::IValue> inputs, InputScan& scan) {
  const uint32_t guess = ts.guess();
  if (guess == InputEntry::kNoEntry || op->fold.arguments != 0) return false;
  const InputEntry& e = ts.entries[guess];
  const uint64_t* p = ts.inputs.stored(e.key_offset);
  const uint64_t* end = p + e.key_words;
  if (e.key_words < 2 || p[0] != reinterpret_cast<uintptr_t>(op) ||
      p[1] != (stage | static_cast<uint64_t>(inputs.size()) << 16))
    return false;
  p += 2;
  if (!keys_match_scanning<true>(inputs.data(), inputs.size(), p, end, ts.key, &scan) || p != end) {
    scan = InputScan();
    return false;
  }
  f.key_begin = f.input_end = static_cast<uint32_t>(ts.key.size());
  f.key_written = false;
  f.entry = ts.last_entry = guess;
  return true;
}

// The signature id among those seen after the call's entry whose output key
// matches `outs` in place; false when none does (or the op's returns are folded).
C10_ALWAYS_INLINE bool outputs_match_seen(ThreadState& ts, const Frame& f, const InputEntry& entry,
                                          c10::ArrayRef<const c10::IValue> outs, uint32_t& id) {
  if (C10_UNLIKELY(f.op->fold.returns != 0)) return false;
  for (const auto& [seen, seen_id] : entry.outputs) {
    const uint64_t* p = seen.data() + 1;
    const uint64_t* end = seen.data() + seen.size();
    if (seen[0] == outs.size() && keys_match_scanning<false>(outs.data(), outs.size(), p, end, ts.key, nullptr) &&
        p == end) {
      id = seen_id;
      return true;
    }
  }
  return false;
}

// The input key of a call matched in place, written into the buffer at its
// frame's place from its entry's stored copy (a first sighting needs the whole key).
inline void write_matched_input_key(ThreadState& ts, Frame& f, const InputEntry& entry) {
  ts.key.truncate(f.key_begin);
  uint64_t* w = ts.key.reserve(entry.key_words);
  std::memcpy(w, ts.inputs.stored(entry.key_offset), entry.key_words * sizeof(uint64_t));
  ts.key.commit(entry.key_words);
  f.input_end = static_cast<uint32_t>(ts.key.size());
  f.key_written = true;
}

}  // namespace lingprobe::capture
