#include "audit/plan_report.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace lingprobe::audit {

using format::JsonValue;

namespace {

// The keys every record lists as unmet, by share descending.
std::vector<PlanRecord::Key> unmet_everywhere(const std::vector<PlanRecord>& records) {
  std::map<std::string, std::pair<PlanRecord::Key, size_t>> seen;
  for (const auto& r : records)
    for (const auto& k : r.unmet) {
      auto& slot = seen[k.input_sha256];
      slot.first = k;
      ++slot.second;
    }
  std::vector<PlanRecord::Key> out;
  for (const auto& [sha, entry] : seen)
    if (entry.second == records.size()) out.push_back(entry.first);
  std::sort(out.begin(), out.end(), [](const PlanRecord::Key& a, const PlanRecord::Key& b) {
    return a.share != b.share ? a.share > b.share : a.input_sha256 < b.input_sha256;
  });
  return out;
}

}  // namespace

JsonValue plan_json(const std::vector<PlanRecord>& records) {
  if (records.empty()) return JsonValue::null();
  const PlanRecord& first = records.front();
  JsonValue unmet = JsonValue::array();
  for (const auto& k : unmet_everywhere(records))
    unmet.push_back(JsonValue::object({{"input_sha256", JsonValue::string(k.input_sha256)},
                                       {"op", JsonValue::string(k.op)},
                                       {"stage", JsonValue::string(k.stage)},
                                       {"share", JsonValue::floating(k.share)}}));
  return JsonValue::object({{"source", JsonValue::string(first.source)},
                            {"error", first.error.empty() ? JsonValue::null() : JsonValue::string(first.error)},
                            {"basis", JsonValue::string(first.basis)},
                            {"keys", JsonValue::integer(static_cast<int64_t>(first.keys))},
                            {"ranked", JsonValue::integer(static_cast<int64_t>(first.ranked))},
                            {"over_budget", JsonValue::integer(static_cast<int64_t>(first.over_budget))},
                            {"unranked", JsonValue::integer(static_cast<int64_t>(first.unranked))},
                            {"covered_share", JsonValue::floating(first.covered_share)},
                            {"processes", JsonValue::integer(static_cast<int64_t>(records.size()))},
                            {"unmet", std::move(unmet)}});
}

std::string plan_markdown(const std::vector<PlanRecord>& records, size_t rows) {
  if (records.empty()) return "";
  const PlanRecord& first = records.front();
  if (!first.error.empty()) return "\n### Sample plan\n\nNot used: " + first.error + "; nothing was sampled.\n";
  const std::vector<PlanRecord::Key> unmet = unmet_everywhere(records);
  char share[32];
  std::snprintf(share, sizeof share, "%.1f%%", 100 * first.covered_share);
  std::string md = "\n### Sample plan\n\nFrom `" + first.source + "`: " + std::to_string(first.keys) + " of its " +
                   std::to_string(first.ranked) + " keys with time or FLOPs were planned (" + share + " of its " +
                   (first.basis == "flops" ? "FLOPs" : "measured kernel time") + "; " +
                   std::to_string(first.over_budget) + " passed over by the budgets); " + std::to_string(unmet.size()) +
                   " planned key(s) never met in this run.\n";
  if (first.unranked)
    md += "\n" + std::to_string(first.unranked) +
          " key(s) of the earlier run had no FLOP formula, so no share of its FLOPs: none was planned, whatever "
          "its host time (keys rank by kernel time only where the earlier run measured it for every key with time "
          "or FLOPs: LINGPROBE_PROFILE=1 on a GPU; host time never ranks, on a GPU it is the launch).\n";
  if (unmet.empty()) return md;
  md += "\n| planned share | stage | op | input key |\n|---|---|---|---|\n";
  for (size_t i = 0; i < unmet.size() && i < rows; ++i) {
    char s[32];
    std::snprintf(s, sizeof s, "%.1f%%", 100 * unmet[i].share);
    md += std::string("| ") + s + " | " + unmet[i].stage + " | `" + unmet[i].op + "` | " +
          unmet[i].input_sha256.substr(0, 12) + " |\n";
  }
  return md;
}

}  // namespace lingprobe::audit
