// summary.md's two parts (issue 26 item 8): where a run has counters, the
// capability section leads, right under the audit's title; a re-audit and a
// re-report each replace their own part and keep the other's, once.
#include <catch2/catch.hpp>

#include "audit/summary_file.h"

using namespace lingprobe::audit;

namespace {
const std::string kAudit = "# lingprobe coverage audit\n\n12 distinct signatures.\n\n## Stage dit\n\nrows\n";
const std::string kCapability =
    std::string(kCapabilityHeading) + "\n\n### Left on the table\n\n| would save |\n\n" + kCapabilityEnd + "\n";
}  // namespace

TEST_CASE("the capability section comes right under the audit's title") {
  const std::string file = compose_summary({kAudit, kCapability});
  REQUIRE(file.rfind("# lingprobe coverage audit\n\n## Capability (inline counters)\n\n### Left on the table", 0) == 0);
  REQUIRE(file.find("## Stage dit") > file.find(kCapabilityEnd));
  const SummaryParts back = split_summary(file);
  REQUIRE(back.audit + "\n" == kAudit);
  REQUIRE(back.capability + "\n" == kCapability);
}

TEST_CASE("rewriting either part keeps the other once") {
  std::string file = compose_summary({kAudit, kCapability});
  const std::string new_audit = "# lingprobe coverage audit\n\n13 distinct signatures.\n";
  file = compose_summary({new_audit, split_summary(file).capability});  // a re-audit
  file = compose_summary({split_summary(file).audit, kCapability});     // a re-report
  file = compose_summary({split_summary(file).audit, kCapability});
  REQUIRE(file == compose_summary({new_audit, kCapability}));
  size_t headings = 0;
  for (size_t at = file.find(kCapabilityHeading); at != std::string::npos; at = file.find(kCapabilityHeading, at + 1))
    ++headings;
  REQUIRE(headings == 1);
  REQUIRE(file.find("12 distinct") == std::string::npos);
}

TEST_CASE("either part alone, and a section written before the end marker existed") {
  REQUIRE(compose_summary({kAudit, ""}) == kAudit);
  REQUIRE(compose_summary({"", kCapability}) == kCapability);
  const SummaryParts old = split_summary(kAudit + "\n" + kCapabilityHeading + "\n\nold table\n");
  REQUIRE(old.audit + "\n" == kAudit);
  REQUIRE(old.capability == std::string(kCapabilityHeading) + "\n\nold table\n\n" + kCapabilityEnd);
  REQUIRE(split_summary(kAudit).capability.empty());
}
