// The snapshot file's document (docs/SNAPSHOTS.md, format lingprobe.snapshot):
// what the call was, where and how it ran, around its arguments and output
// (which capture/tensor_copy has turned into values). No torch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/pickle.h"

namespace lingprobe::capture {

struct SnapshotFacts {
  std::string op, name, overload, schema;  // the operator: dotted name, schema name and overload, schema text
  std::string input_sha256, stage, run_id, torch_version;
  int64_t rank = 0;
  uint64_t seq = 0;
  format::PickleValue math_policy;
  bool setup_call = false;
  bool fold_scalars = false;
  std::vector<int64_t> written_args;  // copied before the op (it writes them)
};

format::PickleValue snapshot_document(const SnapshotFacts& facts, format::PickleValue args, format::PickleValue kwargs,
                                      format::PickleValue output);

}  // namespace lingprobe::capture
