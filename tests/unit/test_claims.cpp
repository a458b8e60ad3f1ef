// Claims in a real directory: exclusive keys, take-over of a dead claimer's
// key (a real exited child), signature claims, the run byte budget.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "sink/claims.h"
#include "test_support.h"

using namespace lingprobe::sink;

namespace {
const std::string kKey = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
using Kind = Claims::SignatureEvidence;

Claims::Outcome claim(Claims& c, const std::string& key) {
  uint8_t still_missing = 0;
  return c.claim_key(key, still_missing);
}
}  // namespace

TEST_CASE("claims: one owner per key; done and failed states", "[claims]") {
  const std::string dir = lingprobe::test::temp_dir("lpclaims");
  Claims a(dir, 0), b(dir, 1);
  CHECK(a.key_state(kKey) == Claims::KeyState::None);
  CHECK(claim(a, kKey) == Claims::Outcome::Owned);
  CHECK(claim(b, kKey) == Claims::Outcome::Held);
  CHECK(b.key_state(kKey) == Claims::KeyState::InProgress);
  a.release_key(kKey, Claims::Release::Done, 123, 0);
  CHECK(b.key_state(kKey) == Claims::KeyState::Done);
  std::ifstream f(dir + "/claims/key-fedcba9876543210.0");
  std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(content.find("\"state\":\"done\"") != std::string::npos);
  CHECK(content.find("\"bytes\":123") != std::string::npos);
  CHECK(claim(b, kKey) == Claims::Outcome::Held);
}

TEST_CASE("claims: a failed claim, or a dead claimer's, is taken over once", "[claims]") {
  const std::string dir = lingprobe::test::temp_dir("lpclaims");
  Claims a(dir, 0), b(dir, 1), c(dir, 2);
  REQUIRE(claim(a, kKey) == Claims::Outcome::Owned);
  a.release_key(kKey, Claims::Release::Failed, 0, 0);
  CHECK(b.key_state(kKey) == Claims::KeyState::Free);
  CHECK(claim(b, kKey) == Claims::Outcome::Owned);  // claim .1
  CHECK(claim(c, kKey) == Claims::Outcome::Held);

  // A real process claims and dies without releasing.
  const std::string key2 = "aa" + kKey.substr(2);
  pid_t child = fork();
  if (child == 0) {
    Claims mine(dir, 3);
    _exit(claim(mine, key2) == Claims::Outcome::Owned ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(c.key_state(key2) == Claims::KeyState::Free);
  CHECK(claim(c, key2) == Claims::Outcome::Owned);
  CHECK(claim(a, key2) == Claims::Outcome::Held);
}

TEST_CASE("claims: signatures are claimed exclusively; the run budget adds up across processes", "[claims]") {
  const std::string dir = lingprobe::test::temp_dir("lpclaims");
  Claims a(dir, 0), b(dir, 1);
  CHECK_FALSE(a.signature_claimed(kKey));
  CHECK(a.claim_signature(kKey, Kind::Snapshot, "snapshots/x.pt"));
  CHECK_FALSE(b.claim_signature(kKey, Kind::Snapshot, "snapshots/y.pt"));
  CHECK(b.signature_claimed(kKey));
  a.unclaim_signature(kKey, Kind::Snapshot);
  CHECK(b.claim_signature(kKey, Kind::Snapshot, "snapshots/y.pt"));
  CHECK(a.reserve_bytes(600, 1000));
  CHECK_FALSE(b.reserve_bytes(500, 1000));
  CHECK(b.reserve_bytes(400, 1000));
  a.give_back_bytes(600);
  CHECK(a.reserve_bytes(600, 1000));
}

TEST_CASE("claims: a partial claim is taken over for what it still missed; each kind of evidence is claimed apart",
          "[claims]") {
  const std::string dir = lingprobe::test::temp_dir("lpclaims");
  Claims a(dir, 0), b(dir, 1), c(dir, 2);
  uint8_t still_missing = 0;
  REQUIRE(a.claim_key(kKey, still_missing) == Claims::Outcome::Owned);
  CHECK(still_missing == Claims::kAllEvidence);         // the key's first claim
  a.release_key(kKey, Claims::Release::Partial, 0, 1);  // its counters kept, its snapshot (bit 1) not
  CHECK(b.key_state(kKey) == Claims::KeyState::Free);
  REQUIRE(b.claim_key(kKey, still_missing) == Claims::Outcome::Owned);  // claim .1
  CHECK(still_missing == 1);
  CHECK(claim(c, kKey) == Claims::Outcome::Held);
  b.release_key(kKey, Claims::Release::Done, 10, 0);
  CHECK(c.key_state(kKey) == Claims::KeyState::Done);

  CHECK(a.claim_signature(kKey, Kind::Profile, "profiles/x"));  // a's counters of the signature
  CHECK(a.signature_claimed(kKey));
  CHECK(b.claim_signature(kKey, Kind::Snapshot, "snapshots/y.pt"));  // before: a duplicate, so never a snapshot
  CHECK_FALSE(c.claim_signature(kKey, Kind::Profile, "profiles/z"));
  CHECK_FALSE(c.claim_signature(kKey, Kind::Snapshot, "snapshots/z.pt"));
}
