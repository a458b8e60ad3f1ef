#include "audit/key_evidence.h"

#include <algorithm>
#include <map>
#include <utility>

namespace lingprobe::audit {

using format::JsonValue;

namespace {

// Whether every kind of evidence the key was refused at some call is held in the end (a timed call's refusal
// is "timing"; "snapshot+counters" wants both).
bool complete(const KeyEvidence& k) {
  for (const auto& [evidence, reasons] : k.reasons) {
    const bool wants_snapshot = evidence.find("snapshot") != std::string::npos;
    const bool wants_counters = evidence.find("counters") != std::string::npos;
    const bool wants_timing = evidence.find("timing") != std::string::npos;
    if ((wants_snapshot && !k.snapshot) || (wants_counters && !k.counters) || (wants_timing && !k.timed)) return false;
  }
  return true;
}

std::string held_text(const KeyEvidence& k) {
  std::string held;
  for (const auto& [has, what] : {std::pair{k.snapshot, "snapshot"}, {k.counters, "counters"}, {k.timed, "timed call"}})
    if (has) held += (held.empty() ? "" : ", ") + std::string(what);
  return held.empty() ? "nothing" : held;
}

// "evidence: reason, reason; evidence: reason".
std::string refused_text(const KeyEvidence& k) {
  std::string why;
  for (const auto& [evidence, reasons] : k.reasons) {
    std::string list;
    for (const auto& r : reasons) list += (list.empty() ? "" : ", ") + r;
    why += (why.empty() ? "" : "; ") + evidence + ": " + list;
  }
  return why;
}

}  // namespace

std::vector<KeyEvidence> key_evidence(const std::vector<Refusal>& refusals,
                                      const std::map<std::string, HeldEvidence>& held) {
  std::map<std::string, KeyEvidence> by_key;
  for (const auto& r : refusals) {
    KeyEvidence& k = by_key[r.input_sha256];
    k.input_sha256 = r.input_sha256;
    k.op = r.op;
    k.stage = r.stage;
    k.reasons[r.evidence].insert(r.reason);
  }
  std::vector<KeyEvidence> out;
  for (auto& [sha, k] : by_key) {
    if (auto it = held.find(sha); it != held.end())
      k.snapshot = it->second.snapshot, k.counters = it->second.counters, k.timed = it->second.timed;
    out.push_back(std::move(k));
  }
  std::stable_sort(out.begin(), out.end(), [](const KeyEvidence& a, const KeyEvidence& b) {
    const bool ca = complete(a), cb = complete(b);
    if (ca != cb) return !ca;
    return std::tie(a.stage, a.op) < std::tie(b.stage, b.op);
  });
  return out;
}

JsonValue key_evidence_json(const std::vector<KeyEvidence>& keys) {
  JsonValue rows = JsonValue::array();
  for (const auto& k : keys) {
    JsonValue reasons = JsonValue::object();
    for (const auto& [evidence, why] : k.reasons) {
      JsonValue list = JsonValue::array();
      for (const auto& w : why) list.push_back(JsonValue::string(w));
      reasons.set(evidence, std::move(list));
    }
    rows.push_back(JsonValue::object({{"input_sha256", JsonValue::string(k.input_sha256)},
                                      {"op", JsonValue::string(k.op)},
                                      {"stage", JsonValue::string(k.stage)},
                                      {"snapshot", JsonValue::boolean(k.snapshot)},
                                      {"counters", JsonValue::boolean(k.counters)},
                                      {"timed_call", JsonValue::boolean(k.timed)},
                                      {"complete", JsonValue::boolean(complete(k))},
                                      {"refused", std::move(reasons)}}));
  }
  return rows;
}

std::string key_evidence_markdown(const std::vector<KeyEvidence>& keys, size_t rows) {
  size_t missing = 0;
  for (const auto& k : keys) missing += !complete(k);
  std::string md =
      "\n### Evidence refused\n\n" + std::to_string(keys.size()) +
      " sampled key(s) were refused evidence at some call (each refusal leaves the key to a later call); " +
      std::to_string(keys.size() - missing) + " got it later, " + std::to_string(missing) +
      " still miss some (`refusals` in coverage_audit.json lists them all).\n";
  if (missing == 0) return md;
  // Keys that read alike (the same stage, op, evidence held and refusals: a weight init's many shapes) share a row.
  std::vector<std::pair<std::string, size_t>> lines;  // in the keys' order
  std::map<std::string, size_t> line_of;
  for (const auto& k : keys) {
    if (complete(k)) continue;
    const std::string line = "| " + k.stage + " | `" + k.op + "` | " + held_text(k) + " | " + refused_text(k) + " |";
    auto [it, added] = line_of.emplace(line, lines.size());
    if (added) lines.emplace_back(line, 0);
    ++lines[it->second].second;
  }
  md += "\n| keys | stage | op | holds | refused (evidence: reasons) |\n|---|---|---|---|---|\n";
  for (size_t i = 0; i < lines.size() && i < rows; ++i)
    md += "| " + std::to_string(lines[i].second) + " " + lines[i].first + "\n";
  if (lines.size() > rows) {
    size_t more = 0;
    for (size_t i = rows; i < lines.size(); ++i) more += lines[i].second;
    md += "\n(" + std::to_string(more) + " more key(s) in coverage_audit.json)\n";
  }
  return md;
}

}  // namespace lingprobe::audit
