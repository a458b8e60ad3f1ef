#include "capture/snapshot_capture.h"

#include "capture/torch_guard.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/record_function.h>
#include <c10/core/InferenceMode.h>
#include <torch/version.h>

#include <algorithm>
#include <exception>
#include <sstream>

#include "capture/call_window.h"
#include "capture/math_policy.h"
#include "capture/setup_calls.h"
#include "capture/tensor_copy.h"
#include "capture/signature_builder.h"
#include "capture/snapshot_cost.h"
#include "capture/snapshot_document.h"
#include "format/scope_guard.h"
#include "runtime/snapshot_job.h"

namespace lingprobe::capture {

using format::PickleValue;

// What a snapshot holds for one argument: a copied tensor or the value (a reference until end()).
struct SnapshotCapture::Captured {
  bool copied = false;  // written by the op: copied before it ran
  c10::IValue value;    // the input (or, if copied, the tensors' copies: see tensors)
  std::vector<CopiedTensor> tensors;
};

struct SnapshotCapture::Pending {
  std::unique_ptr<CounterWindow> window;  // open while the op runs
  uint8_t window_evidence = 0;            // kCounters or kTiming: what the window gives
  int window_device = -1;                 // the CUDA device of the window
  // A timed call's status, set on the writer's thread when it completes (close_window): why it was not kept.
  std::shared_ptr<std::string> timing_status;
  SampleKey* key = nullptr;
  bool snapshot = false;  // this call's tensors are copied
  bool setup = false;     // a set-up call (construction, loading): its share of the budgets
  uint8_t settled = 0;    // evidence no later call could give (Evidence bits)
  const c10::FunctionSchema* schema = nullptr;
  std::string op;
  StageId stage = kUnstaged;
  std::vector<Captured> args;
  std::vector<int64_t> written;
  PickleValue math_policy;
  uint64_t reserved = 0;             // budget bytes taken (process, run)
  uint64_t device_bytes = 0;         // of the inputs' copies
  bool device = false;               // CUDA tensors involved
  std::shared_ptr<HostBuffer> host;  // a call too large for the device budget: where its device copies go
  int uncaught = 0;                  // std::uncaught_exceptions() at the op's start: more at its end, and the op raised
};

SnapshotCapture::SnapshotCapture(Sampler* sampler, SnapshotSink* sink, RunBudget* run_budget, DeviceAccess* device,
                                 SnapshotOptions options)
    : sampler_(sampler),
      sink_(sink),
      device_(device),
      options_(std::move(options)),
      budgets_(options_.budget_process, options_.budget_device, options_.profile_budget_s, run_budget),
      rank_(options_.rank) {}

bool SnapshotCapture::reserve(uint64_t bytes, uint64_t device_bytes, bool setup, std::string& reason) {
  const char* refused = budgets_.reserve(bytes, device_bytes, setup);
  if (refused) reason = refused;
  return !refused;
}

namespace {

// Evidence that no later call of the key could give either: counters the
// machine or the op cannot have, a snapshot of what no snapshot holds.
bool settles(uint8_t evidence, const std::string& reason) {
  if (evidence == kCounters || evidence == kTiming) return window_refusal_settles(reason);
  return reason == "unsupported_layout" || reason == "unsupported_dtype" || reason == "unsupported_device" ||
         reason == "unsupported_argument" || reason == "no_gpu_access" || reason == "too_large";
}

// The reason a copy or window that threw is refused for: the device's memory, or anything else.
const char* copy_failure(const std::exception& e) {
  return dynamic_cast<const c10::OutOfMemoryError*>(&e) ? "device_oom" : "copy_error";
}

}  // namespace

void SnapshotCapture::refuse(Pending& p, uint8_t evidence, const std::string& reason) {
  if (evidence == kCounters || evidence == kTiming)
    drops_.window(reason, evidence == kTiming);
  else
    drops_.snapshot(reason);
  if (p.key) sampler_->note_refusal(p.key, evidence, reason);
  // A key that can have no counters has nothing to time either.
  if (settles(evidence, reason)) p.settled |= evidence == kCounters ? kCounters | kTiming : evidence;
}

void SnapshotCapture::give_up(std::unique_ptr<Pending> p) {
  if (p->key) sampler_->finished(p->key, 0, "", SampleResult::Refused, 0, 0, p->settled);
}

CallRefusal SnapshotCapture::refusal(const SampledCall& call) {
  // a call that also takes a snapshot is timed all the same
  const bool timing_only = options_.profile && call.key && sampler_->wanted(call.key) == kTiming;
  return early_refusal(call, options_.gpu_calls_only, timing_only, device_);
}

// What the call's inputs would cost a snapshot, and why none can be taken ("" when one can).
TensorsCost SnapshotCapture::inputs_cost(const SampledCall& call) const {
  TensorsCost cost = tensors_cost(call.inputs, device_);
  if (cost.reason.empty() && !std::all_of(call.inputs.begin(), call.inputs.end(), replayable_value))
    cost.reason = "unsupported_argument";  // a snapshot that no replay could rebuild: counters may still be taken
  if (cost.reason.empty() && cost.bytes > options_.max_snapshot_bytes) cost.reason = "too_large";
  return cost;
}

void* SnapshotCapture::begin(const SampledCall& call) {
  std::unique_ptr<Pending> p;
  try {
    p = std::make_unique<Pending>();
  } catch (...) {
    drops_.snapshot("internal_error");
    if (call.key) sampler_->finished(call.key, 0, "", SampleResult::Refused, 0, 0);
    return nullptr;
  }
  p->key = call.key;
  p->uncaught = std::uncaught_exceptions();
  p->schema = call.schema;
  p->op = *call.op_dotted;
  p->stage = call.stage;
  const uint8_t wants =
      call.key ? sampler_->wanted(call.key)
               : static_cast<uint8_t>((options_.snapshots ? kSnapshot : 0) | (options_.profile ? kCounters : 0));
  bool snapshot = options_.snapshots && (wants & kSnapshot);
  const bool counters = options_.profile && (wants & kCounters);
  const bool timing = options_.profile && (wants & kTiming);
  try {
    TensorsCost cost = inputs_cost(call);
    if (cost.capturing) {  // neither copies nor a window while a graph is captured
      refuse(*p, wants, "stream_capturing");
      give_up(std::move(p));
      return nullptr;
    }
    p->setup = is_setup_call(call);
    const uint64_t bytes = cost.bytes, device_bytes = cost.device_bytes;
    std::string& reason = cost.reason;
    const uint64_t host_route =
        snapshot && reason.empty() && device_ ? host_route_bytes(p->key, cost, options_.budget_device) : 0;
    if (snapshot && (!reason.empty() || !reserve(bytes, host_route ? 0 : device_bytes, p->setup, reason) ||
                     (host_route && !(p->host = device_->take_host_buffer(host_route))))) {
      if (host_route && reason.empty()) {  // the budgets took the bytes, and no pinned buffer was ready: ask
        budgets_.give_back(bytes, p->setup);
        ask_for_host_buffer(*device_, p->key, cost, options_.max_snapshot_bytes);
        reason = "budget_device";
      }
      refuse(*p, kSnapshot, reason);
      snapshot = false;
    }
    if (!snapshot && !counters && !timing) {
      give_up(std::move(p));
      return nullptr;
    }
    p->snapshot = snapshot;
    p->reserved = snapshot ? bytes : 0;
    p->device_bytes = snapshot ? device_bytes : 0;
    p->device = snapshot && device_bytes > 0;
    p->math_policy = current_math_policy();
    if (snapshot) copy_written_arguments(*p, call);  // a failed copy refuses the snapshot alone
    snapshot = p->snapshot;
    if (counters || timing) open_window(*p, call, counters ? kCounters : kTiming);
  } catch (const std::exception& e) {
    if (!p) return nullptr;  // given up already (the throw came after)
    budgets_.give_back(p->reserved, p->setup);
    // what the call was still taking: a snapshot refused before the throw is counted once
    if (const uint8_t taking = (snapshot ? kSnapshot : 0) | (counters ? kCounters : timing ? kTiming : 0))
      refuse(*p, taking, copy_failure(e));
    give_up(std::move(p));
    return nullptr;
  }
  if (!p->snapshot && !p->window) {  // the window was refused (reported) and there is nothing to copy
    give_up(std::move(p));
    return nullptr;
  }
  return p.release();
}

// Written arguments now; the others by reference, copied in end(). An argument that shares memory with a written
// one (x.add_(x), out=b) changes too: copied before as well. A copy that fails (device memory, a transfer) refuses
// the snapshot alone, its bytes given back: the call's counters need no copy (issue 26), the key's snapshot waits.
void SnapshotCapture::copy_written_arguments(Pending& p, const SampledCall& call) {
  try {
    copy_written_arguments_or_throw(p, call);
  } catch (const std::exception& e) {
    budgets_.give_back(p.reserved, p.setup);
    p.reserved = 0;
    p.snapshot = p.device = false;
    p.args.clear();
    p.written.clear();
    p.host.reset();
    refuse(p, kSnapshot, copy_failure(e));
  }
}

void SnapshotCapture::copy_written_arguments_or_throw(Pending& p, const SampledCall& call) {
  const auto& params = call.schema->arguments();
  const bool matches = params.size() == call.inputs.size();
  at::RecordFunctionGuard no_observers(false);
  c10::InferenceMode inference;
  std::shared_ptr<void> relaxed = p.device ? device_->relax_capture_mode() : nullptr;
  std::vector<at::Tensor> written_tensors;
  if (matches)
    for (size_t i = 0; i < call.inputs.size(); ++i)
      if (is_written(params[i]))
        for_each_tensor(call.inputs[i], [&](const at::Tensor& t) {
          if (t.defined()) written_tensors.push_back(t);
        });
  auto aliases_written = [&](const c10::IValue& v) {
    bool alias = false;
    for_each_tensor(v, [&](const at::Tensor& t) {
      for (const auto& w : written_tensors) alias = alias || (t.defined() && t.is_alias_of(w));
    });
    return alias;
  };
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    Captured c;
    c.value = call.inputs[i];
    if (matches && (is_written(params[i]) || aliases_written(call.inputs[i]))) {
      c.copied = true;
      p.written.push_back(static_cast<int64_t>(i));
      for_each_tensor(call.inputs[i], [&](const at::Tensor& t) {
        if (t.defined()) c.tensors.push_back(copy_tensor(t, device_, &budgets_.device_in_flight(), p.host.get()));
      });
    }
    p.args.push_back(std::move(c));
  }
}

void SnapshotCapture::end(void* token, c10::ArrayRef<const c10::IValue> outputs, uint32_t signature_id, uint64_t seq) {
  std::unique_ptr<Pending> p(static_cast<Pending*>(token));
  SampleKey* key = p->key;
  const int counters_on = p->window && p->window_evidence == kCounters ? p->window_device : -1;
  format::ScopeGuard ended([&] {  // lingprobe's own end of the call done: the GPU idle from here (window_settle)
    if (counters_on >= 0) device_->counter_call_ended(counters_on);
  });
  try {
    // The op raised: its end runs while the exception unwinds, with no outputs, nothing a replay could match. The
    // exception count sees it on torch 1.13, not on torch 2.11's wheel (docs/gpu/snapshots-raised-check-h100-
    // 2026-12-05.txt): there an op with returns that ends without outputs is the sign (set only on return).
    const bool raised =
        std::uncaught_exceptions() > p->uncaught || (p->schema && ended_without_outputs(*p->schema, outputs));
    if (raised) return drop(std::move(p), "raised");
    if (key && sampler_->repeats_a_sample(key, signature_id)) {  // a reopened key met a sampled signature
      undo(*p);
      return sampler_->finished(key, signature_id, "", SampleResult::Duplicate, 0, 0);
    }
    finish(std::move(p), outputs, signature_id, seq);
  } catch (...) {  // never into torch; the key must not stay in flight
    drops_.snapshot("internal_error");
    if (key) sampler_->finished(key, 0, "", SampleResult::Refused, 0, 0);
  }
}

// A counter window closes here, on the op's thread. A timing window only stops: the writer's thread completes it
// (gpu/counter_windows: nothing waits for the device at the op's end), through job.complete_timing.
void SnapshotCapture::close_window(Pending& p, runtime::SnapshotJob& job) {
  format::JsonValue identity = format::JsonValue::object();
  identity.set("math_policy", policy_json(p.math_policy));
  identity.set("setup_call", format::JsonValue::boolean(p.setup));
  if (p.window_evidence == kTiming) {
    p.window->stop();
    job.timed = true;
    p.timing_status = std::make_shared<std::string>();
    job.complete_timing = [this, window = std::shared_ptr<CounterWindow>(std::move(p.window)), setup = p.setup,
                           identity = std::move(identity), status = p.timing_status] {
      format::ProfileData data = window->close();
      budgets_.charge_window(data.window_seconds, setup);
      for (const auto& [k, v] : identity.members()) data.identity.set(k, v);
      *status = data.status;
      return data;
    };
    return;
  }
  job.profiled = true;
  job.profile = p.window->close();
  p.window.reset();
  budgets_.charge_window(job.profile.window_seconds, p.setup);
  for (const auto& [k, v] : identity.members()) job.profile.identity.set(k, v);
  if (job.profile.status != "passed") refuse(p, kCounters, job.profile.status);
}

void SnapshotCapture::finish(std::unique_ptr<Pending> p, c10::ArrayRef<const c10::IValue> outputs,
                             uint32_t signature_id, uint64_t seq) {
  runtime::SnapshotJob job;
  if (p->window) close_window(*p, job);  // first, so that lingprobe's own copies stay outside the window
  job.snapshot = p->snapshot;
  if (!p->snapshot) {  // counters or timing only (a refused snapshot, or snapshots off)
    if (!job.profiled && !job.timed) return give_up(std::move(p));
    submit(std::move(p), std::move(job), signature_id, seq);
    return;
  }
  // A snapshot that cannot be completed still leaves the counters to keep.
  auto without_snapshot = [&](const std::string& reason) {
    job.blobs.clear();
    budgets_.give_back(p->reserved, p->setup);
    p->reserved = 0;
    refuse(*p, kSnapshot, reason);
    if (!job.profiled && !job.timed) return give_up(std::move(p));
    job.snapshot = false;
    submit(std::move(p), std::move(job), signature_id, seq);
  };
  try {
    const TensorsCost out = tensors_cost(outputs, device_);  // factory ops and to(cuda): CUDA outputs only
    uint64_t out_bytes = out.bytes;
    std::string reason = out.reason.empty() && out.capturing ? "stream_capturing" : out.reason;
    if (reason.empty() && p->reserved + out_bytes > options_.max_snapshot_bytes) reason = "too_large";
    const uint64_t room = p->host ? p->host->size() : options_.budget_device;  // for inputs and outputs together
    if (reason.empty() && !outputs_fit(device_, p->key, p->device_bytes, out, room, options_.max_snapshot_bytes))
      reason = "budget_device";
    if (reason.empty() && !reserve(out_bytes, p->host ? 0 : out.device_bytes, p->setup, reason)) out_bytes = 0;
    if (!reason.empty()) return without_snapshot(reason);
    p->reserved += out_bytes;
    p->device = p->device || out.device_bytes;
    job.document = snapshot_document(*p, outputs, seq, job.blobs);
  } catch (const c10::OutOfMemoryError&) {
    if (p) without_snapshot("device_oom");  // else it ran already and the throw came after
    return;
  } catch (const std::exception&) {
    if (p) without_snapshot("copy_error");
    return;
  }
  submit(std::move(p), std::move(job), signature_id, seq);
}

format::PickleValue SnapshotCapture::snapshot_document(Pending& p, c10::ArrayRef<const c10::IValue> outputs,
                                                       uint64_t seq,
                                                       std::vector<std::unique_ptr<format::BlobSource>>& blobs) {
  at::RecordFunctionGuard no_observers(false);
  c10::InferenceMode inference;
  std::shared_ptr<void> relaxed = p.device ? device_->relax_capture_mode() : nullptr;
  ValueWriter write{&blobs, &budgets_.device_in_flight(), device_, p.host.get()};
  const auto& params = p.schema->arguments();
  const bool matches = params.size() == p.args.size();
  PickleValue args = PickleValue::list(), kwargs = PickleValue::dict();
  for (size_t i = 0; i < p.args.size(); ++i) {
    Captured& c = p.args[i];
    PickleValue v = write(c.value, matches ? params[i].real_type() : nullptr, c.copied ? &c.tensors : nullptr);
    if (matches && params[i].kwarg_only())
      kwargs.set(params[i].name(), std::move(v));
    else
      args.push_back(std::move(v));
  }
  PickleValue output = write.outputs(outputs, p.schema->returns());
  std::ostringstream schema_text;
  schema_text << *p.schema;
  SnapshotFacts facts{p.op,
                      p.schema->name(),
                      p.schema->overload_name(),
                      schema_text.str(),
                      p.key ? p.key->input_sha : "",
                      stage_name(p.stage),
                      options_.run_id,
                      TORCH_VERSION};
  facts.rank = rank_.load();
  facts.seq = seq;
  facts.math_policy = p.math_policy;
  facts.setup_call = p.setup;
  facts.fold_scalars = options_.fold_scalars;
  facts.written_args = p.written;
  return capture::snapshot_document(facts, std::move(args), std::move(kwargs), std::move(output));
}

void SnapshotCapture::submit(std::unique_ptr<Pending> p, runtime::SnapshotJob job, uint32_t signature_id,
                             uint64_t seq) {
  job.signature_id = signature_id;
  job.seq = seq;
  job.stage = stage_name(p->stage);
  job.rank = rank_.load();
  for (const auto& b : job.blobs) job.bytes += b->nbytes();
  // The device bytes were reserved up front; the blobs give them back as they stream.
  const uint64_t reserved = p->reserved;
  const bool setup = p->setup;
  const uint8_t settled = p->settled;
  const uint8_t asked =
      static_cast<uint8_t>((job.snapshot ? kSnapshot : 0) | (job.profiled ? kCounters : 0) | (job.timed ? kTiming : 0));
  const bool counters_passed = job.profiled && job.profile.status == "passed";
  SampleKey* key = p->key;
  std::shared_ptr<std::string> timing_status = p->timing_status;
  Sampler* sampler = sampler_;
  SnapshotCapture* self = this;
  job.done = [=](runtime::SnapshotJob::Result r, const std::string& what, const std::string& sha, uint8_t kept) {
    using Result = runtime::SnapshotJob::Result;
    if (r == Result::Kept) {
      const bool snapshot_kept = kept & runtime::SnapshotJob::kKeptSnapshot;
      if (!snapshot_kept) self->budgets_.give_back(reserved, setup);
      const bool timing_kept = kept & runtime::SnapshotJob::kKeptTiming;   // the writer keeps only a passed one
      if ((asked & kTiming) && !timing_kept && !timing_status->empty()) {  // failed (a snapshot or counters kept)
        self->drops_.window(*timing_status, true);
        if (key) sampler->note_refusal(key, kTiming, *timing_status);
      }
      const uint8_t got =
          static_cast<uint8_t>((snapshot_kept ? kSnapshot : 0) |
                               (counters_passed && (kept & runtime::SnapshotJob::kKeptProfile) ? kCounters : 0) |
                               (timing_kept ? kTiming : 0));
      sampler->finished(key, signature_id, sha, SampleResult::Kept, snapshot_kept ? reserved : 0, got,
                        settled | self->elsewhere(kept));
      return;
    }
    self->budgets_.give_back(reserved, setup);
    if (r == Result::Duplicate) {
      self->elsewhere(kept);  // counted per kind
      sampler->finished(key, signature_id, sha, SampleResult::Duplicate, 0, 0, settled);
    } else {
      if (asked & kSnapshot)
        self->drops_.snapshot(what);
      else
        self->drops_.window(what, asked == kTiming);
      if (key) sampler->note_refusal(key, asked, what);
      sampler->finished(key, signature_id, sha, SampleResult::Refused, 0, 0, settled);
    }
  };
  sink_->submit(std::move(job));
}

// The kinds of evidence of a job that another process of the launch had
// already (counted as duplicates; settled for the key: the process that holds
// a signature's counters times it too).
uint8_t SnapshotCapture::elsewhere(uint8_t kept) {
  uint8_t settled = 0;
  if (kept & runtime::SnapshotJob::kDuplicateSnapshot) {
    drops_.snapshot("duplicate_signature");
    settled |= kSnapshot;
  }
  if (kept & runtime::SnapshotJob::kDuplicateProfile) {
    drops_.window("duplicate_signature", false);
    settled |= kCounters | kTiming;
  }
  return settled;
}

// The call's counter or timing window (capture/call_window says when none opens).
void SnapshotCapture::open_window(Pending& p, const SampledCall& call, uint8_t evidence) {
  CallWindow w = open_call_window(call, evidence == kTiming, p.setup, options_.gpu_on_machine, budgets_, *device_);
  if (!w.window) {
    refuse(p, evidence, w.refusal);
    if (w.settled) p.settled |= evidence == kCounters ? kCounters | kTiming : evidence;
    return;
  }
  p.window = std::move(w.window);
  p.window_evidence = evidence;
  p.window_device = w.device;
}

void SnapshotCapture::abandon(void* token) {
  drop(std::unique_ptr<Pending>(static_cast<Pending*>(token)), "abandoned");
}

bool SnapshotCapture::undo(Pending& p) {
  budgets_.give_back(p.reserved, p.setup);  // first: a window's close may throw (a sticky CUDA error)
  if (!p.window) return false;
  budgets_.charge_window(p.window->close().window_seconds, p.setup);  // the profiler must not stay started
  p.window.reset();
  return true;
}

void SnapshotCapture::drop(std::unique_ptr<Pending> p, const char* why) {
  // the evidence the call was taking, refused for `why` once per key (a refusal record; the key's reason meanwhile)
  const uint8_t taking = (p->snapshot ? kSnapshot : 0) | (p->window ? p->window_evidence : 0);
  if (undo(*p))
    drops_.window(why, p->window_evidence == kTiming);  // a counter window's close stamps its end (window_settle)
  if (p->snapshot) drops_.snapshot(why);
  if (p->key && taking) sampler_->note_refusal(p->key, taking, why);
  give_up(std::move(p));
}

}  // namespace lingprobe::capture
