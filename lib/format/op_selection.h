// Which ops are recorded: allow globs globally or per stage, and deny globs
// (SPEC: "dit:aten::linear;vae:aten::conv3d;output:aten::to"). A pattern
// matches the op's name ("aten::to") or its name with overload
// ("aten::to.dtype"). Pure; no torch.
#pragma once

#include <string>
#include <vector>

namespace lingprobe::capture {

class OpSelection {
 public:
  // Parses the OPS and OPS_DENY settings; returns "" or an error message.
  // `option` names the setting in error messages (LINGPROBE_OPS, LINGPROBE_SAMPLE_OPS).
  std::string parse(const std::string& ops, const std::string& deny, const std::string& option = "LINGPROBE_OPS");

  bool selected(const std::string& name, const std::string& name_with_overload, const std::string& stage) const;
  bool records_everything() const { return global_.empty() && per_stage_.empty() && deny_.empty(); }

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

}  // namespace lingprobe::capture
