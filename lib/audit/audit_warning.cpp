#include "audit/audit_warning.h"

namespace lingprobe::audit {

const char* warning_code_name(WarningCode code) {
  switch (code) {
    case WarningCode::kGivenAgain: return "given_again";
    case WarningCode::kEmptyFile: return "empty_file";
    case WarningCode::kNoHeader: return "no_header";
    case WarningCode::kLauncherFile: return "launcher_file";
    case WarningCode::kMixedRuns: return "mixed_runs";
    case WarningCode::kNoCountsRecord: return "no_counts_record";
    case WarningCode::kNoFinalCounts: return "no_final_counts";
    case WarningCode::kInterrupted: return "interrupted";
    case WarningCode::kTruncatedLastLine: return "truncated_last_line";
    case WarningCode::kEvidenceRejected: return "evidence_rejected";
    case WarningCode::kForeignEvidence: return "foreign_evidence";
    case WarningCode::kProfileAltered: return "profile_altered";
    case WarningCode::kProfileUnreadable: return "profile_unreadable";
    case WarningCode::kOverRoof: return "over_roof";
    case WarningCode::kProfileSuperseded: return "profile_superseded";
    case WarningCode::kFurtherProfile: return "further_profile";
    case WarningCode::kEventsOverLimit: return "events_over_limit";
    case WarningCode::kNothingToDraw: return "nothing_to_draw";
  }
  return "unknown";
}

std::string warning_line(const char* tool, const Warning& warning) {
  return std::string("lingprobe ") + tool + ": warning: " + warning.message + " [" + warning_code_name(warning.code) +
         "]";
}

format::JsonValue warnings_json(const std::vector<Warning>& warnings) {
  format::JsonValue list = format::JsonValue::array();
  for (const Warning& w : warnings)
    list.push_back(format::JsonValue::object({{"code", format::JsonValue::string(warning_code_name(w.code))},
                                              {"message", format::JsonValue::string(w.message)}}));
  return list;
}

}  // namespace lingprobe::audit
