// Where each sampled key's evidence went: the keys that were refused
// evidence at some call (refusal records, once per key, evidence and
// reason), each with what it holds in the end (a snapshot, counters) and
// why the rest is missing. For coverage_audit.json and summary.md.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "audit/metadata_reader.h"
#include "format/json_value.h"

namespace lingprobe::audit {

struct KeyEvidence {
  std::string input_sha256, op, stage;
  bool snapshot = false, counters = false, timed = false;  // held in the end, by any of the key's signatures
  std::map<std::string, std::set<std::string>> reasons;    // evidence -> the reasons it was refused
};

struct HeldEvidence {
  bool snapshot = false, counters = false;  // counters: a profile that passed
  bool timed = false;                       // a passed timed call (a kernel_timing record), with kernels or none
};

// The keys of `refusals` (all ranks' files), with what `held` (input sha256
// -> evidence of the run's signatures) says they hold; the keys that still
// miss evidence first, then by op.
std::vector<KeyEvidence> key_evidence(const std::vector<Refusal>& refusals,
                                      const std::map<std::string, HeldEvidence>& held);

format::JsonValue key_evidence_json(const std::vector<KeyEvidence>& keys);
// A markdown table of the keys that miss evidence (at most `rows`), and a count of those that got it later.
std::string key_evidence_markdown(const std::vector<KeyEvidence>& keys, size_t rows);

}  // namespace lingprobe::audit
