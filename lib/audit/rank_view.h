// Where the ranks of a run differ (the audit's "ranks" section and its
// summary): the ranks expected from the headers' world_size against those
// that wrote files; per stage, the ranks that ran it (a stage on a subset by
// design, such as the output stage on rank 0, is rank-local, not
// imbalance), the signatures whose calls differ between its ranks or that
// some of them lack; and per rank and stage, wall time from the call records
// (the stage's span, the time inside recorded top-level calls, and of it the
// time inside c10d collectives), so that a straggler shows even when call
// counts are equal by construction: the other ranks wait for it in their
// collectives. Pure: reads the metadata summaries it is given.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "audit/metadata_reader.h"
#include "format/json_value.h"

namespace lingprobe::audit {

struct RankViewSignature {
  std::string sha, stage, op, text;  // op as in the signature ("c10d.allgather_.default")
  std::map<int64_t, uint64_t> calls_by_rank;
};

struct RankView {
  format::JsonValue json;  // coverage_audit.json's "ranks"
  std::string markdown;    // summary.md's "Ranks" section
};

// `rank_files`: the files whose calls make the rows (ranks, or the single process).
RankView rank_view(int64_t world_size, const std::vector<const FileSummary*>& rank_files,
                   const std::vector<RankViewSignature>& signatures);

}  // namespace lingprobe::audit
