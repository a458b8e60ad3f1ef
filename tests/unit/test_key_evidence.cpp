// The audit's per-key evidence table: a key refused some evidence at a call
// is complete when its signatures hold that evidence in the end. A refused
// timed call ("timing") counted as complete before: the table never listed a
// key whose timed call was refused and never taken.
#include <catch2/catch.hpp>

#include "audit/key_evidence.h"

using namespace lingprobe::audit;

namespace {
Refusal refusal(const char* sha, const char* evidence, const char* reason) {
  Refusal r;
  r.input_sha256 = sha;
  r.op = "aten::linear";
  r.stage = "dit";
  r.evidence = evidence;
  r.reason = reason;
  return r;
}
}  // namespace

TEST_CASE("key evidence: a refused timed call is missing until the key holds a timed call", "[audit][refusals]") {
  const std::vector<Refusal> refusals = {refusal("a", "timing", "window_busy"), refusal("b", "timing", "window_busy"),
                                         refusal("c", "snapshot", "budget_process")};
  std::map<std::string, HeldEvidence> held;
  held["a"].counters = true;  // counters, no timed call
  held["b"].counters = held["b"].timed = true;
  held["c"].snapshot = true;
  const std::vector<KeyEvidence> keys = key_evidence(refusals, held);
  REQUIRE(keys.size() == 3);
  CHECK(keys[0].input_sha256 == "a");  // the keys still missing evidence first
  const std::string md = key_evidence_markdown(keys, 10);
  CHECK(md.find("2 got it later, 1 still miss some") != std::string::npos);
  CHECK(md.find("| 1 | dit | `aten::linear` | counters | timing: window_busy |") != std::string::npos);
  const auto json = key_evidence_json(keys);
  CHECK(json.items()[0].find("complete")->as_bool() == false);
  CHECK(json.items()[0].find("timed_call")->as_bool() == false);
  CHECK(json.items()[1].find("timed_call")->as_bool() == true);
}

TEST_CASE("key evidence: keys that read alike share one row with their count", "[audit][refusals]") {
  // A weight init's many shapes refused by one budget read the same: the table listed one identical row per key.
  std::vector<Refusal> refusals;
  for (const char* sha : {"a", "b", "c"}) refusals.push_back(refusal(sha, "snapshot", "budget_process"));
  refusals.push_back(refusal("d", "timing", "window_busy"));
  const std::vector<KeyEvidence> keys = key_evidence(refusals, {});
  const std::string md = key_evidence_markdown(keys, 10);
  CHECK(md.find("| 3 | dit | `aten::linear` | nothing | snapshot: budget_process |") != std::string::npos);
  CHECK(md.find("| 1 | dit | `aten::linear` | nothing | timing: window_busy |") != std::string::npos);
  size_t rows = 0;
  for (size_t at = md.find("\n| "); at != std::string::npos; at = md.find("\n| ", at + 1)) ++rows;
  CHECK(rows == 3);  // the header and two rows
  const std::string one_row = key_evidence_markdown(keys, 1);
  CHECK(one_row.find("(1 more key(s) in coverage_audit.json)") != std::string::npos);
}
