#pragma once
// The sampled calls' evidence not kept, counted per kind and reason for the
// counts record's `dropped`: snapshots, counter windows, timing windows.
// Torch-free. Thread-safe: ops' threads and the snapshot writer's count at once.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "format/records.h"

namespace lingprobe::capture {

class EvidenceDrops {
 public:
  void snapshot(const std::string& reason);
  // A window's refusal or loss: `timing` for a timing window, else a counter window.
  void window(const std::string& reason, bool timing);
  format::DropCounts counts() const;  // {"snapshots": {reason: n}, "profiles": {reason: n}, "timings": {...}}

 private:
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> snapshots_, profiles_, timings_;
};

}  // namespace lingprobe::capture
