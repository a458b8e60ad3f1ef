#include "audit/summary_file.h"

namespace lingprobe::audit {

namespace {

std::string trimmed(std::string s) {
  const size_t first = s.find_first_not_of('\n');
  if (first == std::string::npos) return "";
  s.erase(0, first);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

}  // namespace

SummaryParts split_summary(const std::string& text) {
  const size_t at = text.find(kCapabilityHeading);
  if (at == std::string::npos) return {trimmed(text), ""};
  const size_t end_marker = text.find(kCapabilityEnd, at);
  const size_t end = end_marker == std::string::npos ? text.size() : end_marker + std::string(kCapabilityEnd).size();
  std::string capability = trimmed(text.substr(at, end - at));
  if (end_marker == std::string::npos) capability += std::string("\n\n") + kCapabilityEnd;
  const std::string before = trimmed(text.substr(0, at)), after = trimmed(text.substr(end));
  return {before.empty() || after.empty() ? before + after : before + "\n\n" + after, capability};
}

std::string compose_summary(const SummaryParts& parts) {
  const std::string audit = trimmed(parts.audit), capability = trimmed(parts.capability);
  if (capability.empty()) return audit.empty() ? "" : audit + "\n";
  if (audit.empty()) return capability + "\n";
  // The title is the audit part's first line when it is a level-1 heading.
  size_t title_end = 0;
  if (audit.compare(0, 2, "# ") == 0) {
    title_end = audit.find('\n');
    if (title_end == std::string::npos) title_end = audit.size();
  }
  const std::string title = audit.substr(0, title_end), rest = trimmed(audit.substr(title_end));
  std::string out = title.empty() ? "" : title + "\n\n";
  out += capability + "\n";
  if (!rest.empty()) out += "\n" + rest + "\n";
  return out;
}

}  // namespace lingprobe::audit
