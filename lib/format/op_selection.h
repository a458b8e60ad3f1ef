// Which ops are recorded: allow globs globally or per stage, and deny globs
// (SPEC: "dit:aten::linear;vae:aten::conv3d;output:aten::to"). A pattern
// matches the op's name ("aten::to") or its name with overload
// ("aten::to.dtype"). Pure; no torch.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace lingprobe::format {

// "" or what is wrong with a value of OPS syntax (`stages`: "stage:glob,...;glob"; else comma-separated globs, as
// OPS_DENY), without the option's name: a pattern without a namespace, a character no op name has, an empty stage.
std::string op_patterns_error(const std::string& patterns, bool stages);

// An op pattern without its "stage:" prefix ("dit:aten::linear" -> "aten::linear"; "aten::lin*" as it is).
std::string op_pattern_glob(const std::string& pattern);

// Up to `n` names of `names` closest to `pattern` (case and wildcards aside, by edit distance), best first; those
// farther than half the pattern's length are left out.
std::vector<std::string> closest_op_names(const std::string& pattern, const std::vector<std::string>& names, size_t n);

class OpSelection {
 public:
  // Parses the OPS and OPS_DENY settings; returns "" or an error message.
  // `option` names the setting in error messages (LINGPROBE_OPS, LINGPROBE_SAMPLE_OPS).
  std::string parse(const std::string& ops, const std::string& deny, const std::string& option = "LINGPROBE_OPS");

  bool selected(const std::string& name, const std::string& name_with_overload, const std::string& stage) const;
  bool records_everything() const { return global_.empty() && per_stage_.empty() && deny_.empty(); }
  // Of patterns(), those no operator in `ops_met` (name, name with overload) matches.
  std::vector<std::string> unmatched(const std::vector<std::pair<std::string, std::string>>& ops_met) const;
  // The stages the per-stage rules name, each once, in order.
  std::vector<std::string> rule_stages() const;

 private:
  struct StageRule {
    std::string stage;
    std::vector<std::string> globs;
  };
  static bool any_match(const std::vector<std::string>& globs, const std::string& a, const std::string& b);

  std::vector<std::string> global_;
  std::vector<StageRule> per_stage_;
  std::vector<std::string> deny_;
};

}  // namespace lingprobe::format
