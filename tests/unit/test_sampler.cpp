// The sampling policy without torch or files: rules (skip, every, first K,
// probability), claims through a fake broker, the hot path's `active` flag,
// keys with several signatures, refusals that leave a key to a later call
// (with their backoff and their once-per-reason reports), the poll.
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <string>

#include "capture/sampler.h"

using namespace lingprobe::capture;

namespace {

struct FakeBroker : ClaimBroker {
  std::map<std::string, int> owner;  // input sha -> process (this test's "pid")
  std::map<std::string, KeyProgress> progress;
  std::set<std::string> signatures;
  int me = 1;
  std::map<std::string, uint8_t> left;  // a partial release's missing evidence
  std::vector<Release> releases;
  Outcome claim_key(const std::string& sha, uint8_t& still_missing) override {
    still_missing = 0xff;
    auto it = owner.find(sha);
    const bool free = progress.count(sha) && progress[sha] == KeyProgress::Free;
    if (it != owner.end() && it->second != me && !free) return Outcome::HeldElsewhere;
    if (left.count(sha)) still_missing = left[sha];
    owner[sha] = me;
    progress[sha] = KeyProgress::InProgress;
    return Outcome::Owned;
  }
  void release_key(const std::string& sha, Release how, uint64_t, uint8_t missing) override {
    releases.push_back(how);
    progress[sha] = how == Release::Done ? KeyProgress::Done : KeyProgress::Free;
    if (how == Release::Partial) left[sha] = missing;
  }
  KeyProgress key_progress(const std::string& sha) override {
    auto it = progress.find(sha);
    return it == progress.end() ? KeyProgress::InProgress : it->second;
  }
  bool signature_sampled(const std::string& sha) override { return signatures.count(sha) > 0; }
};

const std::string kKey = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

// The recorder's order: the rules, then the claim.
bool decide(Sampler& s, SampleKey* k) { return s.due(k) && s.take(k); }

SamplingOptions on() {
  SamplingOptions o;
  o.enabled = true;
  o.poll_interval_ms = 0;
  return o;
}

}  // namespace

TEST_CASE("sampler: off means no key at all; a chosen op only", "[sampler]") {
  Sampler off;
  off.configure(SamplingOptions{}, nullptr, 0, 1);
  CHECK(off.key_for(kKey, "aten::mm", "aten::mm", "dit") == nullptr);
  SamplingOptions o = on();
  REQUIRE(o.selection.parse("vae:aten::conv3d", "").empty());
  Sampler s;
  s.configure(o, nullptr, 0, 1);
  CHECK(s.key_for(kKey, "aten::mm", "aten::mm", "vae") == nullptr);
  CHECK(s.key_for(kKey, "aten::conv3d", "aten::conv3d", "vae") != nullptr);
  CHECK(s.key_for(kKey, "aten::conv3d", "aten::conv3d", "dit") == nullptr);  // conv3d is chosen in vae only
}

TEST_CASE("sampler: skip N, every M, first K; then the key goes inactive", "[sampler]") {
  SamplingOptions o = on();
  o.skip = 2;
  o.every = 3;
  o.first = 2;
  Sampler s;
  FakeBroker b;
  s.configure(o, &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  std::vector<int> sampled;
  for (int call = 1; call <= 20 && k->active.load(); ++call)
    if (decide(s, k)) {
      sampled.push_back(call);
      s.finished(k, 0, "sig", SampleResult::Kept, 10, kSnapshot);
    }
  CHECK(sampled == std::vector<int>{3, 6});  // calls 3 and 6: skip 2, then every 3rd, two samples
  CHECK_FALSE(k->active.load());
  CHECK(b.progress[kKey] == ClaimBroker::KeyProgress::Done);
  CHECK(s.stats().samples == 2);
}

TEST_CASE("sampler: one sample at a time per key; a key owned elsewhere is not sampled", "[sampler]") {
  Sampler s;
  FakeBroker b;
  s.configure(on(), &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  REQUIRE(decide(s, k));
  CHECK_FALSE(decide(s, k));  // the first is still in flight
  s.finished(k, 0, "sig", SampleResult::Kept, 1, kSnapshot);
  Sampler other;
  FakeBroker* shared = &b;
  shared->me = 2;  // a second process of the launch
  other.configure(on(), shared, 1, 4);
  SampleKey* k2 = other.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  CHECK_FALSE(decide(other, k2));
  CHECK_FALSE(k2->active.load());
  CHECK(other.unsampled_reasons() == std::map<std::string, uint64_t>{{"sampled_by_another_process", 1}});
}

TEST_CASE("sampler: a key whose claimer failed or died is claimed again after the poll", "[sampler]") {
  FakeBroker b;
  b.owner[kKey] = 99;  // a dead process's claim
  b.progress[kKey] = ClaimBroker::KeyProgress::InProgress;
  Sampler s;
  s.configure(on(), &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  CHECK_FALSE(decide(s, k));
  s.poll();
  CHECK_FALSE(k->active.load());  // still in progress: no re-claim
  b.progress[kKey] = ClaimBroker::KeyProgress::Free;
  b.owner.erase(kKey);
  s.poll();
  CHECK(k->active.load());
  CHECK(decide(s, k));
}

TEST_CASE("sampler: a key with a second signature is sampled again until it has one", "[sampler]") {
  Sampler s;
  FakeBroker b;
  s.configure(on(), &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::nonzero", "aten::nonzero", "unstaged");
  REQUIRE(decide(s, k));
  s.on_signature(k, 5, "sigA");
  s.finished(k, 5, "sigA", SampleResult::Kept, 1, kSnapshot);
  CHECK_FALSE(k->active.load());
  s.on_signature(k, 6, "sigB");  // a later call's output gave another signature
  CHECK(k->active.load());
  REQUIRE(decide(s, k));
  // the same one again: a repeat of its sample, not written (capture settles it as a duplicate); keep trying
  CHECK(s.repeats_a_sample(k, 5));
  CHECK_FALSE(s.repeats_a_sample(k, 6));
  s.finished(k, 5, "", SampleResult::Duplicate, 0, 0);
  CHECK(k->active.load());
  REQUIRE(decide(s, k));
  s.finished(k, 6, "sigB", SampleResult::Kept, 1, kSnapshot);
  CHECK_FALSE(k->active.load());
  CHECK(s.unsampled_reasons().empty());
  CHECK_FALSE(s.repeats_a_sample(k, 5));  // done, not reopened: SAMPLE_FIRST's own samples may repeat a signature
}

TEST_CASE("sampler: a signature first seen while the key's sample is in flight reopens the key once it is done",
          "[sampler]") {
  // A loop's next calls outrun the writer: the key's second signature came while its first sample was still being
  // written (state Owned), so on_signature did not reopen it and that signature was never sampled.
  Sampler s;
  FakeBroker b;
  s.configure(on(), &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::nonzero", "aten::nonzero", "unstaged");
  REQUIRE(decide(s, k));
  s.on_signature(k, 5, "sigA");
  s.on_signature(k, 6, "sigB");  // a later call, before the first sample is finished
  s.finished(k, 5, "sigA", SampleResult::Kept, 1, kSnapshot);
  CHECK(k->active.load());  // reopened for sigB
  REQUIRE(decide(s, k));
  s.finished(k, 6, "sigB", SampleResult::Kept, 1, kSnapshot);
  CHECK_FALSE(k->active.load());
}

TEST_CASE("sampler: hash coordination gives each key to one rank", "[sampler]") {
  SamplingOptions o = on();
  o.coordination = Coordination::Hash;
  int owners = 0;
  for (int rank = 0; rank < 4; ++rank) {
    Sampler s;
    s.configure(o, nullptr, rank, 4);
    SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
    owners += decide(s, k) ? 1 : 0;
    if (!k->active.load()) CHECK(s.unsampled_reasons().at("owned_by_another_rank") == 1);
  }
  CHECK(owners == 1);
}

TEST_CASE("sampler: a seeded probability is reproducible", "[sampler]") {
  auto picks = [](uint64_t seed) {
    SamplingOptions o = on();
    o.coordination = Coordination::None;
    o.probability = 0.3;
    o.seed = seed;
    o.first = 1000;
    Sampler s;
    s.configure(o, nullptr, 0, 1);
    SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
    std::vector<int> out;
    for (int i = 0; i < 200; ++i)
      if (decide(s, k)) {
        out.push_back(i);
        s.finished(k, 0, "", SampleResult::Kept, 0, kSnapshot);
      }
    return out;
  };
  const auto a = picks(7), b = picks(7), c = picks(8);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a.size() > 30);
  CHECK(a.size() < 90);
}

TEST_CASE("sampler: a duplicate settles the owner's key (no sampling at every call)", "[sampler]") {
  Sampler s;
  FakeBroker b;
  s.configure(on(), &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  REQUIRE(decide(s, k));
  s.finished(k, 0, "sig", SampleResult::Duplicate, 0, 0);  // another process stored that signature first
  CHECK_FALSE(k->active.load());
  CHECK(b.progress[kKey] == ClaimBroker::KeyProgress::Done);
}

TEST_CASE("sampler: a refused call leaves the key to a later call, tried again after its calls double", "[sampler]") {
  Sampler s;
  FakeBroker b;
  s.configure(on(), &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  std::vector<int> tried;
  for (int call = 1; call <= 100; ++call)
    if (decide(s, k)) {
      tried.push_back(call);
      s.finished(k, 0, "", SampleResult::Refused, 0, 0);          // e.g. copies in flight: nothing stored
      CHECK(b.progress[kKey] == ClaimBroker::KeyProgress::Free);  // released as failed: others may take it
      b.owner.erase(kKey);
    }
  CHECK(tried == std::vector<int>{1, 2, 4, 8, 16, 32, 64});
  CHECK(k->active.load());
  REQUIRE_FALSE(decide(s, k));  // call 101
  for (int call = 102; call < 128; ++call) CHECK_FALSE(decide(s, k));
  REQUIRE(decide(s, k));  // call 128
  s.finished(k, 3, "sig", SampleResult::Kept, 10, kSnapshot);
  CHECK_FALSE(k->active.load());
  CHECK(b.progress[kKey] == ClaimBroker::KeyProgress::Done);
}

TEST_CASE("sampler: a key keeps asking for the evidence a call did not give, and only for it", "[sampler]") {
  SamplingOptions o = on();
  o.evidence = kSnapshot | kCounters;
  Sampler s;
  FakeBroker b;
  s.configure(o, &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  REQUIRE(decide(s, k));
  CHECK(s.wanted(k) == (kSnapshot | kCounters));
  s.finished(k, 1, "sig", SampleResult::Kept, 10, kCounters);  // counters kept; the snapshot refused by a budget
  CHECK(k->active.load());
  CHECK(b.releases.back() == ClaimBroker::Release::Partial);  // the snapshot left to any process, this one too
  CHECK(b.left[kKey] == kSnapshot);
  REQUIRE(decide(s, k));  // call 2 (the refusal at call 1 put the next try at call 2): claimed again
  CHECK(s.wanted(k) == kSnapshot);
  s.finished(k, 1, "sig", SampleResult::Kept, 10, kSnapshot);
  CHECK_FALSE(k->active.load());
  CHECK(b.progress[kKey] == ClaimBroker::KeyProgress::Done);
  CHECK(s.unsampled_reasons().empty());
}

TEST_CASE("sampler: a part one process could not take goes to another process, which takes only that part",
          "[sampler]") {
  SamplingOptions o = on();
  o.evidence = kSnapshot | kCounters | kTiming;
  FakeBroker b;  // the launch's claims, shared by two processes
  Sampler rank0, rank1;
  rank0.configure(o, &b, 0, 2);
  rank1.configure(o, &b, 1, 2);
  SampleKey* k0 = rank0.key_for(kKey, "aten::mm", "aten::mm", "dit");
  SampleKey* k1 = rank1.key_for(kKey, "aten::mm", "aten::mm", "dit");
  b.me = 0;
  REQUIRE(decide(rank0, k0));
  b.me = 1;
  CHECK_FALSE(decide(rank1, k1));  // held by rank 0
  CHECK(k1->state.load() == KeyState::HeldElsewhere);
  // rank 0's own byte budget is spent: its counters are kept, its snapshot refused
  rank0.finished(k0, 1, "sig", SampleResult::Kept, 0, kCounters);
  CHECK(b.releases.back() == ClaimBroker::Release::Partial);
  rank1.poll();  // rank 1 sees the claim free again
  CHECK(k1->state.load() == KeyState::Candidate);
  for (int call = 2; call <= 3 && !rank1.take(k1); ++call) rank1.due(k1);
  CHECK(k1->state.load() == KeyState::Owned);
  CHECK(rank1.wanted(k1) == (kSnapshot | kTiming));  // not the counters again: rank 0 has them
  rank1.finished(k1, 1, "sig", SampleResult::Kept, 10, kSnapshot | kTiming);
  CHECK_FALSE(k1->active.load());
  CHECK(b.releases.back() == ClaimBroker::Release::Done);
}

TEST_CASE("sampler: a part taken over is one sample, and what a taker could not take is left to the launch",
          "[sampler]") {
  SamplingOptions o = on();
  o.evidence = kSnapshot | kCounters | kTiming;
  o.first = 3;  // SAMPLE_FIRST: the key's parts from two processes count as one sample all the same
  FakeBroker b;
  b.left[kKey] = kSnapshot | kTiming;  // rank 0 kept the counters and left the rest
  b.owner[kKey] = 0;
  b.progress[kKey] = ClaimBroker::KeyProgress::Free;
  Sampler rank1;
  rank1.configure(o, &b, 1, 2);
  SampleKey* k = rank1.key_for(kKey, "aten::mm", "aten::mm", "dit");
  REQUIRE(decide(rank1, k));
  CHECK(rank1.wanted(k) == (kSnapshot | kTiming));
  // its snapshot settled here (no GPU access on this host, say), its timing refused: the launch still lacks both
  rank1.finished(k, 1, "sig", SampleResult::Refused, 0, 0, kSnapshot);
  CHECK(b.releases.back() == ClaimBroker::Release::Partial);
  CHECK(b.left[kKey] == (kSnapshot | kTiming));  // before: published without the snapshot it settled for itself

  Sampler rank2;
  rank2.configure(o, &b, 2, 3);
  b.me = 2;
  SampleKey* k2 = rank2.key_for(kKey, "aten::mm", "aten::mm", "dit");
  REQUIRE(decide(rank2, k2));
  rank2.finished(k2, 1, "sig", SampleResult::Kept, 10, kSnapshot | kTiming);
  CHECK_FALSE(k2->active.load());  // done at one sample, not three: the counters are rank 0's
  CHECK(b.releases.back() == ClaimBroker::Release::Done);

  SamplingOptions snapshots_only = on();
  snapshots_only.evidence = kSnapshot;
  b.left[kKey] = kCounters;  // only counters left, and this process takes none
  b.progress[kKey] = ClaimBroker::KeyProgress::Free;
  Sampler rank3;
  rank3.configure(snapshots_only, &b, 3, 4);
  b.me = 3;
  SampleKey* k3 = rank3.key_for(kKey, "aten::mm", "aten::mm", "dit");
  CHECK_FALSE(decide(rank3, k3));
  CHECK(b.releases.back() == ClaimBroker::Release::Partial);  // before: done, for the whole launch
  CHECK(b.left[kKey] == kCounters);
}

TEST_CASE("sampler: a key's timing comes from its next call after its counters, and is no sample", "[sampler]") {
  SamplingOptions o = on();
  o.evidence = kSnapshot | kCounters | kTiming;
  Sampler s;
  FakeBroker b;
  s.configure(o, &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  REQUIRE(decide(s, k));
  CHECK(s.wanted(k) == (kSnapshot | kCounters));                    // never timing on the counters' call
  for (int call = 2; call <= 5; ++call) CHECK_FALSE(decide(s, k));  // in flight: the writer has not reported yet
  s.finished(k, 1, "sig", SampleResult::Kept, 10, kSnapshot | kCounters);
  CHECK(k->active.load());
  REQUIRE(decide(s, k));  // call 6: the next call after the report, not after a backoff from it
  CHECK(s.wanted(k) == kTiming);
  s.finished(k, 1, "sig", SampleResult::Refused, 0, 0);  // a busy window: tried again after the calls double
  for (int call = 7; call < 12; ++call) CHECK_FALSE(decide(s, k));
  REQUIRE(decide(s, k));  // call 12
  s.finished(k, 1, "sig", SampleResult::Kept, 0, kTiming);
  CHECK_FALSE(k->active.load());
  CHECK(s.stats().samples == 1);
  CHECK(s.stats().sampled == 1);
}

TEST_CASE("sampler: counters that no call can have settle the key's timing too", "[sampler]") {
  SamplingOptions o = on();
  o.evidence = kCounters | kTiming;
  Sampler s;
  FakeBroker b;
  s.configure(o, &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "c10d::allreduce_", "c10d::allreduce_", "unstaged");
  REQUIRE(decide(s, k));
  CHECK(s.wanted(k) == kCounters);
  s.finished(k, 0, "", SampleResult::Refused, 0, 0, kCounters | kTiming);  // as the capture settles a collective
  CHECK_FALSE(k->active.load());
}

TEST_CASE("sampler: evidence no call can give settles the key without a sample", "[sampler]") {
  SamplingOptions o = on();
  o.evidence = kCounters;
  Sampler s;
  FakeBroker b;
  s.configure(o, &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "c10d::allreduce_", "c10d::allreduce_", "unstaged");
  REQUIRE(decide(s, k));
  s.note_refusal(k, kCounters, "collective");
  s.finished(k, 0, "", SampleResult::Refused, 0, 0, kCounters);
  CHECK_FALSE(k->active.load());
  CHECK(b.progress[kKey] == ClaimBroker::KeyProgress::Free);
  CHECK(s.unsampled_reasons() == std::map<std::string, uint64_t>{{"counters:collective", 1}});
}

TEST_CASE("sampler: refusals are reported once per key, evidence and reason; early ones claim nothing", "[sampler]") {
  Sampler s;
  FakeBroker b;
  s.configure(on(), &b, 0, 1);
  std::vector<std::string> reports;
  s.set_refusal_sink([&](const SampleKey& key, const char* evidence, const std::string& reason, uint64_t call) {
    reports.push_back(key.op + " " + evidence + " " + reason + " " + std::to_string(call));
  });
  SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  for (int call = 1; call <= 9; ++call) {  // meta calls, then CPU calls where a GPU is used: no backoff
    REQUIRE(s.due(k));
    s.refused_early(k, call < 5 ? CallRefusal::NoStorage : CallRefusal::NotOnGpu);
  }
  CHECK(b.owner.empty());  // no claim was made for calls that could give nothing
  CHECK(reports == std::vector<std::string>{"aten::mm snapshot no_storage 1", "aten::mm snapshot not_on_gpu 5"});
  CHECK(s.unsampled_reasons() == std::map<std::string, uint64_t>{{"snapshot:not_on_gpu", 1}});
  REQUIRE(decide(s, k));  // call 10, the first on the GPU: taken at once
  s.finished(k, 2, "sig", SampleResult::Kept, 10, kSnapshot);
  CHECK(s.unsampled_reasons().empty());
  s.note_refusal(k, kSnapshot, "budget_device");
  s.note_refusal(k, kSnapshot, "budget_device");
  CHECK(reports.size() == 3);  // once per key, evidence and reason
}

TEST_CASE("sampler: a call refused after a counter window leaves the next call due, past 64 calls too, 3 times at most",
          "[sampler]") {
  Sampler s;
  FakeBroker b;
  s.configure(on(), &b, 0, 1);
  std::vector<std::string> reports;
  s.set_refusal_sink([&](const SampleKey&, const char* evidence, const std::string& reason, uint64_t) {
    reports.push_back(std::string(evidence) + ":" + reason);
  });
  SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  for (int call = 1; call <= 100; ++call) REQUIRE(s.due(k));  // a key not yet taken, well past the early calls
  CHECK(std::string(call_refusal_name(CallRefusal::AfterCounterWindow)) == "after_counter_window");
  for (int refusal = 1; refusal <= Sampler::kAfterWindowRefusals; ++refusal) {
    CHECK(Sampler::may_refuse_after_window(k));
    s.refused_early(k, CallRefusal::AfterCounterWindow);
    CHECK(s.due(k));  // no backoff: the GPU has settled by the next call (before: a not_on_gpu here backs off)
  }
  CHECK_FALSE(Sampler::may_refuse_after_window(k));  // the next call is taken after a window all the same
  CHECK(reports == std::vector<std::string>{"snapshot:after_counter_window"});  // once per key
  s.refused_early(k, CallRefusal::NotOnGpu);  // the other early refusals still back off after 64 calls
  CHECK_FALSE(s.due(k));
}

TEST_CASE("sampler: the claims poll keeps its pace", "[sampler]") {
  SamplingOptions o = on();
  o.poll_interval_ms = 60000;
  FakeBroker b;
  b.owner[kKey] = 99;
  Sampler s;
  s.configure(o, &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  CHECK_FALSE(decide(s, k));
  b.progress[kKey] = ClaimBroker::KeyProgress::Free;
  b.owner.erase(kKey);
  s.poll();  // the first poll runs
  CHECK(k->active.load());
}
