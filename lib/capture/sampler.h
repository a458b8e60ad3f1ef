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
// Hot path: a recorded call whose key has nothing left to sample costs one
// relaxed load of SampleKey::active. No torch, no I/O here (the broker's
// claim is the one file operation, once per key and process).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "capture/op_selection.h"
#include "format/records.h"

namespace lingprobe::capture {

enum class Coordination { Claims, Hash, None };

struct SamplingOptions {
  bool enabled = false;       // LINGPROBE_SNAPSHOTS or LINGPROBE_PROFILE
  uint64_t first = 1;         // samples per input key per launch (K)
  uint64_t skip = 0;          // calls of each key skipped first, in each process (N)
  uint64_t every = 1;         // then every M-th call
  double probability = 1.0;   // of those, each with this probability (seeded)
  uint64_t seed = 0;
  OpSelection selection;      // which (stage, op) may be sampled; default everything recorded
  Coordination coordination = Coordination::Claims;
  uint32_t extra_signature_attempts = 8;  // per key, to find its other signatures
  int64_t poll_interval_ms = 2000;        // the claims poll's pace (tests: 0)
};

// Cross-process coordination of one launch (the sink's claims directory).
class ClaimBroker {
 public:
  virtual ~ClaimBroker() = default;
  enum class Outcome { Owned, HeldElsewhere, Unavailable };
  // The calling thread, once per key and process (file I/O).
  virtual Outcome claim_key(const std::string& input_sha) = 0;
  // The owner is done with the key (failed: others may claim it again).
  virtual void release_key(const std::string& input_sha, bool failed, uint64_t bytes) = 0;
  // The writer thread's poll: where the key's claim stands in the launch.
  enum class KeyProgress { InProgress, Done, Free };  // Free: its claimer failed or died
  virtual KeyProgress key_progress(const std::string& input_sha) = 0;
  // A sample of this signature (sha256 hex) exists in the launch.
  virtual bool signature_sampled(const std::string& signature_sha) = 0;
};

enum class KeyState : uint8_t {
  Candidate,      // never claimed by this process
  Owned,          // this process samples it
  Reopened,       // sampled, but one of its signatures has no sample yet
  HeldElsewhere,  // another process owns it (polled: it may die or fail)
  OtherRank,      // hash coordination: another rank's
  Done,           // nothing left to sample here
  Stopped,        // a budget or an error stopped it
};

struct SampleKey {
  std::atomic<bool> active{true};       // the hot path's one load
  std::atomic<bool> in_flight{false};   // one sample of a key at a time per process
  std::atomic<uint64_t> calls{0};
  std::string input_sha, op, stage;
  uint64_t hash = 0;
  std::atomic<KeyState> state{KeyState::Candidate};  // written under Sampler's mutex
  // Under Sampler's mutex:
  uint64_t taken = 0;
  uint32_t attempts_left = 0;
  bool holds_claim = false;  // this process's claim of the key is open (released once, done or failed)
  std::set<uint32_t> seen_signatures, sampled_signatures;  // process-local signature ids
  std::string stop_reason;
};

enum class SampleResult {
  Kept,              // stored under its signature
  Duplicate,         // that signature already has a sample in the launch: discarded
  Dropped,           // a budget, capture, OOM, write error... (counted by whoever dropped it)
  StopProcess,       // as Dropped, and this process samples nothing more (its budget is spent)
};

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
  // The start callback of a call of `key` whose `active` was true: sample it?
  bool decide(SampleKey* key);
  // The end of a sampled call (decide() said yes).
  void finished(SampleKey* key, uint32_t signature_id, const std::string& signature_sha, SampleResult result,
                uint64_t bytes);
  // A thread's first sighting of (key, signature).
  void on_signature(SampleKey* key, uint32_t signature_id, const std::string& signature_sha);
  // The writer thread: keys whose claimer failed or died become claimable;
  // held keys whose owner is done but left a signature this process sees
  // unsampled reopen (never while the owner is still at work). At most every
  // 2 s and 64 keys a time, so that its file reads never hold up a flush.
  void poll();
  // Nothing more is sampled in this process (e.g. its byte budget is spent).
  void stop_all(const std::string& reason);

  SamplingStats stats() const;
  // For counts records: what stays unsampled and why ({"reason": keys}).
  std::map<std::string, uint64_t> unsampled_reasons() const;

 private:
  void set_state(SampleKey* key, KeyState state);
  SamplingOptions options_;
  ClaimBroker* broker_ = nullptr;
  std::atomic<int64_t> rank_{0}, world_size_{1};
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<SampleKey>> keys_;
  std::unordered_map<uint32_t, std::string> signature_sha_;  // process-local id -> sha256
  bool stopped_ = false;
  std::string stop_reason_;
  uint64_t samples_ = 0;
  int64_t last_poll_ns_ = 0;
  size_t poll_cursor_ = 0;
};

}  // namespace lingprobe::capture
