// The sampling policy without torch or files: rules (skip, every, first K,
// probability), claims through a fake broker, the hot path's `active` flag,
// keys with several signatures, budgets stopping a process, the poll.
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
  Outcome claim_key(const std::string& sha) override {
    auto it = owner.find(sha);
    if (it != owner.end() && it->second != me) return Outcome::HeldElsewhere;
    owner[sha] = me;
    return Outcome::Owned;
  }
  void release_key(const std::string& sha, bool failed, uint64_t) override {
    progress[sha] = failed ? KeyProgress::Free : KeyProgress::Done;
  }
  KeyProgress key_progress(const std::string& sha) override {
    auto it = progress.find(sha);
    return it == progress.end() ? KeyProgress::InProgress : it->second;
  }
  bool signature_sampled(const std::string& sha) override { return signatures.count(sha) > 0; }
};

const std::string kKey = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

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
    if (s.decide(k)) {
      sampled.push_back(call);
      s.finished(k, 0, "sig", SampleResult::Kept, 10);
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
  REQUIRE(s.decide(k));
  CHECK_FALSE(s.decide(k));  // the first is still in flight
  s.finished(k, 0, "sig", SampleResult::Kept, 1);
  Sampler other;
  FakeBroker* shared = &b;
  shared->me = 2;  // a second process of the launch
  other.configure(on(), shared, 1, 4);
  SampleKey* k2 = other.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  CHECK_FALSE(other.decide(k2));
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
  CHECK_FALSE(s.decide(k));
  s.poll();
  CHECK_FALSE(k->active.load());  // still in progress: no re-claim
  b.progress[kKey] = ClaimBroker::KeyProgress::Free;
  b.owner.erase(kKey);
  s.poll();
  CHECK(k->active.load());
  CHECK(s.decide(k));
}

TEST_CASE("sampler: a key with a second signature is sampled again until it has one", "[sampler]") {
  Sampler s;
  FakeBroker b;
  s.configure(on(), &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::nonzero", "aten::nonzero", "unstaged");
  REQUIRE(s.decide(k));
  s.on_signature(k, 5, "sigA");
  s.finished(k, 5, "sigA", SampleResult::Kept, 1);
  CHECK_FALSE(k->active.load());
  s.on_signature(k, 6, "sigB");  // a later call's output gave another signature
  CHECK(k->active.load());
  REQUIRE(s.decide(k));
  s.finished(k, 5, "sigA", SampleResult::Kept, 1);  // the same one again: keep trying
  CHECK(k->active.load());
  REQUIRE(s.decide(k));
  s.finished(k, 6, "sigB", SampleResult::Kept, 1);
  CHECK_FALSE(k->active.load());
  CHECK(s.unsampled_reasons().empty());
}

TEST_CASE("sampler: hash coordination gives each key to one rank", "[sampler]") {
  SamplingOptions o = on();
  o.coordination = Coordination::Hash;
  int owners = 0;
  for (int rank = 0; rank < 4; ++rank) {
    Sampler s;
    s.configure(o, nullptr, rank, 4);
    SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
    owners += s.decide(k) ? 1 : 0;
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
      if (s.decide(k)) {
        out.push_back(i);
        s.finished(k, 0, "", SampleResult::Kept, 0);
      }
    return out;
  };
  const auto a = picks(7), b = picks(7), c = picks(8);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(a.size() > 30);
  CHECK(a.size() < 90);
}

TEST_CASE("sampler: stop_all deactivates every key, now and later", "[sampler]") {
  Sampler s;
  s.configure(on(), nullptr, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  s.stop_all("budget");
  CHECK_FALSE(k->active.load());
  SampleKey* later = s.key_for(kKey.substr(1) + "0", "aten::mm", "aten::mm", "unstaged");
  CHECK_FALSE(later->active.load());
  CHECK(s.unsampled_reasons().at("budget") == 2);
}

TEST_CASE("sampler: a duplicate settles the owner's key (no sampling at every call)", "[sampler]") {
  Sampler s;
  FakeBroker b;
  s.configure(on(), &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  REQUIRE(s.decide(k));
  s.finished(k, 0, "sig", SampleResult::Duplicate, 0);  // another process stored that signature first
  CHECK_FALSE(k->active.load());
  CHECK(b.progress[kKey] == ClaimBroker::KeyProgress::Done);
}

TEST_CASE("sampler: a claim is released when stop_all stops its key, in flight or not", "[sampler]") {
  Sampler s;
  FakeBroker b;
  s.configure(on(), &b, 0, 1);
  SampleKey* idle = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  SampleKey* busy = s.key_for("ff" + kKey.substr(2), "aten::mm", "aten::mm", "unstaged");
  REQUIRE(s.decide(idle));
  s.finished(idle, 0, "", SampleResult::Dropped, 0);  // failed: released as failed at once
  CHECK(b.progress[kKey] == ClaimBroker::KeyProgress::Free);
  REQUIRE(s.decide(busy));
  s.stop_all("budget");
  CHECK(b.progress.count("ff" + kKey.substr(2)) == 0);  // in flight: not yet
  s.finished(busy, 1, "sig", SampleResult::Kept, 10);
  CHECK(b.progress["ff" + kKey.substr(2)] == ClaimBroker::KeyProgress::Done);
}

TEST_CASE("sampler: the claims poll keeps its pace", "[sampler]") {
  SamplingOptions o = on();
  o.poll_interval_ms = 60000;
  FakeBroker b;
  b.owner[kKey] = 99;
  Sampler s;
  s.configure(o, &b, 0, 1);
  SampleKey* k = s.key_for(kKey, "aten::mm", "aten::mm", "unstaged");
  CHECK_FALSE(s.decide(k));
  b.progress[kKey] = ClaimBroker::KeyProgress::Free;
  b.owner.erase(kKey);
  s.poll();  // the first poll runs
  CHECK(k->active.load());
}
