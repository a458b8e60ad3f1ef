// `lingprobe diff`'s join of two runs' rows (run_diff): the same signature in
// both; else pairs that changed only in shapes (the pairing key: a layer at
// another input size), groups of them, and pairs that changed only in dtypes
// (a run against its autocast twin); what is left on one side. No files.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "format/json_value.h"

namespace lingprobe::audit {

// One row of a run's coverage audit, as the diff reads it.
struct DiffRow {
  std::string sha, stage, op, text;
  const format::JsonValue* signature = nullptr;
  uint64_t calls = 0;
  format::JsonValue calls_by_rank;
  std::optional<int64_t> flops;  // per call
  std::string profile;           // path of its counter evidence ("": none)
  std::optional<double> kernel_us;
  std::optional<double> host_us;  // the calls' host time (call records), in all
  long double flops_total() const { return flops ? static_cast<long double>(*flops) * calls : 0; }
};

// One change: its kind (same_signature: calls changed; shape_changed, one_to_many, many_to_one, many_to_many;
// dtype_changed; only_in_a, only_in_b) and its rows on each side, with their calls, FLOPs and host time summed.
struct DiffEntry {
  std::string kind, stage, op;
  std::vector<const DiffRow*> a, b;
  std::string pairing = "";  // "size_order": paired within a group of as many on each side, by shape order
  uint64_t calls_a = 0, calls_b = 0;
  long double flops_a = 0, flops_b = 0;
  std::optional<double> host_us_a = std::nullopt, host_us_b = std::nullopt;  // over the rows with call records
  long double moved() const;
};

// The two runs' rows joined: entries sorted by FLOPs moved (then calls changed, then SHA-256), and the unchanged
// signatures counted by stage.
struct Pairing {
  std::vector<DiffEntry> entries;
  std::map<std::string, uint64_t> unchanged;  // by stage
};

// `stage`: only that stage's rows ("": all). The entries point into `a` and `b`.
Pairing pair_rows(const std::vector<DiffRow>& a, const std::vector<DiffRow>& b, const std::string& stage);

}  // namespace lingprobe::audit
