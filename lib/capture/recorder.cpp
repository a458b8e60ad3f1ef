#include "capture/recorder.h"

#include "capture/torch_guard.h"

#include <ATen/record_function.h>
#include <torch/version.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <unordered_map>
#include <vector>

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
  explicit OpInfo(c10::FunctionSchema s) : schema(std::move(s)) {
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
  uint32_t key_begin;
  uint32_t input_end;
  StageId stage;
  bool recorded;
};

struct KeyedArgs {
  std::string key;
  format::JsonValue arguments;
};
struct KeyedId {
  std::string key;
  uint32_t id;
};

struct ThreadState {
  uint64_t epoch = 0;
  uint32_t depth = 0;
  uint32_t tid = 0;
  Frame frames[kMaxDepth];
  std::string arena;  // binary keys of open recorded frames, back to back
  std::unordered_map<const char*, OpInfo*> ops;
  std::unordered_multimap<uint64_t, KeyedArgs> arguments;  // input key -> args JSON (first sighting)
  std::unordered_multimap<uint64_t, KeyedId> ids;          // full key -> signature id
  format::RecordBuffer* buffer = nullptr;
  bool buffer_requested = false;
};

struct Global {
  std::mutex mu;
  RecorderOptions options;
  RecorderSink* sink = nullptr;
  at::CallbackHandle handle = 0;
  bool installed = false;
  std::unordered_map<const char*, OpInfo*> ops;           // under mu; never freed
  std::unordered_map<std::string, uint32_t> signatures;   // full key -> id, under mu
  std::atomic<uint64_t>* counts[kMaxChunks] = {};
  std::atomic<uint32_t> next_id{0};
  std::atomic<bool> active{false};
  std::atomic<uint64_t> epoch{1};
  std::atomic<uint64_t> seq{0};
  std::atomic<uint64_t> calls_seen{0};
  std::atomic<uint64_t> calls_recorded{0};
  std::atomic<int64_t> started_ns{0};
  std::atomic<uint64_t> warmup_seen{0};
  std::atomic<uint64_t> drop_depth{0};
  std::atomic<uint64_t> drop_no_buffer{0};
  std::atomic<uint64_t> drop_table_full{0};
  std::atomic<uint64_t> drop_error{0};
  std::atomic<uint64_t> drop_buffer_full{0};
};

Global& g() {
  static Global* instance = new Global;  // never destroyed: callbacks may run during exit
  return *instance;
}

thread_local ThreadState* t_state = nullptr;

struct ThreadStateOwner {
  ~ThreadStateOwner() {
    if (t_state) {
      if (t_state->buffer) t_state->buffer->close();
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
  ts->arena.reserve(4096);
  (void)&t_owner;  // instantiate the owner so the state is freed at thread exit
  t_state = ts;
  return ts;
}

OpInfo* find_op(ThreadState* ts, const at::RecordFunction& fn) {
  const char* name = fn.name();
  auto it = ts->ops.find(name);
  if (it != ts->ops.end()) return it->second;
  auto schema = fn.operator_schema();
  if (!schema) return nullptr;  // a named scope, not an operator: ignored
  Global& G = g();
  OpInfo* op;
  {
    std::lock_guard<std::mutex> lock(G.mu);
    auto git = G.ops.find(name);
    if (git != G.ops.end()) {
      op = git->second;
    } else {
      op = new OpInfo(std::move(*schema));
      G.ops.emplace(name, op);
    }
  }
  ts->ops.emplace(name, op);
  return op;
}

bool is_selected(OpInfo* op, StageId stage) {
  int8_t s = op->selected[stage].load(std::memory_order_relaxed);
  if (s >= 0) return s == 1;
  Global& G = g();
  const bool yes = G.options.selection.selected(op->name, op->with_overload, stage_name(stage));
  op->selected[stage].store(yes ? 1 : 0, std::memory_order_relaxed);
  return yes;
}

std::atomic<uint64_t>* counter(uint32_t id) {
  Global& G = g();
  const size_t chunk = id / kChunk;
  if (chunk >= kMaxChunks) return nullptr;
  std::atomic<uint64_t>* c = G.counts[chunk];
  return c ? &c[id % kChunk] : nullptr;
}

// First sighting of a full key in this thread: find or assign the id.
bool resolve_signature(ThreadState* ts, const Frame& f, uint64_t input_hash, const char* key, size_t key_size,
                       uint64_t full_hash, const at::RecordFunction& fn, uint32_t& id_out) {
  Global& G = g();
  std::string full(key, key_size);
  std::lock_guard<std::mutex> lock(G.mu);
  auto it = G.signatures.find(full);
  if (it == G.signatures.end()) {
    const uint32_t id = G.next_id.load(std::memory_order_relaxed);
    const size_t chunk = id / kChunk;
    if (chunk >= kMaxChunks) {
      G.drop_table_full.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (!G.counts[chunk]) {
      auto* c = new std::atomic<uint64_t>[kChunk];
      for (size_t i = 0; i < kChunk; ++i) c[i].store(0, std::memory_order_relaxed);
      G.counts[chunk] = c;
    }
    const format::JsonValue* arguments = nullptr;
    auto range = ts->arguments.equal_range(input_hash);
    for (auto a = range.first; a != range.second; ++a)
      if (a->second.key.size() == f.input_end - f.key_begin &&
          std::memcmp(a->second.key.data(), key, a->second.key.size()) == 0)
        arguments = &a->second.arguments;
    if (!arguments) return false;
    const auto& outs = fn.outputs();
    format::JsonValue sig =
        assemble_signature(f.op->dotted, *arguments,
                           build_output(f.op->schema, c10::ArrayRef<const c10::IValue>(outs.data(), outs.size())),
                           stage_name(f.stage));
    const std::string text = format::canonical_json(sig);
    G.next_id.store(id + 1, std::memory_order_relaxed);
    it = G.signatures.emplace(std::move(full), id).first;
    G.sink->on_new_signature(id, format::sha256_hex(text), text);
  }
  ts->ids.emplace(full_hash, KeyedId{it->first, it->second});
  id_out = it->second;
  return true;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Global& G = g();
  if (!G.active.load(std::memory_order_relaxed)) return nullptr;
  try {
    ThreadState* ts = thread_state();
    const uint64_t epoch = G.epoch.load(std::memory_order_relaxed);
    if (ts->epoch != epoch) {  // recording restarted: frames of the last window are stale
      ts->epoch = epoch;
      ts->depth = 0;
      ts->arena.clear();
    }
    OpInfo* op = find_op(ts, fn);
    if (!op) return nullptr;
    const uint32_t depth = ts->depth++;
    if (depth >= kMaxDepth) {
      G.drop_depth.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    Frame& f = ts->frames[depth];
    f.fn = &fn;
    f.recorded = false;
    if (depth > 0 && !G.options.nested) return nullptr;
    G.calls_seen.fetch_add(1, std::memory_order_relaxed);
    const StageId stage = current_stage();
    if (!is_selected(op, stage)) return nullptr;
    if (G.options.skip_calls && G.warmup_seen.fetch_add(1, std::memory_order_relaxed) < G.options.skip_calls)
      return nullptr;
    if (G.options.skip_seconds > 0 &&
        now_ns() - G.started_ns.load(std::memory_order_relaxed) < static_cast<int64_t>(G.options.skip_seconds * 1e9))
      return nullptr;
    f.op = op;
    f.stage = stage;
    f.key_begin = static_cast<uint32_t>(ts->arena.size());
    append_key_u64(reinterpret_cast<uintptr_t>(op), ts->arena);
    append_key_u64(stage, ts->arena);
    const auto inputs = fn.inputs();
    append_key_u64(inputs.size(), ts->arena);
    for (const auto& v : inputs) append_key(v, ts->arena);
    f.input_end = static_cast<uint32_t>(ts->arena.size());
    const char* key = ts->arena.data() + f.key_begin;
    const size_t key_size = f.input_end - f.key_begin;
    const uint64_t h = hash_key(key, key_size);
    bool known = false;
    auto range = ts->arguments.equal_range(h);
    for (auto a = range.first; a != range.second && !known; ++a)
      known = a->second.key.size() == key_size && std::memcmp(a->second.key.data(), key, key_size) == 0;
    if (!known) ts->arguments.emplace(h, KeyedArgs{std::string(key, key_size), build_arguments(op->schema, inputs)});
    f.recorded = true;
    if (G.options.call_records) f.t0 = now_ns();
  } catch (...) {
    G.drop_error.fetch_add(1, std::memory_order_relaxed);
  }
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext*) {
  ThreadState* ts = t_state;
  if (!ts || ts->depth == 0) return;
  Global& G = g();
  if (ts->depth > kMaxDepth) {
    --ts->depth;
    return;
  }
  Frame& f = ts->frames[ts->depth - 1];
  if (f.fn != &fn) return;  // not an operator we counted
  --ts->depth;
  if (!f.recorded) return;
  try {
    const int64_t t1 = G.options.call_records ? now_ns() : 0;
    const auto& outs = fn.outputs();
    append_key_u64(outs.size(), ts->arena);
    for (const auto& v : outs) append_key(v, ts->arena);
    const char* key = ts->arena.data() + f.key_begin;
    const size_t key_size = ts->arena.size() - f.key_begin;
    const uint64_t h = hash_key(key, key_size);
    uint32_t id = 0;
    bool found = false;
    auto range = ts->ids.equal_range(h);
    for (auto it = range.first; it != range.second && !found; ++it) {
      if (it->second.key.size() == key_size && std::memcmp(it->second.key.data(), key, key_size) == 0) {
        id = it->second.id;
        found = true;
      }
    }
    if (!found) {
      const uint64_t ih = hash_key(key, f.input_end - f.key_begin);
      found = resolve_signature(ts, f, ih, key, key_size, h, fn, id);
    }
    ts->arena.resize(f.key_begin);
    if (!found) return;
    if (auto* c = counter(id)) c->fetch_add(1, std::memory_order_relaxed);
    G.calls_recorded.fetch_add(1, std::memory_order_relaxed);
    if (!G.options.call_records) return;
    if (!ts->buffer && !ts->buffer_requested) {
      ts->buffer_requested = true;
      ts->buffer = G.sink->register_thread_buffer(G.options.buffer_records);
    }
    if (!ts->buffer) {
      G.drop_no_buffer.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    const format::CallRecord rec{G.seq.fetch_add(1, std::memory_order_relaxed), f.t0, t1, id, ts->tid,
                                 ts->depth};
    while (!ts->buffer->push(rec)) {
      if (!G.sink->on_buffer_full()) {
        G.drop_buffer_full.fetch_add(1, std::memory_order_relaxed);
        break;
      }
    }
  } catch (...) {
    ts->arena.resize(f.key_begin);
    G.drop_error.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace

std::string install_recorder(const RecorderOptions& options, RecorderSink* sink) {
  Global& G = g();
  std::lock_guard<std::mutex> lock(G.mu);
  if (G.installed) return "";
  G.options = options;
  G.sink = sink;
  G.handle = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                       .needsInputs(true)
                                       .needsOutputs(true)
                                       .scopes({at::RecordScope::FUNCTION}));
  at::disableCallback(G.handle);
  G.installed = true;
  return "";
}

void set_recording(bool on) {
  Global& G = g();
  std::lock_guard<std::mutex> lock(G.mu);
  if (!G.installed || G.active.load(std::memory_order_relaxed) == on) return;
  if (on) {
    G.epoch.fetch_add(1, std::memory_order_relaxed);
    G.started_ns.store(now_ns(), std::memory_order_relaxed);
    G.warmup_seen.store(0, std::memory_order_relaxed);
    G.active.store(true, std::memory_order_relaxed);
    at::reenableCallback(G.handle);
  } else {
    at::disableCallback(G.handle);
    G.active.store(false, std::memory_order_relaxed);
  }
}

bool recording() { return g().active.load(std::memory_order_relaxed); }

void uninstall_recorder() {
  Global& G = g();
  std::lock_guard<std::mutex> lock(G.mu);
  if (!G.installed) return;
  G.active.store(false, std::memory_order_relaxed);
  at::removeCallback(G.handle);
  G.installed = false;
}

RecorderStats recorder_stats() {
  Global& G = g();
  RecorderStats s;
  s.calls_seen = G.calls_seen.load(std::memory_order_relaxed);
  s.calls_recorded = G.calls_recorded.load(std::memory_order_relaxed);
  s.signatures = G.next_id.load(std::memory_order_relaxed);
  s.dropped = G.drop_depth.load() + G.drop_no_buffer.load() + G.drop_table_full.load() + G.drop_error.load() +
              G.drop_buffer_full.load();
  return s;
}

format::CountsSnapshot recorder_counts() {
  Global& G = g();
  format::CountsSnapshot snap;
  const uint32_t n = G.next_id.load(std::memory_order_relaxed);
  for (uint32_t id = 0; id < n; ++id) {
    auto* c = counter(id);
    if (c) snap.calls.emplace_back(id, c->load(std::memory_order_relaxed));
  }
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
  return snap;
}

std::string torch_version() { return TORCH_VERSION; }

}  // namespace lingprobe::capture
