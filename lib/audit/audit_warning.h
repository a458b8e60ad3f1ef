// A warning of `lingprobe audit`, `report`, `trace` or `diff`: the run was
// read, with something its user should know. Callers and tests switch on its
// code; the message is for people (one way to fail, as format/status.h).
// docs/AUDIT.md "Warnings" lists the codes.
#pragma once

#include <string>
#include <vector>

#include "format/json_value.h"

namespace lingprobe::audit {

enum class WarningCode {
  kGivenAgain,         // an input named twice (a symlink such as latest, or the same run twice): read once
  kEmptyFile,          // a metadata file with no bytes (a rank killed before its first write): skipped
  kNoHeader,           // a metadata file without a header record: skipped
  kLauncherFile,       // a metadata file written by a launcher process: skipped
  kMixedRuns,          // --allow-mixed-runs: several launches summed
  kNoCountsRecord,     // call records without any counts record (killed in its first write): counted from them
  kNoFinalCounts,      // the process did not finish: its last counts used
  kInterrupted,        // the process was ended by a signal (its final counts written first): the run was cut short
  kTruncatedLastLine,  // a last line cut (killed while writing): skipped
  kEvidenceRejected,   // a snapshot or profile not counted (its reason in rejected_evidence)
  kForeignEvidence,    // files under snapshots/ or profiles/ that no record of this run names
  kProfileAltered,     // a profile's files missing or altered since the run: no job
  kProfileUnreadable,  // a profile's files unreadable: no job
  kOverRoof,           // a job above 100% of a roof: a defect, counted in no total
  kProfileSuperseded,  // a signature's failed profile replaced as its job by a later one that passed
  kFurtherProfile,     // a further profile of a signature that has a job: not used
  kEventsOverLimit,    // trace: call records past --max-events left out
  kNothingToDraw,      // trace: no call record to draw
};

struct Warning {
  WarningCode code;
  std::string message;  // one line: what, and what was done about it
};

// The code's name in the JSON and on stderr ("truncated_last_line").
const char* warning_code_name(WarningCode code);

// "lingprobe TOOL: warning: MESSAGE [CODE]", the line the command prints.
std::string warning_line(const char* tool, const Warning& warning);

// [{"code": NAME, "message": MESSAGE}, ...], as the reports hold them.
format::JsonValue warnings_json(const std::vector<Warning>& warnings);

}  // namespace lingprobe::audit
