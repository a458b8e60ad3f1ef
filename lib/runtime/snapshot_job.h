// A sampled call on its way from capture to the sink's writer thread: the
// message between two layers that must not know each other (capture makes
// it, sink consumes it; api wires the two). Runtime, not format: it carries
// a callback and is handed across threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "format/pickle.h"
#include "format/profile_files.h"
#include "format/snapshot_file.h"

namespace lingprobe::runtime {

using format::BlobSource;
using format::PickleValue;
using format::ProfileData;

// One sampled call on its way from capture to the sink's writer: its
// snapshot (the document, to which the sink adds "signature" and
// "signature_sha256" from its signature table, and its tensors' bytes), its
// profile (counters), and what to tell the sampler.
struct SnapshotJob {
  enum class Result { Kept, Duplicate, Dropped };
  uint32_t signature_id = 0;
  uint64_t seq = 0;
  std::string stage;
  int64_t rank = 0;
  bool snapshot = true;  // a snapshot file (document, blobs)
  PickleValue document;
  std::vector<std::unique_ptr<BlobSource>> blobs;
  bool profiled = false;  // a profile directory
  ProfileData profile;
  bool timed = false;  // a kernel_timing record (the key's timed call: CUPTI Activity's durations)
  ProfileData timing;
  // With `timed`: completes the timing on the writer's thread (it waits for
  // the device there, not on the op's thread) and gives its data; the writer
  // keeps a passed one. Unset: `timing` is complete already.
  std::function<ProfileData()> complete_timing;
  uint64_t bytes = 0;  // of the tensors
  // Called once, on the writer thread: kept (path relative to the run
  // directory; `kept` says which files: kKeptSnapshot, kKeptProfile, kKeptTiming,
  // and which kinds the launch had already: kDuplicateSnapshot, kDuplicateProfile), a
  // duplicate of a signature sampled elsewhere, or dropped (reason; kept 0).
  static constexpr uint8_t kKeptSnapshot = 1, kKeptProfile = 2, kKeptTiming = 4, kDuplicateSnapshot = 8,
                           kDuplicateProfile = 16;
  std::function<void(Result, const std::string& path_or_reason, const std::string& signature_sha, uint8_t kept)> done;
};

}  // namespace lingprobe::runtime
