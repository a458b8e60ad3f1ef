// What the recorder keeps per thread: the open frames, the key being built,
// the thread's op cache and input-key table, and its counters (per signature,
// nested calls, compile-time calls, collectives), each written by its own
// thread only and read by the writer. The ThreadRegistry holds the live
// threads' states and the totals of the threads that have exited.
#pragma once

#include "capture/torch_guard.h"

#include <ATen/record_function.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "capture/compile_tracing.h"
#include "capture/key_table.h"
#include "capture/op_registry.h"
#include "capture/sampler.h"
#include "capture/signature_key.h"
#include "capture/stages.h"
#include "format/json_value.h"
#include "runtime/record_buffer.h"

namespace lingprobe::capture {

constexpr size_t kMaxDepth = 128;
constexpr size_t kCountsChunk = 4096;
constexpr size_t kMaxCountChunks = 256;  // up to 1,048,576 signatures per process

using Counter = std::atomic<uint64_t>;  // written by one thread (load, add, store), read by the writer

inline void bump(Counter& c, uint64_t n = 1) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

struct Frame {
  const at::RecordFunction* fn;
  OpInfo* op;
  int64_t t0;
  uint32_t key_begin;  // words of the thread's KeyBuffer
  uint32_t input_end;
  uint32_t entry;    // the InputEntry of the input key
  bool key_written;  // the input key is in the KeyBuffer (else it matched its guessed entry's in place)
  StageId stage;
  bool recorded;
  bool traced;      // a compile-time call on fake tensors (counted apart, never recorded)
  bool factory;     // no tensor among its inputs: only a factory's outputs may be fake unseen at its start
  uint32_t nested;  // nested calls seen below this top-level call
  void* sample;     // the hooks' token of a sampled call, or nullptr
};

// One per distinct input key (op, stage, inputs) seen by a thread: the JSON
// of the arguments (built in the start callback: the boxed inputs are gone by
// the end callback) and the output keys seen after it, each with its
// signature id.
struct InputEntry {
  std::shared_ptr<const format::JsonValue> arguments;  // shared with the signatures built later from it
  std::vector<std::pair<std::vector<uint64_t>, uint32_t>> outputs;
  SampleKey* sample = nullptr;  // shared by every thread that sees this input key; null: never sampled
  uint64_t key_offset = 0;      // its input key in the thread's KeyTable (stored_equals), of key_words words
  uint32_t key_words = 0;
  uint32_t next = kNoEntry;  // the entry of the call that followed this one last time on the thread
  static constexpr uint32_t kNoEntry = UINT32_MAX;
};

// A thread's top-level c10d calls per stage and their time, each from its
// start to the start of the thread's next top-level call: the caller's
// Work.wait() runs outside any op, so the op alone is only the enqueue.
// Allocated at the thread's first collective.
struct CollectiveTimes {
  Counter calls[kMaxStages] = {};
  Counter ns[kMaxStages] = {};
};

// A thread's calls per signature id, in chunks allocated at the first id of each.
class SignatureCounts {
 public:
  ~SignatureCounts();
  void count(uint32_t id) {
    Counter* chunk = chunks_[id / kCountsChunk].load(std::memory_order_relaxed);
    if (!chunk) chunk = allocate(id / kCountsChunk);
    bump(chunk[id % kCountsChunk]);
  }
  // Adds these counts to totals[id] for every id < totals.size().
  void add_to(std::vector<uint64_t>& totals) const;

 private:
  Counter* allocate(size_t chunk);
  std::atomic<Counter*> chunks_[kMaxCountChunks] = {};
};

struct ThreadState {
  uint64_t epoch = 0;
  uint32_t depth = 0;
  int64_t collective_t0 = 0;  // the open collective's start (0: none open); beside depth, read at every call
  uint32_t tid = 0;
  const StageStack* stages = nullptr;  // this thread's stage stack
  Frame frames[kMaxDepth];
  KeyBuffer key;  // keys of open recorded frames, back to back
  OpCache ops;
  KeyTable inputs;  // input key -> index in entries
  std::vector<InputEntry> entries;
  uint32_t last_entry = InputEntry::kNoEntry;  // the thread's last recorded call's (its next call's guess)

  // Whether a call's input key (`words` words) is the guessed one: the entry that followed the thread's last
  // recorded call last time (a loop repeats its calls in order), checked by a whole-key comparison, no hashing
  // and no probing. If so, `entry` is it and the thread's last entry; else the caller looks the key up in
  // `inputs` (its hash), adds it if new (add_entry), and follows it.
  bool guessed(const uint64_t* key, size_t words, uint32_t& entry) {
    const uint32_t guess = this->guess();
    if (guess == InputEntry::kNoEntry ||
        !inputs.stored_equals(entries[guess].key_offset, entries[guess].key_words, key, words))
      return false;
    entry = last_entry = guess;
    return true;
  }
  // The entry that followed the thread's last recorded call last time, or InputEntry::kNoEntry.
  uint32_t guess() const {
    return last_entry != InputEntry::kNoEntry ? entries[last_entry].next : InputEntry::kNoEntry;
  }
  // A new entry for that key, with its arguments' JSON and sampler key (null: never sampled).
  uint32_t add_entry(uint64_t hash, const uint64_t* key, size_t words,
                     std::shared_ptr<const format::JsonValue> arguments, SampleKey* sample);
  // This thread's recorded call is `entry`'s (not guessed): the guess after the call before it from now on.
  void follow(uint32_t entry) {
    if (last_entry != InputEntry::kNoEntry) entries[last_entry].next = entry;
    last_entry = entry;
  }
  Counter calls_seen{0};
  Counter nested_seen{0};        // nested calls that reached the callback (added at each top-level call's end)
  Counter nested_suppressed{0};  // top-level calls below which RecordFunction was switched off
  Counter traced[kCompileTracingKinds] =
      {};  // compile-time calls on fake tensors (nested ones too with NESTED), by how recognised
  const at::RecordFunction* suppressed_rf = nullptr;  // the call below which RecordFunction is off (kept over restarts)
  uint32_t others_recheck = 0;  // suppressions left before the global callbacks are looked at again
  bool others_global = false;   // another global callback was registered at the last look
  SignatureCounts counts;
  runtime::RecordBuffer* buffer = nullptr;
  bool buffer_requested = false;
  uint32_t timed_changes = ~0u;  // the stage stack's `changes` the stage clock is done with (began, or gave up)
  uint32_t timed_seen = ~0u;     // ... and the one timed_tries counts for
  uint32_t timed_tries = 0;      // ops without a CUDA tensor since that change
  std::atomic<CollectiveTimes*> collectives{nullptr};
  StageId collective_stage = 0;  // the open collective's stage
  ~ThreadState() { delete collectives.load(std::memory_order_relaxed); }
};

// Counters beside the per-signature counts, summed over threads.
struct SideTotals {
  uint64_t calls_seen = 0, nested_seen = 0, nested_suppressed = 0, traced[kCompileTracingKinds] = {};
  std::map<StageId, std::pair<uint64_t, uint64_t>> collectives;  // stage -> calls, ns
  void add(const ThreadState& ts);
};

// The live threads' states and what the exited ones left. Thread-safe.
class ThreadRegistry {
 public:
  // `signatures`: the number of signature ids assigned so far (the recorder's, read with acquire).
  explicit ThreadRegistry(const std::atomic<uint32_t>& signatures) : signatures_(signatures) {}
  // The calling thread's state, made now and retired at the thread's exit.
  // `cache`: the caller's thread_local pointer to it (a variable of the
  // caller's translation unit, read there without a call), set here and
  // cleared when the state is retired.
  ThreadState* add_this_thread(ThreadState** cache);
  // Per-signature calls of every thread, live and exited.
  std::vector<uint64_t> signature_totals();
  SideTotals side_totals();
  // In a forked child: the mutex as new (its holder may be gone).
  void reset_lock_after_fork() { new (&mu_) std::mutex(); }

 private:
  friend struct ThreadStateOwner;
  void retire(ThreadState* ts);
  const std::atomic<uint32_t>& signatures_;
  std::mutex mu_;
  std::vector<ThreadState*> threads_;
  std::vector<uint64_t> retired_counts_;
  SideTotals retired_;  // of the threads that have exited
};

// At a thread's top-level call: the open collective ends here; a collective starts.
void time_collective(ThreadState& ts, const OpInfo& op, int64_t now_ns);

}  // namespace lingprobe::capture
