#include "api/sample_plan_source.h"

#include <cstdio>

#include "api/log.h"
#include "format/canonical_json.h"
#include "format/json_parse.h"

namespace lingprobe::api {

using format::JsonValue;

std::unique_ptr<LoadedPlan> load_sample_plan(const Config& c, bool counters_possible) {
  if (c.sample_plan.empty()) return nullptr;
  auto loaded = std::make_unique<LoadedPlan>();
  loaded->source = sample_plan_file(c.sample_plan);
  capture::PlanBudgets budgets;
  budgets.snapshots = c.snapshots;
  budgets.snapshot_bytes = static_cast<uint64_t>(c.sample_budget_process);
  budgets.counters = c.profile && counters_possible;
  budgets.stall_seconds = c.profile_budget_s;
  JsonValue audit;
  if (!format::parse_json_file(loaded->source, audit))
    loaded->error = "cannot read or parse " + loaded->source;
  else if (std::string e = capture::build_sample_plan(audit, budgets, loaded->plan); !e.empty())
    loaded->error = loaded->source + ": " + e;
  auto keys = std::make_shared<std::set<std::string>>();
  if (loaded->error.empty())
    for (const auto& k : loaded->plan.keys) keys->insert(k.input_sha);
  loaded->keys = std::move(keys);
  if (!loaded->error.empty()) {
    log_warn("LINGPROBE_SAMPLE_PLAN: " + loaded->error +
             "; nothing is sampled (run `lingprobe audit` on the earlier "
             "run, or unset LINGPROBE_SAMPLE_PLAN)");
  } else {
    char share[32];
    std::snprintf(share, sizeof share, "%.1f%%", 100 * loaded->plan.covered_share);
    log_info("sample plan from " + loaded->source + ": " + std::to_string(loaded->plan.keys.size()) + " of " +
             std::to_string(loaded->plan.ranked) + " keys (" + share + " of its " +
             (loaded->plan.basis == "flops" ? "FLOPs" : "measured kernel time") + "), " +
             std::to_string(loaded->plan.over_budget) + " passed over by the budgets" +
             (loaded->plan.unranked ? "; " + std::to_string(loaded->plan.unranked) +
                                          " key(s) without a FLOP formula got no share and were not planned, "
                                          "whatever their host time (keys rank by kernel time only where the "
                                          "earlier run measured it for every key with time or FLOPs: "
                                          "LINGPROBE_PROFILE=1 on a GPU; host time never ranks, on a GPU it is the "
                                          "launch)"
                                    : std::string()));
  }
  return loaded;
}

std::string plan_record(const LoadedPlan& plan, const std::vector<std::string>& unmet) {
  JsonValue missing = JsonValue::array();
  for (const std::string& sha : unmet)
    for (const auto& k : plan.plan.keys)
      if (k.input_sha == sha)
        missing.push_back(JsonValue::object({{"input_sha256", JsonValue::string(k.input_sha)},
                                             {"op", JsonValue::string(k.op)},
                                             {"stage", JsonValue::string(k.stage)},
                                             {"share", JsonValue::floating(k.share)}}));
  JsonValue r = JsonValue::object();
  r.set("kind", JsonValue::string("plan"));
  r.set("source", JsonValue::string(plan.source));
  r.set("error", plan.error.empty() ? JsonValue::null() : JsonValue::string(plan.error));
  r.set("basis", JsonValue::string(plan.plan.basis));
  r.set("keys", JsonValue::integer(static_cast<int64_t>(plan.plan.keys.size())));
  r.set("ranked", JsonValue::integer(static_cast<int64_t>(plan.plan.ranked)));
  r.set("over_budget", JsonValue::integer(static_cast<int64_t>(plan.plan.over_budget)));
  r.set("unranked", JsonValue::integer(static_cast<int64_t>(plan.plan.unranked)));
  r.set("covered_share", JsonValue::floating(plan.plan.covered_share));
  r.set("unmet", std::move(missing));
  return format::canonical_json(r) + "\n";
}

}  // namespace lingprobe::api
