#include "capture/signature_table.h"

#include "capture/signature_builder.h"
#include "format/canonical_json.h"
#include "format/sha256.h"

namespace lingprobe::capture {

bool SignatureTable::resolve(const uint64_t* key, size_t words, const Call& call, RecorderSink& sink, uint32_t& id,
                             std::string* sha) {
  std::string full(reinterpret_cast<const char*>(key), words * sizeof(uint64_t));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ids_.find(full);
  if (it == ids_.end()) {
    const uint32_t next = next_id_.load(std::memory_order_relaxed);
    if (next >= kMaxSignatures) return false;
    const format::JsonValue sig =
        assemble_signature(call.op->dotted, *call.arguments,
                           build_output(call.op->schema, call.outputs, call.op->fold.returns), stage_name(call.stage));
    const std::string text = format::canonical_json(sig);
    sha_.push_back(format::sha256_hex(text));
    next_id_.store(next + 1, std::memory_order_release);
    it = ids_.emplace(std::move(full), next).first;
    sink.on_new_signature(next, sha_.back(), text);
    if (call.op->signatures.fetch_add(1, std::memory_order_relaxed) + 1 == kManySignaturesPerOp)
      sink.on_many_signatures(call.op->name, call.op->fold.arguments != 0 || call.op->fold.returns != 0);
  }
  id = it->second;
  if (sha) *sha = sha_[id];
  return true;
}

}  // namespace lingprobe::capture
