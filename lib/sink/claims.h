// Coordination of one launch's sampling through its run directory, which the
// ranks share: RUN_DIR/claims/ holds
//   key-{h16}.{n}  claim number n of an input key (exclusive create), its
//                  owner and state: {"host","pid","rank","start_ticks",
//                  "state": "claimed"|"done"|"partial"|"failed","bytes",
//                  "input_sha256"} (a partial claim adds "missing": the
//                  evidence bits the launch still lacks; so does a claim
//                  that took a partial one over);
//                  a claim whose owner failed, or died (same host: no such
//                  pid, or another process under it), or left it partial,
//                  is taken over by creating claim n+1 (which then wants only
//                  what the partial one still missed);
//   sig-{h16}      a snapshot of this signature exists in the launch (its
//                  path); prof-{h16} likewise its counters (the profile's);
//   bytes          the launch's sampled bytes so far (flock), the run budget.
// Every file is opened, created (O_EXCL), renamed and removed relative to the
// claims directory's own descriptor, opened once without following a
// symlink below the run directory. File operations only, made by whoever calls (the sampler once per key and
// process; the snapshot writer per sample). Knows nothing of the dispatcher.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace lingprobe::sink {

class Claims {
 public:
  Claims(std::string run_dir, int64_t rank);
  ~Claims();
  enum class Outcome { Owned, Held, Error };
  // Owned: `still_missing` is what the claim taken over left (its "missing"
  // bits), or kAllEvidence where the claim is the key's first, or a failed or
  // dead owner's.
  static constexpr uint8_t kAllEvidence = 0xff;
  Outcome claim_key(const std::string& input_sha, uint8_t& still_missing);
  // How an owner lets its claim go: done (others leave the key), partial
  // (others may take the `missing` evidence bits), failed (others may try).
  enum class Release { Done, Partial, Failed };
  void release_key(const std::string& input_sha, Release how, uint64_t bytes, uint8_t missing);
  // The key's current claim: none, in progress (its owner alive), done, or
  // free again (its owner failed, died or left it partial: it may be claimed again).
  enum class KeyState { None, InProgress, Done, Free };
  KeyState key_state(const std::string& input_sha);
  // Exclusive, per kind of evidence: false when the launch has that evidence
  // of the signature already.
  enum class SignatureEvidence { Snapshot, Profile };
  bool claim_signature(const std::string& signature_sha, SignatureEvidence kind, const std::string& path);
  void unclaim_signature(const std::string& signature_sha, SignatureEvidence kind);
  // Either kind of evidence of the signature exists in the launch.
  bool signature_claimed(const std::string& signature_sha);
  // The run budget: adds `bytes` to the launch's total unless it would pass `limit`.
  bool reserve_bytes(uint64_t bytes, uint64_t limit);
  void give_back_bytes(uint64_t bytes);
  void set_rank(int64_t rank) { rank_ = rank; }
  const std::string& dir() const { return dir_; }

 private:
  bool ensure_dir();
  bool write_claim(const std::string& name, const std::string& input_sha, const char* state, uint64_t bytes,
                   bool exclusive, int missing = -1);
  bool owner_gone(const std::string& claim_name);
  std::string newest_claim(const std::string& input_sha);  // a name in the directory, "" if none
  std::string read_claim(const std::string& name);
  std::string run_dir_, dir_;
  int dir_fd_ = -1;
  std::string host_;
  int64_t rank_;
  uint64_t start_ticks_;
  std::mutex mu_;
  std::unordered_map<std::string, int> mine_;  // input sha -> claim number held by this process
};

// The start time of a process in clock ticks since boot (/proc/PID/stat), 0 if unknown.
uint64_t process_start_ticks(long pid);

}  // namespace lingprobe::sink
