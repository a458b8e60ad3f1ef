#include "capture/recorder.h"

#include "capture/torch_guard.h"

#include <ATen/record_function.h>
#include <torch/version.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <new>
#include <optional>
#include <unordered_map>
#include <vector>

#include "capture/compile_tracing.h"
#include "capture/cuda_stream.h"
#include "capture/fork_gate.h"
#include "capture/device_access.h"
#include "capture/key_table.h"
#include "capture/sampled_call.h"
#include "capture/signature_builder.h"
#include "capture/signature_key.h"
#include "capture/stages.h"
#include "format/canonical_json.h"
#include "format/sha256.h"

namespace lingprobe::capture {
namespace {

constexpr size_t kMaxDepth = 128;
constexpr size_t kChunk = 4096;
constexpr size_t kMaxChunks = 256;  // up to 1,048,576 signatures per process
constexpr size_t kOpCacheSlots = 256;
constexpr uint32_t kSuppressLearnCalls = 8;   // an op's first calls, nested calls observed, decide auto suppression
constexpr uint32_t kOtherCallbacksRecheck = 256;  // suppressions between two looks at the global callbacks

int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// One per operator (overload), found by the stable name pointer the
// dispatcher gives RecordFunction::name().
struct OpInfo {
  c10::FunctionSchema schema;
  std::string name;           // "aten::to"
  std::string with_overload;  // "aten::to.dtype"
  std::string dotted;         // "aten.to.dtype"
  std::atomic<int8_t> selected[kMaxStages];  // -1 unknown, 0 no, 1 yes
  // Auto suppression of the calls nested below this op (all threads learn together).
  std::atomic<uint32_t> learn_calls{0};
  std::atomic<uint64_t> learn_nested{0};
  std::atomic<int8_t> suppress;  // -1 learning (auto), 0 no (never, nested, too few nested calls), 1 yes (always)
  // A c10d op, timed whatever the selection (CollectiveTimes): 1 a collective, 2 a wait for one
  // (_c10d_functional::wait_tensor: its time counts, the call does not), 0 neither.
  const uint8_t collective;
  OpInfo(c10::FunctionSchema s, int8_t suppress_at_start, uint8_t collective_kind)
      : schema(std::move(s)), suppress(suppress_at_start), collective(collective_kind) {
    name = schema.name();
    with_overload = name + "." + schema.overload_name();
    if (schema.overload_name().empty()) with_overload = name;
    dotted = dotted_op_name(schema.operator_name());
    for (auto& x : selected) x.store(-1, std::memory_order_relaxed);
  }
};

struct Frame {
  const at::RecordFunction* fn;
  OpInfo* op;
  int64_t t0;
  uint32_t key_begin;  // words of the thread's KeyBuffer
  uint32_t input_end;
  uint32_t entry;      // the InputEntry of the input key
  StageId stage;
  bool recorded;
  bool traced;         // a compile-time call on fake tensors (counted apart, never recorded)
  uint32_t nested;     // nested calls seen below this top-level call
  void* sample;        // the hooks' token of a sampled call, or nullptr
};

// One per distinct input key (op, stage, inputs) seen by a thread: the JSON
// of the arguments (built in the start callback: the boxed inputs are gone by
// the end callback) and the output keys seen after it, each with its
// signature id.
struct InputEntry {
  format::JsonValue arguments;
  std::vector<std::pair<std::vector<uint64_t>, uint32_t>> outputs;
  SampleKey* sample = nullptr;  // shared by every thread that sees this input key; null: never sampled
};

using Counter = std::atomic<uint64_t>;  // written by one thread (load, add, store), read by the writer

inline bool same_words(const uint64_t* a, const uint64_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

inline void bump(Counter& c, uint64_t n = 1) { c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed); }

// A thread's top-level c10d calls per stage and their time, each from its
// start to the start of the thread's next top-level call: the caller's
// Work.wait() runs outside any op, so the op alone is only the enqueue.
// Allocated at the thread's first collective.
struct CollectiveTimes {
  Counter calls[kMaxStages] = {};
  Counter ns[kMaxStages] = {};
};

struct ThreadState {
  uint64_t epoch = 0;
  uint32_t depth = 0;
  int64_t collective_t0 = 0;     // the open collective's start (0: none open); beside depth, read at every call
  uint32_t tid = 0;
  const StageStack* stages = nullptr;  // this thread's stage stack
  Frame frames[kMaxDepth];
  KeyBuffer key;  // keys of open recorded frames, back to back
  struct OpSlot {
    const char* name;
    OpInfo* op;
  } op_cache[kOpCacheSlots] = {};
  std::unordered_map<const char*, OpInfo*> ops;  // behind the cache
  KeyTable inputs;                               // input key -> index in entries
  std::vector<InputEntry> entries;
  Counter calls_seen{0};
  Counter nested_seen{0};        // nested calls that reached the callback (added at each top-level call's end)
  Counter nested_suppressed{0};  // top-level calls below which RecordFunction was switched off
  Counter traced[kCompileTracingKinds] = {};  // compile-time calls on fake tensors (nested ones too with NESTED), by how recognised
  const at::RecordFunction* suppressed_rf = nullptr;  // the call below which RecordFunction is off (kept over restarts)
  uint32_t others_recheck = 0;   // suppressions left before the global callbacks are looked at again
  bool others_global = false;    // another global callback was registered at the last look
  std::atomic<Counter*> counts[kMaxChunks] = {};  // per-signature calls of this thread
  runtime::RecordBuffer* buffer = nullptr;
  bool buffer_requested = false;
  uint32_t timed_changes = ~0u;  // the stage stack's `changes` the stage clock is done with (began, or gave up)
  uint32_t timed_seen = ~0u;     // ... and the one timed_tries counts for
  uint32_t timed_tries = 0;      // ops without a CUDA tensor since that change
  std::atomic<CollectiveTimes*> collectives{nullptr};
  StageId collective_stage = 0;  // the open collective's stage
  ~ThreadState() { delete collectives.load(std::memory_order_relaxed); }
};

struct Global {
  std::mutex mu;
  RecorderOptions options;
  bool skips_warm_up = false;  // options.skip_calls or skip_seconds
  RecorderSink* sink = nullptr;
  at::CallbackHandle handle = 0;
  bool installed = false;
  std::unordered_map<const char*, OpInfo*> ops;          // under mu; never freed
  std::unordered_map<std::string, uint32_t> signatures;  // full key bytes -> id, under mu
  std::vector<std::string> signature_sha;                // id -> sha256, under mu
  std::atomic<uint32_t> next_id{0};
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
  // Live threads' states, and the totals of threads that have exited.
  std::mutex threads_mu;
  std::vector<ThreadState*> threads;
  std::vector<uint64_t> retired_counts;
  uint64_t retired_seen = 0;
  struct SideTotals {  // counters beside the per-signature counts, summed over threads
    uint64_t nested_seen = 0, nested_suppressed = 0, traced[kCompileTracingKinds] = {};
    std::map<StageId, std::pair<uint64_t, uint64_t>> collectives;  // stage -> calls, ns
    void add(const ThreadState& ts) {
      nested_seen += ts.nested_seen.load(std::memory_order_relaxed);
      nested_suppressed += ts.nested_suppressed.load(std::memory_order_relaxed);
      for (int k = 0; k < kCompileTracingKinds; ++k) traced[k] += ts.traced[k].load(std::memory_order_relaxed);
      if (const CollectiveTimes* c = ts.collectives.load(std::memory_order_acquire))
        for (size_t stage = 0; stage < kMaxStages; ++stage)
          if (const uint64_t n = c->calls[stage].load(std::memory_order_relaxed)) {
            auto& [calls, ns] = collectives[static_cast<StageId>(stage)];
            calls += n;
            ns += c->ns[stage].load(std::memory_order_relaxed);
          }
    }
  } retired_side;  // of the threads that have exited
};

Global& g() {
  static Global* instance = new Global;  // never destroyed: callbacks may run during exit
  return *instance;
}

// The same object, for the callbacks: set before the callback is installed,
// so they skip the function-local static's guard.
Global* g_installed = nullptr;

thread_local ThreadState* t_state = nullptr;

// Adds a thread's per-signature counts to totals[id] for every id < totals.size().
// Under threads_mu.
void add_thread_counts(const ThreadState* ts, std::vector<uint64_t>& totals) {
  const size_t n = totals.size();
  for (size_t chunk = 0; chunk * kChunk < n; ++chunk)
    if (const Counter* c = ts->counts[chunk].load(std::memory_order_acquire))
      for (size_t id = chunk * kChunk; id < n && id < (chunk + 1) * kChunk; ++id)
        totals[id] += c[id % kChunk].load(std::memory_order_relaxed);
}

// Per-signature calls of every thread, live and exited.
std::vector<uint64_t> signature_totals(Global& G) {
  std::vector<uint64_t> totals(G.next_id.load(std::memory_order_acquire), 0);
  std::lock_guard<std::mutex> lock(G.threads_mu);
  for (size_t id = 0; id < totals.size() && id < G.retired_counts.size(); ++id) totals[id] = G.retired_counts[id];
  for (const ThreadState* ts : G.threads) add_thread_counts(ts, totals);
  return totals;
}

void retire(ThreadState* ts) {
  Global& G = g();
  std::lock_guard<std::mutex> lock(G.threads_mu);
  G.retired_seen += ts->calls_seen.load(std::memory_order_relaxed);
  G.retired_side.add(*ts);
  const uint32_t n = G.next_id.load(std::memory_order_acquire);
  if (G.retired_counts.size() < n) G.retired_counts.resize(n, 0);
  add_thread_counts(ts, G.retired_counts);
  for (auto it = G.threads.begin(); it != G.threads.end(); ++it)
    if (*it == ts) {
      G.threads.erase(it);
      break;
    }
}

struct ThreadStateOwner {
  ~ThreadStateOwner() {
    if (t_state) {
      if (t_state->buffer) t_state->buffer->close();
      retire(t_state);
      for (auto& chunk : t_state->counts) delete[] chunk.load(std::memory_order_relaxed);
      delete t_state;
      t_state = nullptr;
    }
  }
};
thread_local ThreadStateOwner t_owner;

ThreadState* thread_state() {
  ThreadState* ts = t_state;
  if (ts) return ts;
  ts = new ThreadState;
  ts->tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  ts->stages = this_thread_stage_stack();
  (void)&t_owner;  // instantiate the owner so the state is retired at thread exit
  {
    Global& G = g();
    std::lock_guard<std::mutex> lock(G.threads_mu);
    G.threads.push_back(ts);
  }
  t_state = ts;
  return ts;
}

OpInfo* find_op_slow(ThreadState* ts, const at::RecordFunction& fn, ThreadState::OpSlot& slot) {
  const char* name = fn.name();
  OpInfo* op = nullptr;
  auto it = ts->ops.find(name);
  if (it != ts->ops.end()) {
    op = it->second;
  } else {
    auto schema = fn.operator_schema();
    if (!schema) return nullptr;  // a named scope, not an operator: ignored (never cached)
    Global& G = g();
    {
      std::lock_guard<std::mutex> lock(G.mu);
      auto git = G.ops.find(name);
      if (git != G.ops.end()) {
        op = git->second;
      } else {
        const RecorderOptions& o = G.options;
        // Collectives may hand work to other threads with this thread's local state, RecordFunction's switch
        // included: their calls there would vanish. Never below them.
        const std::string& op_name = schema->name();
        const bool collective = op_name.rfind("c10d::", 0) == 0 || op_name.rfind("_c10d_functional::", 0) == 0;
        const int8_t suppress = o.nested || collective || o.suppress_nested == NestedSuppression::Never ? 0
                                : o.suppress_nested == NestedSuppression::Always ? 1
                                                                                 : -1;
        op = new OpInfo(std::move(*schema), suppress,
                        !collective ? 0 : op_name == "_c10d_functional::wait_tensor" ? 2 : 1);
        G.ops.emplace(name, op);
      }
    }
    ts->ops.emplace(name, op);
  }
  slot = ThreadState::OpSlot{name, op};
  return op;
}

inline OpInfo* find_op(ThreadState* ts, const at::RecordFunction& fn) {
  const char* name = fn.name();
  ThreadState::OpSlot& slot = ts->op_cache[(reinterpret_cast<uintptr_t>(name) >> 4) % kOpCacheSlots];
  if (slot.name == name) return slot.op;
  return find_op_slow(ts, fn, slot);
}

// The stage clock's interval begins at the thread's first op with a CUDA
// tensor after a stage change (an op without one leaves it for the next, up
// to kStageClockTries ops: a CPU-only stage, or process, stops paying for the
// scan; that stage run goes unmeasured).
constexpr uint32_t kStageClockTries = 64;
void begin_stage_interval(StageTiming& clock, ThreadState& ts, const at::RecordFunction& fn, StageId stage) {
  const uint32_t changes = ts.stages->changes;
  if (!kHasStreamNativeHandle) {  // before torch 2.2 no stream handle: no intervals
    ts.timed_changes = changes;
    return;
  }
  if (ts.timed_seen != changes) ts.timed_seen = changes, ts.timed_tries = 0;
  std::optional<at::Tensor> cuda;
  auto consider = [&cuda](const at::Tensor& t) {
    if (!cuda && t.defined() && t.is_cuda()) cuda = t;
  };
  for (const c10::IValue& v : fn.inputs()) {
    if (v.isTensor()) consider(v.toTensor());
    else if (v.isTensorList())
      for (const at::Tensor& t : v.toTensorList().vec()) consider(t);
    if (cuda) break;
  }
  if (!cuda) {
    if (++ts.timed_tries >= kStageClockTries) ts.timed_changes = changes;
    return;
  }
  ts.timed_changes = changes;
  clock.begin(stage, cuda->get_device(), current_stream_handle(cuda->device()));
}

bool decide_selected(OpInfo* op, StageId stage) {
  Global& G = g();
  const bool yes = G.options.selection.selected(op->name, op->with_overload, stage_name(stage));
  op->selected[stage].store(yes ? 1 : 0, std::memory_order_relaxed);
  return yes;
}

inline bool is_selected(OpInfo* op, StageId stage) {
  const int8_t s = op->selected[stage].load(std::memory_order_relaxed);
  return s >= 0 ? s == 1 : decide_selected(op, stage);
}

Counter* allocate_counts(ThreadState* ts, size_t chunk) {
  auto* c = new Counter[kChunk];
  for (size_t i = 0; i < kChunk; ++i) c[i].store(0, std::memory_order_relaxed);
  ts->counts[chunk].store(c, std::memory_order_release);
  return c;
}

inline void count_call(ThreadState* ts, uint32_t id) {
  Counter* chunk = ts->counts[id / kChunk].load(std::memory_order_relaxed);
  if (!chunk) chunk = allocate_counts(ts, id / kChunk);
  bump(chunk[id % kChunk]);
}

// First sighting of this output key after this input key in this thread:
// find or assign the signature id.
bool resolve_signature(ThreadState* ts, const Frame& f, const uint64_t* key, size_t words,
                       const at::RecordFunction& fn, uint32_t& id_out) {
  Global& G = g();
  InputEntry& entry = ts->entries[f.entry];
  std::string full(reinterpret_cast<const char*>(key), words * sizeof(uint64_t));
  std::lock_guard<std::mutex> lock(G.mu);
  auto it = G.signatures.find(full);
  if (it == G.signatures.end()) {
    const uint32_t id = G.next_id.load(std::memory_order_relaxed);
    if (id / kChunk >= kMaxChunks) {
      G.drop_table_full.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    const auto& outs = fn.outputs();
    format::JsonValue sig =
        assemble_signature(f.op->dotted, entry.arguments,
                           build_output(f.op->schema, c10::ArrayRef<const c10::IValue>(outs.data(), outs.size())),
                           stage_name(f.stage));
    const std::string text = format::canonical_json(sig);
    const std::string sha = format::sha256_hex(text);
    G.next_id.store(id + 1, std::memory_order_release);
    it = G.signatures.emplace(std::move(full), id).first;
    G.signature_sha.push_back(sha);
    G.sink->on_new_signature(id, sha, text);
  }
  const uint64_t* out = key + (f.input_end - f.key_begin);
  entry.outputs.emplace_back(std::vector<uint64_t>(out, key + words), it->second);
  id_out = it->second;
  if (entry.sample) G.sampler.load(std::memory_order_relaxed)->on_signature(entry.sample, id_out, G.signature_sha[id_out]);
  return true;
}

// The sampler's key of a first-seen input: the SHA-256 of the canonical
// {"args","kwargs","op","stage"} (the signature without its output).
SampleKey* sample_key(const OpInfo& op, const format::JsonValue& arguments, StageId stage) {
  format::JsonValue input = arguments;
  input.set("op", format::JsonValue::string(op.dotted));
  input.set("stage", format::JsonValue::string(stage_name(stage)));
  return g().sampler.load(std::memory_order_relaxed)->key_for(format::canonical_sha256(input), op.name, op.with_overload, stage_name(stage));
}

// A due call of a sampled key: refused before any claim when nothing could
// come of it, else taken and handed to the hooks (before the op, and before
// t0: the copies are not the op's time). The hooks' token, or nullptr.
void* begin_sample(SampleKey* k, const OpInfo& op, c10::ArrayRef<const c10::IValue> inputs, StageId stage) {
  SampledCall call;
  call.schema = &op.schema;
  call.inputs = inputs;
  call.op_dotted = &op.dotted;
  call.stage = stage;
  call.key = k;
  Sampler* sampler = g().sampler.load(std::memory_order_relaxed);
  SampledCallHooks* hooks = g().hooks.load(std::memory_order_relaxed);
  if (const CallRefusal why = hooks->refusal(call); why != CallRefusal::None) {
    sampler->refused_early(k, why);
    return nullptr;
  }
  return sampler->take(k) ? hooks->begin(call) : nullptr;
}

bool in_warm_up(Global& G) {
  if (G.options.skip_calls && G.warmup_seen.fetch_add(1, std::memory_order_relaxed) < G.options.skip_calls)
    return true;
  return G.options.skip_seconds > 0 &&
         now_ns() - G.started_ns.load(std::memory_order_relaxed) < static_cast<int64_t>(G.options.skip_seconds * 1e9);
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn);

// Whether a RecordFunction callback other than lingprobe's would see this
// thread's nested calls: torch.profiler's thread-local callbacks (checked at
// every suppression), or another global one (the execution-trace observer,
// on-demand Kineto, a user's): looked at once per kOtherCallbacksRecheck
// suppressions of the thread, so one registered meanwhile misses at most
// that many calls' nested calls (docs/USAGE.md). getStepCallbacks counts as
// a step of sampled callbacks: one may fire at this look instead of a call.
bool other_callbacks(ThreadState* ts) {
  if (at::hasThreadLocalCallbacks()) return true;
  if (ts->others_recheck == 0) {
    ts->others_recheck = kOtherCallbacksRecheck;
    ts->others_global = false;
    const ForkGateSection gate;
    for (int scope = 0; scope < static_cast<int>(at::RecordScope::NUM_SCOPES); ++scope)  // any scope's ranges nest too
      for (const auto& cb : at::getStepCallbacks(static_cast<at::RecordScope>(scope)).callbacks_)
        if (cb.start_ != &on_start) ts->others_global = true;
  }
  --ts->others_recheck;
  return ts->others_global;
}

// At the start of a top-level call, after lingprobe's own work: switch
// RecordFunction off on the thread below it when that pays (op->suppress
// is 1: always, or auto and learned; never 1 with NESTED or never).
inline void suppress_below(ThreadState* ts, const at::RecordFunction& fn, OpInfo* op) {
  if (op->suppress.load(std::memory_order_relaxed) != 1 || ts->suppressed_rf || other_callbacks(ts)) return;
  {
    const ForkGateSection gate;
    at::enableRecordFunction(false);
  }
  ts->suppressed_rf = &fn;
  bump(ts->nested_suppressed);
}

// At the end of a top-level call of an op still learning (auto) whose nested
// calls were observed: how many it makes.
void learn_nested_calls(Global& G, OpInfo* op, uint32_t nested) {
  const uint64_t total = op->learn_nested.fetch_add(nested, std::memory_order_relaxed) + nested;
  const uint32_t n = op->learn_calls.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n == kSuppressLearnCalls) {  // decided once, by the thread that completes the 8th call
    int8_t learning = -1;
    op->suppress.compare_exchange_strong(learning,
                                         total >= static_cast<uint64_t>(G.options.suppress_min_nested) * n ? 1 : 0,
                                         std::memory_order_relaxed);
  }
}

// At a thread's top-level call: the open collective ends here; a collective starts.
void time_collective(ThreadState& ts, const OpInfo& op) {
  const int64_t now = now_ns();
  if (ts.collective_t0) {
    bump(ts.collectives.load(std::memory_order_relaxed)->ns[ts.collective_stage], static_cast<uint64_t>(now - ts.collective_t0));
    ts.collective_t0 = 0;
  }
  if (!op.collective) return;
  CollectiveTimes* c = ts.collectives.load(std::memory_order_relaxed);
  if (!c) ts.collectives.store(c = new CollectiveTimes, std::memory_order_release);
  ts.collective_stage = top_stage(*ts.stages);
  if (op.collective == 1) bump(c->calls[ts.collective_stage]);
  ts.collective_t0 = now;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Global& G = *g_installed;
  if (!G.active.load(std::memory_order_relaxed)) return nullptr;
  try {
    ThreadState* ts = thread_state();
    const uint64_t epoch = G.epoch.load(std::memory_order_relaxed);
    if (ts->epoch != epoch) {  // recording restarted: frames of the last window are stale
      for (uint32_t d = 0; d < ts->depth && d < kMaxDepth; ++d)
        if (ts->frames[d].recorded && ts->frames[d].sample) G.hooks.load(std::memory_order_relaxed)->abandon(ts->frames[d].sample);
      ts->epoch = epoch;
      ts->depth = 0;
      ts->key.truncate(0);
      ts->collective_t0 = 0;  // nor is a collective left open then timed across the pause
    }
    if (ts->depth > 0 && !G.options.nested) {  // inside a top-level call: only pair start and end
      ++ts->frames[0].nested;  // into the thread's nested_seen at the top-level call's end
      const uint32_t depth = ts->depth++;
      if (depth >= kMaxDepth) {
        G.drop_depth.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
      }
      ts->frames[depth].fn = &fn;
      ts->frames[depth].recorded = false;
      ts->frames[depth].sample = nullptr;
      return nullptr;
    }
    OpInfo* op = find_op(ts, fn);
    if (!op) return nullptr;  // a named scope, not an operator: calls inside it stay top-level
    const uint32_t depth = ts->depth++;
    if (depth >= kMaxDepth) {
      G.drop_depth.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    if (depth == 0 && C10_UNLIKELY((ts->collective_t0 != 0) | (op->collective != 0))) time_collective(*ts, *op);
    Frame& f = ts->frames[depth];
    f.fn = &fn;
    f.op = op;
    f.recorded = false;
    f.traced = false;
    f.nested = 0;
    f.sample = nullptr;
    if (const CompileTracing tracing = compile_tracing(fn); C10_UNLIKELY(tracing != CompileTracing::None)) {
      bump(ts->traced[static_cast<int>(tracing)]);  // compile time: no row, no sample, no stage interval
      f.traced = true;
      return nullptr;
    }
    bump(ts->calls_seen);
    const StageId stage = top_stage(*ts->stages);
    if (C10_UNLIKELY(G.stage_timing.load(std::memory_order_relaxed) != nullptr) &&
        ts->stages->changes != ts->timed_changes)  // published by enable_sampling while calls run: acquire it
      begin_stage_interval(*G.stage_timing.load(std::memory_order_acquire), *ts, fn, stage);
    if (!is_selected(op, stage) || (C10_UNLIKELY(G.skips_warm_up) && in_warm_up(G))) {
      if (depth == 0) suppress_below(ts, fn, op);  // its nested calls cost the boxing all the same
      return nullptr;
    }
    f.stage = stage;
    f.key_begin = static_cast<uint32_t>(ts->key.size());
    const auto inputs = fn.inputs();
    uint64_t* head = ts->key.reserve(2);
    head[0] = reinterpret_cast<uintptr_t>(op);
    head[1] = stage | static_cast<uint64_t>(inputs.size()) << 16;
    ts->key.commit(2);
    append_keys(inputs.data(), inputs.size(), ts->key);
    f.input_end = static_cast<uint32_t>(ts->key.size());
    const uint64_t* key = ts->key.data() + f.key_begin;
    const size_t words = f.input_end - f.key_begin;
    const uint64_t h = hash_words(key, words);
    if (const uint32_t* entry = ts->inputs.find(h, key, words)) {
      f.entry = *entry;
    } else {  // first sighting of these inputs: their JSON now, while the boxed inputs exist
      f.entry = static_cast<uint32_t>(ts->entries.size());
      ts->entries.push_back(InputEntry{build_arguments(op->schema, inputs), {}, nullptr});
      if (G.sampler.load(std::memory_order_acquire)) ts->entries.back().sample = sample_key(*op, ts->entries.back().arguments, stage);
      ts->inputs.insert(h, key, words, f.entry);
    }
    f.recorded = true;
    f.sample = nullptr;
    if (SampleKey* k = ts->entries[f.entry].sample; k && k->active.load(std::memory_order_relaxed) &&
                                                   G.sampler.load(std::memory_order_relaxed)->due(k))
      f.sample = begin_sample(k, *op, inputs, stage);
    if (depth == 0) suppress_below(ts, fn, op);  // after the sampled call's hooks (which run with RecordFunction off)
    if (G.options.call_records) f.t0 = now_ns();
  } catch (...) {
    G.drop_error.fetch_add(1, std::memory_order_relaxed);
  }
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  ThreadState* ts = t_state;
  if (!ts) return;
  Global& G = *g_installed;
  int64_t t1 = 0;
  // First, before any early return (a restart may have reset the frames): the
  // thread's RecordFunction back on. The call's end time before that.
  if (C10_UNLIKELY(ts->suppressed_rf == &fn)) {
    if (G.options.call_records) t1 = now_ns();
    ts->suppressed_rf = nullptr;
    const ForkGateSection gate;
    at::enableRecordFunction(true);
  }
  if (ts->depth == 0) return;
  if (ts->depth > kMaxDepth) {
    --ts->depth;
    return;
  }
  Frame& f = ts->frames[ts->depth - 1];
  if (f.fn != &fn) return;  // not an operator we counted
  --ts->depth;
  if (kFakeFactoriesUnseenAtStart && f.recorded &&
      C10_UNLIKELY(has_fake_tensor(c10::ArrayRef<c10::IValue>(fn.outputs().data(), fn.outputs().size())))) {
    // A factory traced on fake tensors (the mode unseen at its start: torch before 2.2): compile time after all.
    bump(ts->traced[static_cast<int>(CompileTracing::FakeTensorOutputs)]);
    ts->calls_seen.store(ts->calls_seen.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    ts->key.truncate(f.key_begin);
    if (f.sample) G.hooks.load(std::memory_order_relaxed)->abandon(f.sample);
    f.sample = nullptr;
    f.recorded = false;
    f.traced = true;
  }
  if (ts->depth == 0) {  // a top-level call: its nested calls into the thread's total, and into learning
    if (f.nested) bump(ts->nested_seen, f.nested);
    if (C10_UNLIKELY(f.op->suppress.load(std::memory_order_relaxed) < 0) && !f.traced) learn_nested_calls(G, f.op, f.nested);
  }
  if (!f.recorded) return;
  try {
    if (G.options.call_records && !t1) t1 = now_ns();
    const auto& outs = fn.outputs();
    ts->key.push(outs.size());
    append_keys(outs.data(), outs.size(), ts->key);
    const uint64_t* key = ts->key.data() + f.key_begin;
    const size_t words = ts->key.size() - f.key_begin;
    const uint64_t* out = key + (f.input_end - f.key_begin);
    const size_t out_words = ts->key.size() - f.input_end;
    uint32_t id = 0;
    bool found = false;
    for (const auto& [seen, seen_id] : ts->entries[f.entry].outputs) {
      if (seen.size() == out_words && same_words(seen.data(), out, out_words)) {
        id = seen_id;
        found = true;
        break;
      }
    }
    if (!found) found = resolve_signature(ts, f, key, words, fn, id);
    ts->key.truncate(f.key_begin);
    if (!found) {
      if (f.sample) G.hooks.load(std::memory_order_relaxed)->abandon(f.sample);
      return;
    }
    count_call(ts, id);
    uint64_t seq = 0;
    if (f.sample) {
      seq = G.seq.fetch_add(1, std::memory_order_relaxed);
      void* token = f.sample;
      f.sample = nullptr;
      G.hooks.load(std::memory_order_relaxed)->end(token, c10::ArrayRef<const c10::IValue>(outs.data(), outs.size()), id, seq);
    } else if (G.options.call_records) {
      seq = G.seq.fetch_add(1, std::memory_order_relaxed);
    }
    if (!G.options.call_records) return;
    if (!ts->buffer && !ts->buffer_requested) {
      ts->buffer_requested = true;
      ts->buffer = G.sink->register_thread_buffer(G.options.buffer_records);
    }
    if (!ts->buffer) {
      G.drop_no_buffer.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const format::CallRecord rec{seq, f.t0, t1, id, ts->tid, ts->depth};
    for (;;) {
      const auto pushed = ts->buffer->push(rec);
      if (pushed == runtime::RecordBuffer::Push::kPushed) break;
      if (pushed == runtime::RecordBuffer::Push::kReachedHalf) {
        G.sink->on_buffer_half_full();
        break;
      }
      if (!G.sink->on_buffer_full()) {
        G.drop_buffer_full.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    }
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
  new (&G.threads_mu) std::mutex();
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

namespace {

// Nested calls seen, top-level calls suppressed below and compile-time calls, every thread, live and exited.
Global::SideTotals side_totals(Global& G) {
  std::lock_guard<std::mutex> lock(G.threads_mu);
  Global::SideTotals t = G.retired_side;
  for (const ThreadState* ts : G.threads) t.add(*ts);
  return t;
}

}  // namespace

RecorderStats recorder_stats() {
  Global& G = g();
  RecorderStats s;
  {
    std::lock_guard<std::mutex> lock(G.threads_mu);
    s.calls_seen = G.retired_seen;
    for (const ThreadState* ts : G.threads) s.calls_seen += ts->calls_seen.load(std::memory_order_relaxed);
  }
  const Global::SideTotals side = side_totals(G);
  s.nested_seen = side.nested_seen;
  s.nested_suppressed = side.nested_suppressed;
  for (uint64_t n : signature_totals(G)) s.calls_recorded += n;  // every recorded call is counted once
  s.signatures = G.next_id.load(std::memory_order_relaxed);
  s.dropped = G.drop_depth.load() + G.drop_no_buffer.load() + G.drop_table_full.load() + G.drop_error.load() +
              G.drop_buffer_full.load();
  return s;
}

format::CountsSnapshot recorder_counts() {
  Global& G = g();
  format::CountsSnapshot snap;
  const std::vector<uint64_t> totals = signature_totals(G);
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
  const Global::SideTotals side = side_totals(G);
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
