// The recorder's sink in a session: call records into the metadata writer's
// per-thread buffers, signature records into its queue (built on its thread
// when the recorder hands them over unbuilt), and each signature's SHA-256 and
// JSON to the sampling session, which names snapshot files by them (kept until
// a sampling session that starts later, in a child that becomes a rank, asks).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "api/sampling.h"
#include "capture/recorder.h"
#include "sink/metadata_writer.h"

namespace lingprobe::api {

class WriterSink : public capture::RecorderSink {
 public:
  // `writer` outlives the sink; `block`: the block overflow policy (a full buffer waits for the writer).
  WriterSink(sink::MetadataWriter* writer, bool block) : writer_(writer), block_(block) {}
  // Sampling that starts later (a child that becomes a rank) gets the signatures seen before.
  void keep_signatures() { keep_ = true; }
  // From now on each signature goes to `sampling` (the kept ones first). Once.
  void set_sampling(SamplingSession* sampling);

  runtime::RecordBuffer* register_thread_buffer(size_t capacity) override { return writer_->register_buffer(capacity); }
  void on_new_signature(uint32_t id, const std::string& sha256, const std::string& canonical_json) override;
  void on_new_signature_later(uint32_t id, SignatureBuild build) override;
  void on_signature_text(uint32_t id, const std::string& sha256, const std::string& canonical_json) override;
  void on_many_signatures(const std::string& op, bool scalars_folded) override;
  bool on_buffer_full() override;
  void on_buffer_half_full() override { writer_->wake(); }

 private:
  // The sampling session's copy of a signature (kept until it starts); any thread, any number of times.
  void tell_sampling(uint32_t id, const std::string& sha256, const std::string& canonical_json);

  sink::MetadataWriter* writer_;
  bool block_;
  std::atomic<SamplingSession*> sampling_{nullptr};
  std::mutex mu_;
  std::atomic<bool> keep_{false};
  std::vector<std::pair<uint32_t, std::pair<std::string, std::string>>> kept_;  // under mu_
};

}  // namespace lingprobe::api
