#include "api/writer_sink.h"

#include <chrono>
#include <thread>

#include "api/log.h"

namespace lingprobe::api {

void WriterSink::set_sampling(SamplingSession* sampling) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, sha_text] : kept_) sampling->on_new_signature(id, sha_text.first, sha_text.second);
  kept_.clear();
  keep_ = false;
  sampling_.store(sampling);
}

// Told twice (a signature built for a sampled call, then by the writer) is harmless: the snapshot writer keeps the
// last copy of an id's text, and both are equal.
void WriterSink::tell_sampling(uint32_t id, const std::string& sha, const std::string& json) {
  SamplingSession* sampling = sampling_.load();
  if (!sampling && keep_) {
    std::lock_guard<std::mutex> lock(mu_);
    if (keep_) {
      kept_.emplace_back(id, std::make_pair(sha, json));
      return;
    }
    sampling = sampling_.load();  // set_sampling ran since: it stores the session before it lets go of mu_
  }
  if (sampling) sampling->on_new_signature(id, sha, json);  // the snapshot writer names files by it
}

void WriterSink::on_new_signature(uint32_t id, const std::string& sha, const std::string& json) {
  tell_sampling(id, sha, json);
  writer_->add_signature(id, sha, json);
}

void WriterSink::on_new_signature_later(uint32_t id, SignatureBuild build) {
  writer_->add_signature(id, [this, id, build = std::move(build)](std::string& sha, std::string& json) {
    build(sha, json);
    tell_sampling(id, sha, json);
  });
}

void WriterSink::on_signature_text(uint32_t id, const std::string& sha, const std::string& json) {
  tell_sampling(id, sha, json);
}

void WriterSink::on_many_signatures(const std::string& op, bool scalars_folded) {
  log_warn(op + " has minted " + std::to_string(capture::kManySignaturesPerOp) + " signatures" +
           (scalars_folded ? " with its scalar values folded: its tensors' shapes change call to call"
                           : ": if scalar values (positions, indices) differ call to call, "
                             "LINGPROBE_FOLD_SCALARS=1 writes them as their type"));
}

bool WriterSink::on_buffer_full() {
  if (!block_ || writer_->finalized()) return false;
  writer_->wake();
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  return true;
}

}  // namespace lingprobe::api
