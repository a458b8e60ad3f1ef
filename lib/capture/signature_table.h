// The process's signatures: each distinct full key (op, stage, inputs,
// outputs) gets an id at its first sighting. Its canonical JSON and SHA-256
// are built on the sink's thread (RecorderSink::on_new_signature_later), from
// the arguments' JSON shared with the InputEntry and the outputs' JSON built
// now, unless the caller needs the SHA-256 at once (a sampled call's), when
// they are built here. Interning happens once per signature per process; a
// thread finds its later calls in its own InputEntry (thread_state.h) without
// coming here.
#pragma once

#include "capture/torch_guard.h"

#include <ATen/record_function.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "capture/op_registry.h"
#include "capture/recorder.h"
#include "format/json_value.h"

namespace lingprobe::capture {

class SignatureTable {
 public:
  static constexpr uint32_t kMaxSignatures = 1u << 20;

  struct Call {  // what a first sighting needs to build the signature
    const OpInfo* op;
    std::shared_ptr<const format::JsonValue> arguments;  // the InputEntry's
    c10::ArrayRef<const c10::IValue> outputs;
    StageId stage;
  };
  // The id of `words` words of full key: found, or assigned now under the
  // table's mutex, its record handed to the sink to build later
  // (on_new_signature_later). false when the table is full (kMaxSignatures).
  // `sha` (optional) receives the id's SHA-256, built now if not yet known
  // here (a new id's then goes to the sink as on_new_signature; a known one's
  // as on_signature_text). Thread-safe.
  bool resolve(const uint64_t* key, size_t words, const Call& call, RecorderSink& sink, uint32_t& id,
               std::string* sha = nullptr);
  // Ids assigned so far (release on each new id).
  const std::atomic<uint32_t>& assigned() const { return next_id_; }
  // In a forked child: the mutex as new (its holder may be gone).
  void reset_lock_after_fork() { new (&mu_) std::mutex(); }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, uint32_t> ids_;  // full key bytes -> id, under mu_
  std::vector<std::string> sha_;                   // id -> sha256 (empty: built on the sink's thread only), under mu_
  std::atomic<uint32_t> next_id_{0};
};

}  // namespace lingprobe::capture
