#include "capture/recorder.h"

#include "capture/torch_guard.h"

#include <ATen/record_function.h>
#include <torch/version.h>
#include <time.h>

#include <atomic>
#include <mutex>
#include <new>

#include "capture/call_keys.h"
#include "capture/call_sampling.h"
#include "capture/compile_tracing.h"
#include "capture/fork_gate.h"
#include "capture/device_access.h"
#include "capture/nested_suppression.h"
#include "capture/op_registry.h"
#include "capture/sampled_call.h"
#include "capture/signature_builder.h"
#include "capture/signature_key.h"
#include "capture/signature_table.h"
#include "capture/stage_clock_trigger.h"
#include "capture/stages.h"
#include "capture/thread_state.h"

// The recorder's life cycle and its two callbacks. The callbacks are
// pipelines of named steps; the parts they use live in their own files:
// op_registry (operators, selection), thread_state (per-thread frames, keys
// and counters, the live and retired threads), signature_table (interning),
// nested_suppression, call_sampling and stage_clock_trigger.
// The callbacks' steps are always inlined (C10_ALWAYS_INLINE): the split into
// named steps costs no instruction per call (docs/PERFORMANCE.md).
namespace lingprobe::capture {
namespace {

static_assert(kCountsChunk * kMaxCountChunks == SignatureTable::kMaxSignatures, "a count per signature id");

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Global {
  std::mutex mu;  // the life cycle: install, start/stop, sampling's late start
  RecorderOptions options;
  bool skips_warm_up = false;  // options.skip_calls or skip_seconds
  RecorderSink* sink = nullptr;
  at::CallbackHandle handle = 0;
  bool installed = false;
  OpRegistry ops{options};
  SignatureTable signatures;
  ThreadRegistry threads{signatures.assigned()};
  std::atomic<bool> active{false};
  std::atomic<uint64_t> epoch{1};
  std::atomic<uint64_t> seq{0};
  std::atomic<int64_t> started_ns{0};
  std::atomic<uint64_t> warmup_seen{0};
  std::atomic<uint64_t> drop_depth{0};
  std::atomic<uint64_t> drop_no_buffer{0};
  std::atomic<uint64_t> drop_table_full{0};
  std::atomic<uint64_t> drop_error{0};
  std::atomic<uint64_t> drop_buffer_full{0};
  // Sampling: set at install, or later once (a child that became a rank);
  // the hooks are published before the sampler, and never change again.
  std::atomic<SampledCallHooks*> hooks{nullptr};
  std::atomic<Sampler*> sampler{nullptr};
  std::atomic<StageTiming*> stage_timing{nullptr};
};

Global& g() {
  static Global* instance = new Global;  // never destroyed: callbacks may run during exit
  return *instance;
}

// The same object, for the callbacks: set before the callback is installed,
// so they skip the function-local static's guard.
Global* g_installed = nullptr;

// The calling thread's state (thread_state.h), null until its first call and after its exit; of this
// translation unit, so that the callbacks read it without a call.
thread_local ThreadState* t_state = nullptr;

inline ThreadState& this_thread(Global& G) {
  if (ThreadState* ts = t_state) return *ts;
  return *G.threads.add_this_thread(&t_state);
}

bool in_warm_up(Global& G) {
  if (G.options.skip_calls && G.warmup_seen.fetch_add(1, std::memory_order_relaxed) < G.options.skip_calls) return true;
  return G.options.skip_seconds > 0 &&
         now_ns() - G.started_ns.load(std::memory_order_relaxed) < static_cast<int64_t>(G.options.skip_seconds * 1e9);
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn);

// Recording restarted since this thread's last call: the frames of the last window are stale.
void forget_stale_frames(Global& G, ThreadState& ts, uint64_t epoch) {
  for (uint32_t d = 0; d < ts.depth && d < kMaxDepth; ++d)
    if (ts.frames[d].recorded && ts.frames[d].sample)
      G.hooks.load(std::memory_order_relaxed)->abandon(ts.frames[d].sample);
  ts.epoch = epoch;
  ts.depth = 0;
  ts.key.truncate(0);
  ts.collective_t0 = 0;  // nor is a collective left open then timed across the pause
}

// A frame for the call at the top of the thread's stack; nullptr when nesting is too deep (counted).
C10_ALWAYS_INLINE Frame* push_frame(Global& G, ThreadState& ts, const at::RecordFunction& fn) {
  const uint32_t depth = ts.depth++;
  if (depth >= kMaxDepth) {
    G.drop_depth.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  Frame& f = ts.frames[depth];
  f.fn = &fn;
  f.recorded = false;
  f.sample = nullptr;
  return &f;
}

// A key's first call on this thread: its entry (none if its arguments' JSON throws), with that JSON and sample key.
uint32_t new_entry(Global& G, ThreadState& ts, const Frame& f, OpInfo* op, StageId stage,
                   c10::ArrayRef<const c10::IValue> inputs, uint64_t hash) {
  auto arguments = std::make_shared<const format::JsonValue>(build_arguments(op->schema, inputs, op->fold.arguments));
  Sampler* sampler = G.sampler.load(std::memory_order_acquire);
  SampleKey* sample = sampler ? sample_key(*sampler, *op, *arguments, stage) : nullptr;
  return ts.add_entry(hash, ts.key.data() + f.key_begin, f.input_end - f.key_begin, std::move(arguments), sample);
}

// The call's InputEntry by its input key: the guess matched in place (call_keys), the guess from the call before
// (thread_state), the table, or new.
C10_ALWAYS_INLINE void enter_inputs(Global& G, ThreadState& ts, Frame& f, OpInfo* op, StageId stage,
                                    c10::ArrayRef<const c10::IValue> inputs) {
  if (!f.key_written) {
    ts.last_entry = f.entry;
    return;
  }
  const uint64_t* key = ts.key.data() + f.key_begin;
  const size_t words = f.input_end - f.key_begin;
  // an unfolded key was compared with the guess in place already (inputs_match_guess)
  if (op->fold.arguments != 0 && ts.guessed(key, words, f.entry)) return;
  const uint64_t hash = hash_words(key, words);
  const uint32_t* found = ts.inputs.find(hash, key, words);
  f.entry = found ? *found : new_entry(G, ts, f, op, stage, inputs, hash);
  ts.follow(f.entry);
}

// The hooks' token when this call of a sampled key is due and taken, else nullptr.
C10_ALWAYS_INLINE void* maybe_sample(Global& G, SampleKey* k, const OpInfo& op, StageId stage,
                                     c10::ArrayRef<const c10::IValue> inputs) {
  if (!k || !k->active.load(std::memory_order_relaxed)) return nullptr;
  Sampler* sampler = G.sampler.load(std::memory_order_relaxed);
  if (!sampler->due(k)) return nullptr;
  return begin_sample(*sampler, *G.hooks.load(std::memory_order_relaxed), k, op, inputs, stage);
}

// Inside a top-level call (NESTED off): only pair the start with its end.
C10_ALWAYS_INLINE void enter_nested(Global& G, ThreadState& ts, const at::RecordFunction& fn) {
  ++ts.frames[0].nested;  // into the thread's nested_seen at the top-level call's end
  push_frame(G, ts, fn);
}

C10_ALWAYS_INLINE void record_start(Global& G, ThreadState& ts, const at::RecordFunction& fn) {
  OpInfo* op = ts.ops.find(G.ops, fn);
  if (!op) return;  // a named scope, not an operator: calls inside it stay top-level
  const uint32_t depth = ts.depth;
  Frame* f = push_frame(G, ts, fn);
  if (!f) return;
  if (depth == 0 && C10_UNLIKELY((ts.collective_t0 != 0) | (op->collective != 0))) time_collective(ts, *op, now_ns());
  f->op = op;
  f->traced = false;
  f->nested = 0;
  const StageId stage = top_stage(*ts.stages);
  const auto inputs = fn.inputs();
  // A selected op's inputs are looked at once: their key and, in the same pass, a fake tensor among them; an
  // unselected op's only for the fake tensor.
  bool selected = G.ops.selected(op, stage);
  InputScan scan;
  CompileTracing tracing = compile_tracing_mode();
  if (tracing == CompileTracing::None) {
    if (!selected)
      scan.fake = has_fake_tensor(c10::ArrayRef<c10::IValue>(inputs.data(), inputs.size()), &scan.tensor);
    else if (!inputs_match_guess(ts, *f, op, stage, inputs, scan))
      input_key(ts, *f, op, stage, inputs, scan);
  }
  if (tracing == CompileTracing::None && scan.fake) tracing = CompileTracing::FakeTensorInputs;
  if (C10_UNLIKELY(tracing != CompileTracing::None)) {  // compile time: no row, no sample, no stage interval
    if (selected && tracing == CompileTracing::FakeTensorInputs) ts.key.truncate(f->key_begin);
    bump(ts.traced[static_cast<int>(tracing)]);
    f->traced = true;
    return;
  }
  f->factory = !scan.tensor;
  bump(ts.calls_seen);
  if (C10_UNLIKELY(G.stage_timing.load(std::memory_order_relaxed) != nullptr) &&
      ts.stages->changes != ts.timed_changes)  // published by enable_sampling while calls run: acquire it
    begin_stage_interval(*G.stage_timing.load(std::memory_order_acquire), ts, fn, stage);
  if (selected && C10_UNLIKELY(G.skips_warm_up) && in_warm_up(G)) {
    ts.key.truncate(f->key_begin);
    selected = false;
  }
  if (!selected) {
    if (depth == 0) suppress_below(&ts, fn, op, on_start);  // its nested calls cost the boxing all the same
    return;
  }
  f->stage = stage;
  enter_inputs(G, ts, *f, op, stage, inputs);
  f->recorded = true;
  f->sample = maybe_sample(G, ts.entries[f->entry].sample, *op, stage, inputs);
  if (depth == 0)
    suppress_below(&ts, fn, op, on_start);  // after the sampled call's hooks (which run with RecordFunction off)
  f->t0 = G.options.call_times ? now_ns() : 0;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Global& G = *g_installed;
  if (!G.active.load(std::memory_order_relaxed)) return nullptr;
  try {
    ThreadState& ts = this_thread(G);
    if (const uint64_t epoch = G.epoch.load(std::memory_order_relaxed); ts.epoch != epoch)
      forget_stale_frames(G, ts, epoch);
    if (ts.depth > 0 && !G.options.nested)
      enter_nested(G, ts, fn);
    else
      record_start(G, ts, fn);
  } catch (...) {
    G.drop_error.fetch_add(1, std::memory_order_relaxed);
  }
  return nullptr;
}

// A factory traced on fake tensors, the mode unseen at its start (torch before 2.2): compile time after all.
void reclassify_as_traced(Global& G, ThreadState& ts, Frame& f) {
  bump(ts.traced[static_cast<int>(CompileTracing::FakeTensorOutputs)]);
  ts.calls_seen.store(ts.calls_seen.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  ts.key.truncate(f.key_begin);
  if (f.sample) G.hooks.load(std::memory_order_relaxed)->abandon(f.sample);
  f.sample = nullptr;
  f.recorded = false;
  f.traced = true;
}

// The call's signature id: its outputs matched in place among those its
// InputEntry saw (call_keys), else their key appended to the input key, then
// resolved in the process's table (a first sighting; folded returns compared
// as keys). false when the table is full (counted).
C10_ALWAYS_INLINE bool signature_id(Global& G, ThreadState& ts, Frame& f, c10::ArrayRef<const c10::IValue> outs,
                                    uint32_t& id) {
  InputEntry& entry = ts.entries[f.entry];
  if (outputs_match_seen(ts, f, entry, outs, id)) return true;
  if (!f.key_written) write_matched_input_key(ts, f, entry);
  ts.key.push(outs.size());
  if (C10_UNLIKELY(f.op->fold.returns != 0))
    append_folded_keys(outs.data(), outs.size(), f.op->fold.returns, ts.key);
  else
    append_keys(outs.data(), outs.size(), ts.key);
  const uint64_t* key = ts.key.data() + f.key_begin;
  const size_t words = ts.key.size() - f.key_begin;
  const uint64_t* out = key + (f.input_end - f.key_begin);
  const size_t out_words = ts.key.size() - f.input_end;
  if (C10_UNLIKELY(f.op->fold.returns != 0))  // unfolded outputs were compared in place (outputs_match_seen)
    for (const auto& [seen, seen_id] : entry.outputs)
      if (seen.size() == out_words && same_words(seen.data(), out, out_words)) return id = seen_id, true;
  std::string sha;
  if (!G.signatures.resolve(key, words, {f.op, entry.arguments, outs, f.stage}, *G.sink, id,
                            entry.sample ? &sha : nullptr)) {
    G.drop_table_full.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  entry.outputs.emplace_back(std::vector<uint64_t>(out, key + words), id);
  if (entry.sample) G.sampler.load(std::memory_order_relaxed)->on_signature(entry.sample, id, sha);
  return true;
}

// The call record into the thread's buffer (registered at its first record); the overflow policy is the sink's.
C10_ALWAYS_INLINE void emit_call_record(Global& G, ThreadState& ts, const Frame& f, uint64_t seq, int64_t t1,
                                        uint32_t id) {
  if (!ts.buffer && !ts.buffer_requested) {
    ts.buffer_requested = true;
    ts.buffer = G.sink->register_thread_buffer(G.options.buffer_records);
  }
  if (!ts.buffer) {
    G.drop_no_buffer.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const format::CallRecord rec{seq, f.t0, t1, id, ts.tid, ts.depth};
  for (;;) {
    const auto pushed = ts.buffer->push(rec);
    if (pushed == runtime::RecordBuffer::Push::kPushed) return;
    if (pushed == runtime::RecordBuffer::Push::kReachedHalf) {
      G.sink->on_buffer_half_full();
      return;
    }
    if (!G.sink->on_buffer_full()) {
      G.drop_buffer_full.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
}

// A recorded call's end: its signature counted, its sample ended, its record emitted.
C10_ALWAYS_INLINE void record_end(Global& G, ThreadState& ts, Frame& f, const at::RecordFunction& fn, int64_t t1) {
  if (G.options.call_times && !t1) t1 = now_ns();
  const auto& outs = fn.outputs();
  const c10::ArrayRef<const c10::IValue> outputs(outs.data(), outs.size());
  uint32_t id = 0;
  const bool found = signature_id(G, ts, f, outputs, id);
  ts.key.truncate(f.key_begin);
  if (!found) {
    if (f.sample) G.hooks.load(std::memory_order_relaxed)->abandon(f.sample);
    return;
  }
  ts.counts.count(id);
  uint64_t seq = 0;
  if (f.sample) {
    seq = G.seq.fetch_add(1, std::memory_order_relaxed);
    void* token = f.sample;
    f.sample = nullptr;
    G.hooks.load(std::memory_order_relaxed)->end(token, outputs, id, seq);
  } else if (G.options.call_records) {
    seq = G.seq.fetch_add(1, std::memory_order_relaxed);
  }
  if (G.options.call_records) emit_call_record(G, ts, f, seq, t1, id);
}

// Before any early return of the end callback (a restart may have reset the
// frames): the thread's RecordFunction back on below its suppressed call. The
// call's end time (taken before that), or 0.
C10_ALWAYS_INLINE int64_t end_suppression(Global& G, ThreadState& ts, const at::RecordFunction& fn) {
  if (C10_LIKELY(ts.suppressed_rf != &fn)) return 0;
  const int64_t t1 = G.options.call_times ? now_ns() : 0;
  ts.suppressed_rf = nullptr;
  const ForkGateSection gate;
  at::enableRecordFunction(true);
  return t1;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  ThreadState* ts = t_state;
  if (!ts) return;
  Global& G = *g_installed;
  const int64_t t1 = end_suppression(G, *ts, fn);
  if (ts->depth == 0) return;
  if (ts->depth > kMaxDepth) {
    --ts->depth;
    return;
  }
  Frame& f = ts->frames[ts->depth - 1];
  if (f.fn != &fn) return;  // not an operator we counted
  --ts->depth;
  if (kFakeFactoriesUnseenAtStart && f.recorded && f.factory &&
      C10_UNLIKELY(has_fake_tensor(c10::ArrayRef<c10::IValue>(fn.outputs().data(), fn.outputs().size()))))
    reclassify_as_traced(G, *ts, f);
  if (ts->depth == 0) {  // a top-level call: its nested calls into the thread's total, and into learning
    if (f.nested) bump(ts->nested_seen, f.nested);
    if (C10_UNLIKELY(f.op->suppress.load(std::memory_order_relaxed) < 0) && !f.traced)
      learn_nested_calls(f.op, f.nested, G.options.suppress_min_nested);
  }
  if (!f.recorded) return;
  try {
    record_end(G, *ts, f, fn, t1);
  } catch (...) {
    ts->key.truncate(f.key_begin);
    if (f.sample) G.hooks.load(std::memory_order_relaxed)->abandon(f.sample);
    f.sample = nullptr;
    G.drop_error.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace

void install_recorder(const RecorderOptions& options, RecorderSink* sink) {
  Global& G = g();
  std::lock_guard<std::mutex> lock(G.mu);
  if (G.installed) return;
  g_installed = &G;
  G.options = options;
  G.options.call_times = options.call_times && options.call_records;  // no clock read for records not written
  if (options.stage_timing) G.stage_timing.store(options.stage_timing, std::memory_order_release);
  if (options.sampler && options.hooks) {
    G.hooks.store(options.hooks, std::memory_order_release);
    G.sampler.store(options.sampler, std::memory_order_release);
  }
  G.skips_warm_up = options.skip_calls > 0 || options.skip_seconds > 0;
  G.sink = sink;
  G.installed = true;
}

// The callback is registered only while recording: with recording off the
// dispatcher sees exactly the callbacks it would see without lingprobe.
void set_recording(bool on) {
  Global& G = g();
  std::lock_guard<std::mutex> lock(G.mu);
  if (!G.installed || G.active.load(std::memory_order_relaxed) == on) return;
  if (on) {
    G.epoch.fetch_add(1, std::memory_order_relaxed);
    G.started_ns.store(now_ns(), std::memory_order_relaxed);
    G.warmup_seen.store(0, std::memory_order_relaxed);
    G.active.store(true, std::memory_order_relaxed);
    const ForkGateSection gate;
    G.handle = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                         .needsInputs(true)
                                         .needsOutputs(true)
                                         .scopes({at::RecordScope::FUNCTION}));
  } else {
    {
      const ForkGateSection gate;
      at::removeCallback(G.handle);
    }
    G.handle = 0;
    G.active.store(false, std::memory_order_relaxed);
  }
}

bool recording() { return g().active.load(std::memory_order_relaxed); }

void stop_after_fork() {
  // The other threads are gone, whatever locks they held with them: no lock and
  // no torch call here (at::removeCallback takes torch's callback mutex, which a
  // thread switching RecordFunction off below a call may have held at the fork).
  // The callback stays registered and returns at its first check.
  Global& G = g();
  new (&G.mu) std::mutex();
  G.ops.reset_lock_after_fork();
  G.signatures.reset_lock_after_fork();
  G.threads.reset_lock_after_fork();
  G.active.store(false, std::memory_order_relaxed);
}

void enable_sampling(Sampler* sampler, SampledCallHooks* hooks, StageTiming* stage_timing) {
  Global& G = g();
  std::lock_guard<std::mutex> lock(G.mu);
  if (G.sampler.load() || !sampler || !hooks) return;
  if (stage_timing) G.stage_timing.store(stage_timing, std::memory_order_release);
  G.hooks.store(hooks, std::memory_order_release);
  G.sampler.store(sampler, std::memory_order_release);
}

void uninstall_recorder() {
  Global& G = g();
  std::lock_guard<std::mutex> lock(G.mu);
  if (!G.installed) return;
  G.active.store(false, std::memory_order_relaxed);
  if (G.handle) {
    const ForkGateSection gate;
    at::removeCallback(G.handle);
  }
  G.handle = 0;
  G.installed = false;
}

std::vector<std::pair<std::string, std::string>> recorder_ops_met() { return g().ops.names(); }

RecorderStats recorder_stats() {
  Global& G = g();
  RecorderStats s;
  const SideTotals side = G.threads.side_totals();
  s.calls_seen = side.calls_seen;
  s.nested_seen = side.nested_seen;
  s.nested_suppressed = side.nested_suppressed;
  for (uint64_t n : G.threads.signature_totals()) s.calls_recorded += n;  // every recorded call is counted once
  s.signatures = G.signatures.assigned().load(std::memory_order_relaxed);
  s.dropped = G.drop_depth.load() + G.drop_no_buffer.load() + G.drop_table_full.load() + G.drop_error.load() +
              G.drop_buffer_full.load();
  return s;
}

format::CountsSnapshot recorder_counts() {
  Global& G = g();
  format::CountsSnapshot snap;
  const std::vector<uint64_t> totals = G.threads.signature_totals();
  for (uint32_t id = 0; id < totals.size(); ++id) snap.calls.emplace_back(id, totals[id]);
  auto add = [&](const char* what, const char* reason, const std::atomic<uint64_t>& v) {
    const uint64_t x = v.load(std::memory_order_relaxed);
    if (x) snap.dropped[what][reason] = x;
  };
  add("calls", "nesting_too_deep", G.drop_depth);
  add("calls", "signature_table_full", G.drop_table_full);
  add("calls", "internal_error", G.drop_error);
  add("call_records", "no_buffer", G.drop_no_buffer);
  add("call_records", "buffer_full", G.drop_buffer_full);
  if (uint64_t s = stages_overflowed()) snap.dropped["stages"]["too_many_stage_names"] = s;
  const SideTotals side = G.threads.side_totals();
  for (int k = 1; k < kCompileTracingKinds; ++k)
    if (side.traced[k]) snap.compile_time[compile_tracing_name(static_cast<CompileTracing>(k))] = side.traced[k];
  for (const auto& [stage, times] : side.collectives)
    snap.collectives[stage_name(stage)] = {{"calls", times.first}, {"us", times.second / 1000}};
  if (!G.options.nested) {
    snap.nested["seen"] = side.nested_seen;
    snap.nested["suppressed_below"] = side.nested_suppressed;
  }
  return snap;
}

std::string torch_version() { return TORCH_VERSION; }

}  // namespace lingprobe::capture
