// The process's signatures: each distinct full key (op, stage, inputs,
// outputs) gets an id at its first sighting, when its canonical JSON and
// SHA-256 are built and handed to the sink. Interning happens once per
// signature per process; a thread finds its later calls in its own
// InputEntry (thread_state.h) without coming here.
#pragma once

#include "capture/torch_guard.h"

#include <ATen/record_function.h>

#include <atomic>
#include <cstdint>
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
    const format::JsonValue* arguments;  // the InputEntry's
    c10::ArrayRef<const c10::IValue> outputs;
    StageId stage;
  };
  // The id of `words` words of full key: found, or assigned now (the JSON,
  // its SHA-256 and the sink's on_new_signature, under the table's mutex).
  // false when the table is full (kMaxSignatures). `sha` (optional) receives
  // the id's SHA-256. Thread-safe.
  bool resolve(const uint64_t* key, size_t words, const Call& call, RecorderSink& sink, uint32_t& id,
               std::string* sha = nullptr);
  // Ids assigned so far (release on each new id).
  const std::atomic<uint32_t>& assigned() const { return next_id_; }
  // In a forked child: the mutex as new (its holder may be gone).
  void reset_lock_after_fork() { new (&mu_) std::mutex(); }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, uint32_t> ids_;  // full key bytes -> id, under mu_
  std::vector<std::string> sha_;                   // id -> sha256, under mu_
  std::atomic<uint32_t> next_id_{0};
};

}  // namespace lingprobe::capture
