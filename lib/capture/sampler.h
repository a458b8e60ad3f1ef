// Which calls are sampled (snapshots, inline counters): one policy for both.
// Decided in the start callback, before the op runs, on the input side of the
// signature (op, stage, args, kwargs: the "input key", identified across
// processes by the SHA-256 of its canonical JSON); the sample is filed under
// the full signature at the end. Default: every input key once per launch,
// by whichever process reaches it first (an exclusive claim in the run
// directory through a ClaimBroker that api wires to the sink); or
// hash(key) mod world_size picks the rank (ranks sharing no directory); or
// each process on its own. Rules: skip the first N calls of a key, then every
// M-th, with a seeded probability, the first K samples; chosen (stage, op).
// An input key with several signatures (nonzero, unique, masked_select) is
// sampled again while one of its signatures has no sample (bounded attempts).
//
// A key wants evidence (a snapshot, counters or both) and keeps wanting what
// no call has given it: a refused call (a budget, copies in flight, a meta or
// CPU call where a GPU is used, a busy counter window...) leaves the key to a
// later call, after a backoff (the key's next try waits until its calls have
// doubled), so that no refusal is final and retries stay logarithmic in the
// calls. Each refusal is reported once per key, evidence and reason. With
// claims, a key kept in part goes back to the launch: its claim released
// partial, naming what is missing, for whichever process claims it next.
//
// Hot path: a recorded call whose key has nothing left to sample costs one
// relaxed load of SampleKey::active. No torch, no I/O here (the broker's
// claim, once per key and taken attempt, is the one file operation on the
// calling thread; and its release, where a claim taken over leaves nothing
// this process takes).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "format/op_selection.h"
#include "format/records.h"

namespace lingprobe::capture {

enum class Coordination { Claims, Hash, None };

// What a sample can hold (bits). kTiming: the kernels' durations by CUPTI
// Activity alone, on a later call than the counters' (a counter window's
// kernel replay lengthens what it times; Activity cannot time a kernel under
// the range profiler), so a key's counters come first and its timing from
// its next call; never both on one call.
enum Evidence : uint8_t { kSnapshot = 1, kCounters = 2, kTiming = 4 };
// "snapshot", "counters", "timing", "snapshot+counters", "snapshot+timing", "sample"
const char* evidence_name(uint8_t evidence);

// Why a due call is refused before it is taken: it runs where no evidence
// is (meta or fake tensors; a CPU call where only GPU calls are sampled), or
// it would be timed right after a counter window ended on its GPU
// (gpu/window_settle.h). Such a refusal costs no claim and, for a key's
// first 64 calls, sets no backoff: the key's next call that runs on real
// memory, or on the GPU, is taken; later ones back off (calls 64, 128, 256,
// ...). The one after a window never backs off, and a key is refused it at
// most kAfterWindowRefusals times (a key that always follows a new key's
// window, in a decode loop whose attention keys change every token, is then
// timed there).
enum class CallRefusal : uint8_t { None = 0, NoStorage = 1, NotOnGpu = 2, AfterCounterWindow = 4 };
const char* call_refusal_name(CallRefusal why);  // "no_storage", "not_on_gpu", "after_counter_window"

struct SamplingOptions {
  bool enabled = false;          // LINGPROBE_SNAPSHOTS or LINGPROBE_PROFILE
  uint8_t evidence = kSnapshot;  // what each key wants (kSnapshot, kCounters, both)
  uint64_t first = 1;            // samples per input key per launch (K)
  uint64_t skip = 0;             // calls of each key skipped first, in each process (N)
  uint64_t every = 1;            // then every M-th call
  double probability = 1.0;      // of those, each with this probability (seeded)
  uint64_t seed = 0;
  format::OpSelection selection;  // which (stage, op) may be sampled; default everything recorded
  Coordination coordination = Coordination::Claims;
  uint32_t extra_signature_attempts = 8;  // per key, to find its other signatures
  int64_t poll_interval_ms = 2000;        // the claims poll's pace (tests: 0)
  // LINGPROBE_SAMPLE_PLAN (capture/sample_plan): only these input keys are
  // sampled; null: every key the selection allows.
  std::shared_ptr<const std::set<std::string>> plan;
};

// Cross-process coordination of one launch (the sink's claims directory).
class ClaimBroker {
 public:
  virtual ~ClaimBroker() = default;
  enum class Outcome { Owned, HeldElsewhere, Unavailable };
  // The calling thread, once per key and taken attempt (file I/O). Owned:
  // `still_missing` holds the Evidence bits that the claim taken over left
  // (another process's partial one), else every bit.
  virtual Outcome claim_key(const std::string& input_sha, uint8_t& still_missing) = 0;
  // The owner lets the key go: done (others leave it), partial (others may
  // take the `missing` evidence, which this process could not: its own byte
  // budget spent, say), failed (nothing taken: others may try it all).
  enum class Release { Done, Partial, Failed };
  virtual void release_key(const std::string& input_sha, Release how, uint64_t bytes, uint8_t missing) = 0;
  // The writer thread's poll: where the key's claim stands in the launch.
  enum class KeyProgress { InProgress, Done, Free };  // Free: its claimer failed, died or left it partial
  virtual KeyProgress key_progress(const std::string& input_sha) = 0;
  // A sample of this signature (sha256 hex) exists in the launch.
  virtual bool signature_sampled(const std::string& signature_sha) = 0;
};

enum class KeyState : uint8_t {
  Candidate,      // not claimed by this process now (never, or its claim let go with evidence still missing)
  Owned,          // this process samples it
  Reopened,       // sampled, but one of its signatures has no sample yet
  HeldElsewhere,  // another process owns it (polled: it may die or fail)
  OtherRank,      // hash coordination: another rank's
  Done,           // nothing left to sample here
  Stopped,        // no call can give it what it wants (each evidence settled without a sample)
};

struct SampleKey {
  std::atomic<bool> active{true};      // the hot path's one load
  std::atomic<bool> in_flight{false};  // one sample of a key at a time per process
  std::atomic<uint64_t> calls{0};
  std::atomic<uint64_t> retry_at{0};   // after a refusal: no try before the key's calls reach this
  std::atomic<uint8_t> missing{0};     // evidence still wanted (Evidence bits)
  std::atomic<uint8_t> early_seen{0};  // CallRefusal bits already reported (the calling thread's check, no lock)
  // A call's device copies (inputs and outputs) where they could never fit the device budget: the key's next
  // sampled call takes the host route (capture/snapshot_capture) with a buffer that holds them. 0: not seen.
  std::atomic<uint64_t> device_copy_bytes{0};
  std::atomic<int> device_copy_device{-1};  // the CUDA device of those copies' outputs
  std::atomic<uint8_t> after_window_refusals{
      0};  // CallRefusal::AfterCounterWindow so far (at most kAfterWindowRefusals)
  std::string input_sha, op, stage;
  uint64_t hash = 0;
  std::atomic<KeyState> state{KeyState::Candidate};  // written under Sampler's mutex
  // Under Sampler's mutex:
  uint64_t taken = 0;
  uint32_t attempts_left = 0;
  bool holds_claim = false;  // this process's claim of the key is open (released once, done or failed)
  // What the launch still misses of the key, as far as this process knows: what the claim it took over left
  // (every bit where it took none over), less what this process got. A released claim publishes it.
  uint8_t inherited = 0xff;
  uint8_t got = 0;
  std::set<uint32_t> seen_signatures, sampled_signatures;  // process-local signature ids
  std::string stop_reason;
  std::string last_refusal;                 // "evidence:reason" of the latest refused call
  std::set<std::string> refusals_reported;  // "evidence:reason", each reported once
};

enum class SampleResult {
  Kept,       // stored under its signature (`got` says what it holds)
  Duplicate,  // that signature already has a sample in the launch: discarded
  Refused,    // nothing stored (a budget, capture, OOM, write error...): the key waits for a later call
};

// Where refusals go (api: a "refusal" record), once per key, evidence and
// reason; called on the refusing thread, outside the sampler's lock.
using RefusalSink =
    std::function<void(const SampleKey& key, const char* evidence, const std::string& reason, uint64_t call)>;

struct SamplingStats {
  uint64_t keys = 0, sampled = 0, samples = 0;  // what stays unsampled and why: unsampled_reasons()
};

class Sampler {
 public:
  void configure(const SamplingOptions& options, ClaimBroker* broker, int64_t rank, int64_t world_size);
  bool enabled() const { return options_.enabled; }
  void set_rank(int64_t rank, int64_t world_size);

  // A thread's first sighting of an input key; nullptr when the key is never
  // sampled (sampling off, op or stage not chosen).
  SampleKey* key_for(const std::string& input_sha, const std::string& op, const std::string& op_with_overload,
                     const std::string& stage);
  void set_refusal_sink(RefusalSink sink);
  // The start callback of a call of `key` whose `active` was true: do the
  // rules (skip, every, probability, a refusal's backoff) pick this call?
  // Lock-free.
  bool due(SampleKey* key);
  // A due call the hooks refused before it was taken: no claim is made and,
  // within the key's first 64 calls, no backoff set; the first refusal of
  // each kind is reported (the later ones cost one relaxed load).
  void refused_early(SampleKey* key, CallRefusal why);
  // May the key's due call still be refused for following a counter window?
  static bool may_refuse_after_window(const SampleKey* key);
  static constexpr uint8_t kAfterWindowRefusals = 3;
  // A due call: take it (one at a time per key, the launch's claim made).
  bool take(SampleKey* key);
  // What a taken call should capture: the evidence the key still misses, or
  // everything once it misses nothing (further samples, LINGPROBE_SAMPLE_FIRST);
  // never timing while counters are asked for (a later call times the key).
  uint8_t wanted(const SampleKey* key) const;
  // A refusal of `evidence` for `reason` at a taken call (reported once per
  // key, evidence and reason); the call's finished() follows.
  void note_refusal(SampleKey* key, uint8_t evidence, const std::string& reason);
  // The end of a taken call: `got` is the evidence stored, `settled` the
  // evidence no later call can give (a collective's counters, a dtype no
  // snapshot holds), so that the key stops wanting it. A call that kept only
  // its timing is no sample (SamplingStats, LINGPROBE_SAMPLE_FIRST).
  void finished(SampleKey* key, uint32_t signature_id, const std::string& signature_sha, SampleResult result,
                uint64_t bytes, uint8_t got, uint8_t settled = 0);
  // A reopened key's call (one of its signatures unsampled) whose signature is one it has a sample of: its evidence
  // would repeat that sample (SAMPLE_FIRST's samples are the key's first calls, never a reopened key's).
  bool repeats_a_sample(SampleKey* key, uint32_t signature_id);
  // A thread's first sighting of (key, signature).
  void on_signature(SampleKey* key, uint32_t signature_id, const std::string& signature_sha);
  // The writer thread: keys whose claimer failed or died become claimable;
  // held keys whose owner is done but left a signature this process sees
  // unsampled reopen (never while the owner is still at work). At most every
  // 2 s and 64 keys a time, so that its file reads never hold up a flush.
  void poll();

  SamplingStats stats() const;
  // The plan's keys no call of this process has met (empty without a plan).
  std::vector<std::string> plan_unmet() const;
  // For counts records: what stays unsampled and why ({"reason": keys}).
  std::map<std::string, uint64_t> unsampled_reasons() const;

 private:
  void set_state(SampleKey* key, KeyState state);
  void back_off(SampleKey* key, uint64_t call);
  static bool has_unsampled_signature(const SampleKey& key);  // under mu_
  void reopen(SampleKey* key);  // under mu_: sampled again for a signature it has no sample of
  bool take_over(SampleKey* key, uint8_t still_missing);  // under mu_
  // Records "evidence:reason" on the key (under mu_); true the first time.
  bool first_refusal(SampleKey* key, uint8_t evidence, const std::string& reason);
  void report(const SampleKey& key, uint8_t evidence, const std::string& reason);
  SamplingOptions options_;
  RefusalSink refusal_sink_;
  ClaimBroker* broker_ = nullptr;
  std::atomic<int64_t> rank_{0}, world_size_{1};
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<SampleKey>> keys_;
  std::unordered_map<uint32_t, std::string> signature_sha_;  // process-local id -> sha256
  uint64_t samples_ = 0;
  int64_t last_poll_ns_ = 0;
  size_t poll_cursor_ = 0;
};

}  // namespace lingprobe::capture
