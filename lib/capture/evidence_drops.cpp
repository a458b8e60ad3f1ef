#include "capture/evidence_drops.h"

namespace lingprobe::capture {

void EvidenceDrops::snapshot(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++snapshots_[reason];
}

void EvidenceDrops::window(const std::string& reason, bool timing) {
  std::lock_guard<std::mutex> lock(mu_);
  ++(timing ? timings_ : profiles_)[reason];
}

format::DropCounts EvidenceDrops::counts() const {
  std::lock_guard<std::mutex> lock(mu_);
  format::DropCounts d;
  if (!snapshots_.empty()) d["snapshots"] = snapshots_;
  if (!profiles_.empty()) d["profiles"] = profiles_;
  if (!timings_.empty()) d["timings"] = timings_;
  return d;
}

}  // namespace lingprobe::capture
