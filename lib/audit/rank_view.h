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

// Whether a stage's waits in collectives name a straggler (the rank that waits least: the others wait for it).
// The gap between the longest and the shortest wait must stand clear of what a shared machine's scheduler moves
// around: over a fifth of the longest wait, over 5% of the stage's span (`median_span_s`, 0 when no call records
// gave it), and over kStragglerNoiseFloorS plus three standard deviations of the difference of two sums of
// per-collective jitter (kStragglerJitterPerCollectiveS each, so sqrt(2 x collectives) of it). Measured on 2
// shared cores: a balanced 2-rank gloo job's gap reached 6.4 ms over 6 all_reduces (docs/READING.md).
// Without collectives, a rank whose time in calls is 10% and kStragglerNoiseFloorS over the median.
inline constexpr double kStragglerNoiseFloorS = 0.1;
inline constexpr double kStragglerJitterPerCollectiveS = 0.005;
bool waits_name_a_straggler(double least_wait_s, double most_wait_s, double median_collective_calls,
                            double median_span_s);

// `rank_files`: the files whose calls make the rows (ranks, or the single process).
RankView rank_view(int64_t world_size, const std::vector<const FileSummary*>& rank_files,
                   const std::vector<RankViewSignature>& signatures);

}  // namespace lingprobe::audit
