#include "capture/signature_table.h"

#include "capture/signature_builder.h"
#include "format/canonical_json.h"
#include "format/sha256.h"

namespace lingprobe::capture {

namespace {

// A signature's canonical JSON and SHA-256 from what its first sighting saw.
void build_signature(const OpInfo& op, const format::JsonValue& arguments, format::JsonValue output,
                     const std::string& stage, std::string& sha, std::string& text) {
  text = format::canonical_json(assemble_signature(op.dotted, arguments, std::move(output), stage));
  sha = format::sha256_hex(text);
}

}  // namespace

bool SignatureTable::resolve(const uint64_t* key, size_t words, const Call& call, RecorderSink& sink, uint32_t& id,
                             std::string* sha) {
  std::string full(reinterpret_cast<const char*>(key), words * sizeof(uint64_t));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ids_.find(full);
  if (it == ids_.end()) {
    const uint32_t next = next_id_.load(std::memory_order_relaxed);
    if (next >= kMaxSignatures) return false;
    format::JsonValue output = build_output(call.op->schema, call.outputs, call.op->fold.returns);
    sha_.emplace_back();
    next_id_.store(next + 1, std::memory_order_release);
    it = ids_.emplace(std::move(full), next).first;
    if (sha) {  // wanted now: built here
      std::string text;
      build_signature(*call.op, *call.arguments, std::move(output), stage_name(call.stage), sha_.back(), text);
      sink.on_new_signature(next, sha_.back(), text);
    } else {
      sink.on_new_signature_later(
          next, [op = call.op, arguments = call.arguments, output = std::move(output), stage = stage_name(call.stage)](
                    std::string& sha256, std::string& text) mutable {
            build_signature(*op, *arguments, std::move(output), stage, sha256, text);  // run once
          });
    }
    if (call.op->signatures.fetch_add(1, std::memory_order_relaxed) + 1 == kManySignaturesPerOp)
      sink.on_many_signatures(call.op->name, call.op->fold.arguments != 0 || call.op->fold.returns != 0);
  }
  id = it->second;
  if (!sha) return true;
  if (sha_[id].empty()) {  // its record went to the sink to build later: built here too (equal keys, equal text)
    std::string text;
    build_signature(*call.op, *call.arguments, build_output(call.op->schema, call.outputs, call.op->fold.returns),
                    stage_name(call.stage), sha_[id], text);
    sink.on_signature_text(id, sha_[id], text);
  }
  *sha = sha_[id];
  return true;
}

}  // namespace lingprobe::capture
