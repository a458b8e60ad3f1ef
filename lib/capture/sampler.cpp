#include "capture/sampler.h"

#include <algorithm>
#include <cstring>
#include <ctime>
#include <vector>

namespace lingprobe::capture {
namespace {

constexpr uint64_t kEarlyCallsWithoutBackoff = 64;

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t hash_of_hex(const std::string& hex) {
  uint64_t h = 0;
  for (size_t i = 0; i < 16 && i < hex.size(); ++i) {
    const char c = hex[i];
    h = h << 4 | static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
  }
  return h;
}

}  // namespace

void Sampler::configure(const SamplingOptions& options, ClaimBroker* broker, int64_t rank, int64_t world_size) {
  std::lock_guard<std::mutex> lock(mu_);
  options_ = options;
  if (options_.every == 0) options_.every = 1;
  broker_ = broker;
  rank_.store(rank);
  world_size_.store(world_size > 0 ? world_size : 1);
}

void Sampler::set_rank(int64_t rank, int64_t world_size) {
  rank_.store(rank);
  world_size_.store(world_size > 0 ? world_size : 1);
}

void Sampler::set_state(SampleKey* k, KeyState s) {
  k->state = s;
  k->active.store(s == KeyState::Candidate || s == KeyState::Owned || s == KeyState::Reopened,
                  std::memory_order_relaxed);
}

SampleKey* Sampler::key_for(const std::string& input_sha, const std::string& op, const std::string& op_with_overload,
                            const std::string& stage) {
  if (!options_.enabled) return nullptr;
  if (!options_.selection.records_everything() && !options_.selection.selected(op, op_with_overload, stage))
    return nullptr;
  if (options_.plan && !options_.plan->count(input_sha)) return nullptr;
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = keys_[input_sha];
  if (!slot) {
    slot = std::make_unique<SampleKey>();
    slot->input_sha = input_sha;
    slot->op = op_with_overload;
    slot->stage = stage;
    slot->hash = hash_of_hex(input_sha);
    slot->missing.store(options_.evidence, std::memory_order_relaxed);
    set_state(slot.get(), KeyState::Candidate);
  }
  return slot.get();
}

void Sampler::set_refusal_sink(RefusalSink sink) {
  std::lock_guard<std::mutex> lock(mu_);
  refusal_sink_ = std::move(sink);
}

const char* evidence_name(uint8_t e) {
  switch (e) {
    case kSnapshot: return "snapshot";
    case kCounters: return "counters";
    case kTiming: return "timing";
    case kSnapshot | kCounters: return "snapshot+counters";
    case kSnapshot | kTiming: return "snapshot+timing";
    default: return "sample";
  }
}

uint8_t Sampler::wanted(const SampleKey* k) const {
  const uint8_t missing = k->missing.load(std::memory_order_relaxed);
  const uint8_t w = missing ? missing : options_.evidence;
  return (w & kCounters) ? static_cast<uint8_t>(w & ~kTiming) : w;
}

void Sampler::back_off(SampleKey* k, uint64_t call) {
  k->retry_at.store(std::max<uint64_t>(call * 2, call + 1), std::memory_order_relaxed);
}

bool Sampler::first_refusal(SampleKey* k, uint8_t evidence, const std::string& reason) {
  const std::string what = std::string(evidence_name(evidence)) + ":" + reason;
  k->last_refusal = what;
  return k->refusals_reported.insert(what).second;
}

void Sampler::report(const SampleKey& k, uint8_t evidence, const std::string& reason) {
  RefusalSink sink;
  {
    std::lock_guard<std::mutex> lock(mu_);
    sink = refusal_sink_;
  }
  if (sink) sink(k, evidence_name(evidence), reason, k.calls.load(std::memory_order_relaxed));
}

const char* call_refusal_name(CallRefusal why) {
  switch (why) {
    case CallRefusal::NoStorage: return "no_storage";
    case CallRefusal::NotOnGpu: return "not_on_gpu";
    case CallRefusal::AfterCounterWindow: return "after_counter_window";
    default: return "none";
  }
}

void Sampler::refused_early(SampleKey* k, CallRefusal why) {
  // The first kEarlyCallsWithoutBackoff calls are each looked at (a key traced on meta, then run on the CPU, then
  // on the GPU is taken at its GPU call); after them a key refused this way backs off like any other.
  const uint64_t n = k->calls.load(std::memory_order_relaxed);
  if (why == CallRefusal::AfterCounterWindow)  // the GPU settles by the key's next call: no backoff, bounded
    k->after_window_refusals.fetch_add(1, std::memory_order_relaxed);
  else if (n >= kEarlyCallsWithoutBackoff)
    back_off(k, n);
  const auto bit = static_cast<uint8_t>(why);
  if (k->early_seen.load(std::memory_order_relaxed) & bit) return;
  k->early_seen.fetch_or(bit, std::memory_order_relaxed);
  note_refusal(k, wanted(k), call_refusal_name(why));
}

bool Sampler::may_refuse_after_window(const SampleKey* k) {
  return k->after_window_refusals.load(std::memory_order_relaxed) < kAfterWindowRefusals;
}

void Sampler::note_refusal(SampleKey* k, uint8_t evidence, const std::string& reason) {
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu_);
    first = first_refusal(k, evidence, reason);
  }
  if (first) report(*k, evidence, reason);
}

bool Sampler::due(SampleKey* k) {
  const uint64_t n = k->calls.fetch_add(1, std::memory_order_relaxed) + 1;
  if (n < k->retry_at.load(std::memory_order_relaxed)) return false;
  const bool reopened = k->state.load(std::memory_order_relaxed) == KeyState::Reopened;
  if (!reopened) {
    if (n <= options_.skip) return false;
    if ((n - options_.skip - 1) % options_.every != 0) return false;
    if (options_.probability < 1.0) {
      const double u = static_cast<double>(mix(options_.seed ^ mix(k->hash ^ n)) >> 11) * 0x1.0p-53;
      if (u >= options_.probability) return false;
    }
  }
  return true;
}

// A claim just taken (under mu_): the key now wants only what the claim it
// took over left missing (another process's partial claim). False where
// that leaves this process nothing to take (the caller lets the claim go).
bool Sampler::take_over(SampleKey* k, uint8_t still_missing) {
  const uint8_t left = k->missing.fetch_and(still_missing, std::memory_order_relaxed) & still_missing;
  if (left == 0 && k->taken == 0) return false;
  k->inherited &= still_missing;
  k->holds_claim = true;
  return true;
}

bool Sampler::take(SampleKey* k) {
  bool expected = false;
  if (!k->in_flight.compare_exchange_strong(expected, true)) return false;
  std::unique_lock<std::mutex> lock(mu_);
  if (k->state == KeyState::Candidate) {
    KeyState next = KeyState::Owned;
    if (options_.coordination == Coordination::Hash) {
      if (static_cast<int64_t>(k->hash % static_cast<uint64_t>(world_size_.load())) != rank_.load())
        next = KeyState::OtherRank;
    } else if (options_.coordination == Coordination::Claims && broker_) {
      lock.unlock();  // file I/O off the sampler's lock
      uint8_t still_missing = 0xff;
      const auto outcome = broker_->claim_key(k->input_sha, still_missing);
      lock.lock();
      if (outcome == ClaimBroker::Outcome::HeldElsewhere) next = KeyState::HeldElsewhere;
      if (outcome == ClaimBroker::Outcome::Unavailable) next = KeyState::Owned;  // no directory: sample here
      if (outcome == ClaimBroker::Outcome::Owned && !take_over(k, still_missing)) {
        next = KeyState::Done;  // the part left is one this process does not take: others still may
        lock.unlock();
        broker_->release_key(k->input_sha, ClaimBroker::Release::Partial, 0, still_missing);
        lock.lock();
      }
    }
    if (k->state == KeyState::Candidate) set_state(k, next);
  }
  const bool go = k->state == KeyState::Owned || k->state == KeyState::Reopened;
  if (!go) k->in_flight.store(false);
  return go;
}

void Sampler::finished(SampleKey* k, uint32_t id, const std::string& sha, SampleResult result, uint64_t bytes,
                       uint8_t got, uint8_t settled) {
  std::unique_lock<std::mutex> lock(mu_);
  k->in_flight.store(false);
  const bool has_signature = result == SampleResult::Kept || result == SampleResult::Duplicate;
  if (has_signature && !sha.empty()) signature_sha_[id] = sha;
  if (has_signature) k->seen_signatures.insert(id);
  uint8_t missing = k->missing.load(std::memory_order_relaxed) & static_cast<uint8_t>(~(got | settled));
  k->got |= got;
  const bool timed_call_only = result == SampleResult::Kept && got == kTiming;  // no sample of its own
  if (result == SampleResult::Kept && !timed_call_only) {
    ++k->taken;
    ++samples_;
    k->sampled_signatures.insert(id);
  } else if (result == SampleResult::Duplicate) {
    // That signature has its evidence in the launch already: for this key's
    // owner that settles it as much as a sample of its own would (else the
    // key would be sampled again at every call).
    k->sampled_signatures.insert(id);
    missing = 0;
    if (k->state == KeyState::Owned) k->taken = std::max<uint64_t>(k->taken, options_.first);
  }
  k->missing.store(missing, std::memory_order_relaxed);
  // A kept call that leaves only the timing to take (its counters just kept) is followed by the key's next call:
  // the writer thread reports it after later calls went by, which a backoff from here would skip.
  if (result == SampleResult::Refused || (result == SampleResult::Kept && missing && missing != kTiming))
    back_off(k, k->calls.load());
  if (k->state == KeyState::Reopened) {
    if (k->attempts_left > 0) --k->attempts_left;
    if (!has_unsampled_signature(*k) || k->attempts_left == 0) set_state(k, KeyState::Done);
  } else if (k->state == KeyState::Owned) {
    // a key whose parts came from two processes counts as one sample (SAMPLE_FIRST above 1 included)
    if (missing == 0 && (k->taken >= options_.first || k->inherited != 0xff)) {
      set_state(k, KeyState::Done);
      // a signature first seen while this sample was in flight (on_signature reopens only a done key)
      if (has_unsampled_signature(*k) && options_.extra_signature_attempts > 0) reopen(k);
    } else if (missing == 0 && k->taken == 0) {  // settled without any evidence: no call can give it
      k->stop_reason = k->last_refusal.empty() ? "settled" : k->last_refusal;
      set_state(k, KeyState::Stopped);
    } else if (k->taken == 0 && result == SampleResult::Refused) {
      set_state(k, KeyState::Candidate);  // a later call claims it again (others may take it meanwhile)
    } else if (k->holds_claim && (missing & ~kTiming) &&
               (result == SampleResult::Refused || result == SampleResult::Kept)) {
      // Kept in part, or refused after a part: the snapshot or counters still
      // missing (this process's own byte budget spent, say) are left to any
      // process, this one included, that claims the key at a later call.
      set_state(k, KeyState::Candidate);
    }
  }
  // The claim is released when the key is settled here (done or stopped),
  // when a refused key gives it up (failed: others may try it), when a part
  // is left to others (partial), or when only the timing is left: that follows
  // the counters in the process that holds the claim, so the key is done for others.
  const bool release = k->holds_claim && ((k->state != KeyState::Owned && k->state != KeyState::Reopened) ||
                                          result == SampleResult::Kept);
  // What the launch still misses: evidence settled here (no GPU access on this host, say) may come elsewhere.
  const uint8_t launch_missing = static_cast<uint8_t>(options_.evidence & k->inherited & ~k->got);
  ClaimBroker::Release how = ClaimBroker::Release::Done;
  if (k->state == KeyState::Candidate || (k->state == KeyState::Stopped && launch_missing))
    how = k->got || k->inherited != 0xff ? ClaimBroker::Release::Partial : ClaimBroker::Release::Failed;
  else if (k->taken == 0)
    how = ClaimBroker::Release::Failed;
  if (release) k->holds_claim = false;
  const std::string input = k->input_sha;
  lock.unlock();
  if (release && broker_) broker_->release_key(input, how, bytes, launch_missing);
}

void Sampler::reopen(SampleKey* k) {
  if (k->attempts_left == 0) k->attempts_left = options_.extra_signature_attempts;  // a key's attempts, not a reopen's
  set_state(k, KeyState::Reopened);
}

bool Sampler::has_unsampled_signature(const SampleKey& k) {
  for (uint32_t s : k.seen_signatures)
    if (!k.sampled_signatures.count(s)) return true;
  return false;
}

bool Sampler::repeats_a_sample(SampleKey* k, uint32_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  return k->state == KeyState::Reopened && k->sampled_signatures.count(id) > 0;
}

void Sampler::on_signature(SampleKey* k, uint32_t id, const std::string& sha) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!sha.empty()) signature_sha_[id] = sha;
  if (!k->seen_signatures.insert(id).second || k->sampled_signatures.count(id)) return;
  if (k->state == KeyState::Done && k->taken == 0) {  // another process's key: let the poll look again
    set_state(k, KeyState::HeldElsewhere);
  } else if (k->state == KeyState::Done && k->taken > 0 && options_.extra_signature_attempts > 0) {
    reopen(k);
  }
}

void Sampler::poll() {
  if (!broker_ || options_.coordination != Coordination::Claims) return;
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t now = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  std::vector<SampleKey*> held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (now - last_poll_ns_ < options_.poll_interval_ms * 1000000) return;
    last_poll_ns_ = now;
    std::vector<SampleKey*> all;
    for (auto& [sha, k] : keys_)
      if (k->state == KeyState::HeldElsewhere) all.push_back(k.get());
    for (size_t i = 0; i < all.size() && held.size() < 64; ++i) held.push_back(all[(poll_cursor_ + i) % all.size()]);
    poll_cursor_ += held.size();
  }
  for (SampleKey* k : held) {
    const auto progress = broker_->key_progress(k->input_sha);
    if (progress == ClaimBroker::KeyProgress::Free) {
      std::lock_guard<std::mutex> lock(mu_);
      if (k->state == KeyState::HeldElsewhere) set_state(k, KeyState::Candidate);
      continue;
    }
    if (progress == ClaimBroker::KeyProgress::InProgress) continue;  // its samples are still being written
    // The owner may be done with a signature that this process sees and nobody sampled.
    std::vector<std::string> shas;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (uint32_t s : k->seen_signatures)
        if (!k->sampled_signatures.count(s) && signature_sha_.count(s)) shas.push_back(signature_sha_[s]);
    }
    bool missing = false;
    for (const auto& s : shas) missing = missing || !broker_->signature_sampled(s);
    if (missing) {
      std::lock_guard<std::mutex> lock(mu_);
      if (k->state == KeyState::HeldElsewhere && k->attempts_left == 0) reopen(k);
    } else {  // the owner is done and every signature seen here has its sample: stop polling this key
      std::lock_guard<std::mutex> lock(mu_);
      for (uint32_t s : k->seen_signatures) k->sampled_signatures.insert(s);
      if (k->state == KeyState::HeldElsewhere) set_state(k, KeyState::Done);
    }
  }
}

SamplingStats Sampler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SamplingStats s;
  s.keys = keys_.size();
  s.samples = samples_;
  for (const auto& [sha, k] : keys_) s.sampled += k->taken > 0;
  return s;
}

std::vector<std::string> Sampler::plan_unmet() const {
  std::vector<std::string> unmet;
  if (!options_.plan) return unmet;
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& sha : *options_.plan)
    if (!keys_.count(sha)) unmet.push_back(sha);
  return unmet;
}

std::map<std::string, uint64_t> Sampler::unsampled_reasons() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, uint64_t> out;
  for (const auto& [sha, k] : keys_) {
    if (k->taken > 0) {
      bool missing = false;
      for (uint32_t s : k->seen_signatures) missing = missing || !k->sampled_signatures.count(s);
      if (missing) ++out["signature_never_sampled"];
      continue;
    }
    switch (k->state) {
      case KeyState::HeldElsewhere:
      case KeyState::Done: ++out["sampled_by_another_process"]; break;
      case KeyState::OtherRank: ++out["owned_by_another_rank"]; break;
      case KeyState::Stopped: ++out[k->stop_reason.empty() ? "stopped" : k->stop_reason]; break;
      case KeyState::Candidate: ++out[k->last_refusal.empty() ? "rule_skip_every_probability" : k->last_refusal]; break;
      default: ++out["in_progress"]; break;
    }
  }
  return out;
}

}  // namespace lingprobe::capture
