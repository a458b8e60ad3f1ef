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
}  // namespace

TEST_CASE("claims: one owner per key; done and failed states", "[claims]") {
  const std::string dir = lingprobe::test::temp_dir("lpclaims");
  Claims a(dir, 0), b(dir, 1);
  CHECK(a.key_state(kKey) == Claims::KeyState::None);
  CHECK(a.claim_key(kKey) == Claims::Outcome::Owned);
  CHECK(b.claim_key(kKey) == Claims::Outcome::Held);
  CHECK(b.key_state(kKey) == Claims::KeyState::InProgress);
  a.release_key(kKey, false, 123);
  CHECK(b.key_state(kKey) == Claims::KeyState::Done);
  std::ifstream f(dir + "/claims/key-fedcba9876543210.0");
  std::string content((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(content.find("\"state\":\"done\"") != std::string::npos);
  CHECK(content.find("\"bytes\":123") != std::string::npos);
  CHECK(b.claim_key(kKey) == Claims::Outcome::Held);
}

TEST_CASE("claims: a failed claim, or a dead claimer's, is taken over once", "[claims]") {
  const std::string dir = lingprobe::test::temp_dir("lpclaims");
  Claims a(dir, 0), b(dir, 1), c(dir, 2);
  REQUIRE(a.claim_key(kKey) == Claims::Outcome::Owned);
  a.release_key(kKey, true, 0);
  CHECK(b.key_state(kKey) == Claims::KeyState::Free);
  CHECK(b.claim_key(kKey) == Claims::Outcome::Owned);  // claim .1
  CHECK(c.claim_key(kKey) == Claims::Outcome::Held);

  // A real process claims and dies without releasing.
  const std::string key2 = "aa" + kKey.substr(2);
  pid_t child = fork();
  if (child == 0) {
    Claims mine(dir, 3);
    _exit(mine.claim_key(key2) == Claims::Outcome::Owned ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(WEXITSTATUS(status) == 0);
  CHECK(c.key_state(key2) == Claims::KeyState::Free);
  CHECK(c.claim_key(key2) == Claims::Outcome::Owned);
  CHECK(a.claim_key(key2) == Claims::Outcome::Held);
}

TEST_CASE("claims: signatures are claimed exclusively; the run budget adds up across processes", "[claims]") {
  const std::string dir = lingprobe::test::temp_dir("lpclaims");
  Claims a(dir, 0), b(dir, 1);
  CHECK_FALSE(a.signature_claimed(kKey));
  CHECK(a.claim_signature(kKey, "snapshots/x.pt"));
  CHECK_FALSE(b.claim_signature(kKey, "snapshots/y.pt"));
  CHECK(b.signature_claimed(kKey));
  a.unclaim_signature(kKey);
  CHECK(b.claim_signature(kKey, "snapshots/y.pt"));
  CHECK(a.reserve_bytes(600, 1000));
  CHECK_FALSE(b.reserve_bytes(500, 1000));
  CHECK(b.reserve_bytes(400, 1000));
  a.give_back_bytes(600);
  CHECK(a.reserve_bytes(600, 1000));
}
