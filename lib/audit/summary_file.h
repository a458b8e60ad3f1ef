// summary.md holds two parts written by two commands: the audit's (a title
// line, then coverage, sampling and ranks) and `lingprobe report`'s
// capability section. Where a run has counters, the capability section
// (which opens with "Left on the table") comes first, right under the title;
// either command rewrites its own part and keeps the other's. Pure string
// functions, no files.
#pragma once

#include <string>

namespace lingprobe::audit {

// The capability section's first and last lines.
inline constexpr const char* kCapabilityHeading = "## Capability (inline counters)";
inline constexpr const char* kCapabilityEnd = "<!-- end of the capability section -->";

struct SummaryParts {
  std::string audit;       // the audit's part, the title line included ("" when none)
  std::string capability;  // the capability section, heading to end marker ("" when none)
};

// Splits a summary.md. A section without its end marker (written before the
// marker existed) runs to the end of the file.
SummaryParts split_summary(const std::string& text);

// The file: the audit part's title line, the capability section, then the
// rest of the audit part. Either part may be empty.
std::string compose_summary(const SummaryParts& parts);

}  // namespace lingprobe::audit
