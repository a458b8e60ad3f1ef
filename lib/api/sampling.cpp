#include "api/sampling.h"
#include "api/host_route.h"
#include "api/log.h"
#include "api/sample_plan_source.h"
#include "api/stage_gpu_time.h"

#include "capture/torch_guard.h"

#include <mutex>

#include "capture/sampler.h"
#include "format/canonical_json.h"
#include "capture/snapshot_capture.h"
#include "gpu/counter_windows.h"
#include "gpu/cuda_driver.h"
#ifdef LINGPROBE_HAVE_CUPTI
#include "gpu/cupti_profiler.h"  // seed_metrics
#endif

#include <unistd.h>
#include <cstdlib>
#include "sink/claims.h"
#include "sink/run_directory.h"
#include "sink/snapshot_writer.h"
#include "runtime/snapshot_job.h"

namespace lingprobe::api {
namespace {

// The reason a refused window gives in the sampler's records.
std::string refusal_reason(gpu::WindowRefusal r, const std::string& detail) {
  switch (r) {
    case gpu::WindowRefusal::NoDriver: return detail;
    case gpu::WindowRefusal::ProfilerActive: return "profiler_active";
    case gpu::WindowRefusal::WindowBusy: return "window_busy";
    case gpu::WindowRefusal::SubscriberHeld: return "subscriber_held";
    case gpu::WindowRefusal::HardwareBusy: return "hardware_busy";
    case gpu::WindowRefusal::Unavailable: return "counters_unavailable";
    case gpu::WindowRefusal::NotBuilt: return "not_built_with_cupti";
    case gpu::WindowRefusal::NotOpened:
    case gpu::WindowRefusal::None: break;
  }
  return "window_not_opened";
}

// capture's GPU needs over gpu: the CUDA driver (loaded on first use) and the process's counter windows.
class CudaAccess : public capture::DeviceAccess {
 public:
  // `lock_dir`: RUN_DIR/claims, where the launch's per-GPU counter locks live
  // (opened beneath the run directory without following a symlink).
  // `run_on_writer`: a chore on the evidence writer's thread (pinned memory for the host route).
  CudaAccess(std::vector<std::string> metrics, std::function<void(std::string)> on_probe, std::string lock_dir,
             bool unguarded, gpu::PinnedReserve::RunOnWriter run_on_writer)
      : windows_({std::move(metrics), std::move(on_probe), lock_directory(std::move(lock_dir)), unguarded}),
        host_route_(std::move(run_on_writer)) {}
  Capture stream_capture(void* stream) override {
    gpu::CudaDriver* d = gpu::CudaDriver::get();
    if (!d) return Capture::Unknown;
    switch (d->stream_capture(stream)) {
      case gpu::CudaDriver::Capture::None: return Capture::None;
      case gpu::CudaDriver::Capture::Active: return Capture::Active;
      default: return Capture::Unknown;
    }
  }
  std::shared_ptr<void> relax_capture_mode() override {
    gpu::CudaDriver* d = gpu::CudaDriver::get();
    if (!d) return nullptr;
    const int previous = d->relax_capture_mode();
    return std::shared_ptr<void>(nullptr, [d, previous](void*) { d->restore_capture_mode(previous); });
  }
  std::unique_ptr<capture::DeviceTransfer> transfer(int device, void* stream, const void* ptr, size_t n,
                                                    std::string& error) override {
    gpu::CudaDriver* d = gpu::CudaDriver::get(&error);
    if (!d) return nullptr;
    void* ev = d->record_event(device, stream, error);
    if (!ev) return nullptr;
    return std::make_unique<Transfer>(d, device, ev, ptr, n);
  }
  std::unique_ptr<capture::CounterWindow> open_counters(int device, void* stream, std::string& reason) override {
    gpu::WindowRefusal refusal = gpu::WindowRefusal::None;
    std::string detail;
    std::unique_ptr<gpu::OpenCounterWindow> w = windows_.open(device, stream, refusal, detail);
    if (!w) {
      reason = refusal_reason(refusal, detail);
      return nullptr;
    }
    return std::make_unique<Window>(std::move(w));
  }
  std::unique_ptr<capture::CounterWindow> open_timing(int device, void* stream, std::string& reason) override {
    gpu::WindowRefusal refusal = gpu::WindowRefusal::None;
    std::string detail;
    std::unique_ptr<gpu::OpenCounterWindow> w = windows_.open_timing(device, stream, refusal, detail);
    if (!w) {
      reason = refusal_reason(refusal, detail);
      return nullptr;
    }
    return std::make_unique<Window>(std::move(w));
  }
  void want_host_buffer(int device, uint64_t nbytes) override { host_route_.want(device, nbytes); }
  std::shared_ptr<capture::HostBuffer> take_host_buffer(uint64_t nbytes) override { return host_route_.take(nbytes); }
  void counter_call_ended(int device) override { windows_.counter_call_ended(device); }
  bool settling_after_window(int device) const override { return windows_.settling_after_window(device); }
  uint64_t window_epoch(int device) { return windows_.window_epoch(device); }
  void poll() { windows_.poll(); }
  uint64_t windows() const { return windows_.windows(); }
  uint64_t stall_us() const { return windows_.stall_us(); }

 private:
  static gpu::CounterLock::OpenDirectory lock_directory(std::string lock_dir) {
    return [lock_dir = std::move(lock_dir)]() -> int {
      const size_t cut = lock_dir.rfind('/');
      const std::string root = cut == std::string::npos ? "." : lock_dir.substr(0, cut);
      if (!sink::make_directories(root).empty()) return -1;
      return sink::open_directory_beneath(root, lock_dir.substr(cut + 1), true);
    };
  }

  class Window : public capture::CounterWindow {
   public:
    explicit Window(std::unique_ptr<gpu::OpenCounterWindow> w) : w_(std::move(w)) {}
    void stop() override { w_->stop(); }
    format::ProfileData close() override { return w_->close(); }

   private:
    std::unique_ptr<gpu::OpenCounterWindow> w_;
  };

  class Transfer : public capture::DeviceTransfer {
   public:
    Transfer(gpu::CudaDriver* d, int device, void* ev, const void* ptr, size_t n)
        : d_(d), device_(device), ev_(ev), ptr_(ptr), n_(n) {}
    ~Transfer() override { d_->destroy_event(device_, ev_); }
    std::string stream(const std::function<bool(const void*, size_t)>& out) override {
      return d_->copy_to_host(device_, ev_, ptr_, n_, out);
    }

   private:
    gpu::CudaDriver* d_;
    int device_;
    void* ev_;
    const void* ptr_;
    size_t n_;
  };

  gpu::CounterWindows windows_;
  HostRoute host_route_;
};

class Broker : public capture::ClaimBroker, public capture::RunBudget {
 public:
  Broker(sink::Claims* claims, uint64_t run_limit) : claims_(claims), run_limit_(run_limit) {}
  Outcome claim_key(const std::string& sha, uint8_t& still_missing) override {
    switch (claims_->claim_key(sha, still_missing)) {
      case sink::Claims::Outcome::Owned: return Outcome::Owned;
      case sink::Claims::Outcome::Held: return Outcome::HeldElsewhere;
      default: return Outcome::Unavailable;
    }
  }
  void release_key(const std::string& sha, Release how, uint64_t bytes, uint8_t missing) override {
    using Claimed = sink::Claims::Release;
    claims_->release_key(sha,
                         how == Release::Done      ? Claimed::Done
                         : how == Release::Partial ? Claimed::Partial
                                                   : Claimed::Failed,
                         bytes, missing);
  }
  KeyProgress key_progress(const std::string& sha) override {
    switch (claims_->key_state(sha)) {
      case sink::Claims::KeyState::Done: return KeyProgress::Done;
      case sink::Claims::KeyState::InProgress: return KeyProgress::InProgress;
      default: return KeyProgress::Free;
    }
  }
  bool signature_sampled(const std::string& sha) override { return claims_->signature_claimed(sha); }
  bool reserve(uint64_t bytes) override { return claims_->reserve_bytes(bytes, run_limit_); }
  void give_back(uint64_t bytes) override { claims_->give_back_bytes(bytes); }

 private:
  sink::Claims* claims_;
  uint64_t run_limit_;
};

class WriterSink : public capture::SnapshotSink {
 public:
  explicit WriterSink(sink::SnapshotWriter* w) : w_(w) {}
  void submit(runtime::SnapshotJob job) override { w_->submit(std::move(job)); }

 private:
  sink::SnapshotWriter* w_;
};

std::vector<std::string> metrics_of(const Config& c) {
#ifdef LINGPROBE_HAVE_CUPTI
  if (c.profile_metrics.empty()) return gpu::seed_metrics();
#endif
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= c.profile_metrics.size()) {
    size_t end = c.profile_metrics.find(',', pos);
    if (end == std::string::npos) end = c.profile_metrics.size();
    if (end > pos) out.push_back(c.profile_metrics.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

capture::Coordination coordination_of(SampleCoordination c) {
  switch (c) {
    case SampleCoordination::Hash: return capture::Coordination::Hash;
    case SampleCoordination::None: return capture::Coordination::None;
    case SampleCoordination::Claims: break;
  }
  return capture::Coordination::Claims;
}

// Whether the machine shows this process an NVIDIA GPU, without
// initialising CUDA (lazy CUDA: nothing here may start it).
bool gpu_on_machine() {
  if (::access("/dev/nvidiactl", F_OK) != 0) return false;
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return !v || (*v && std::string(v) != "-1");
}

capture::SnapshotOptions snapshot_options(const Config& c, int64_t rank, const std::string& run_id, bool gpu) {
  capture::SnapshotOptions o;
  o.fold_scalars = c.fold_scalars;
  o.snapshots = c.snapshots;
  o.profile = c.profile;
  o.budget_process = static_cast<uint64_t>(c.sample_budget_process);
  o.budget_device = static_cast<uint64_t>(c.sample_budget_device);
  o.rank = rank;
  o.run_id = run_id;
  o.gpu_on_machine = gpu;
  o.gpu_calls_only =
      c.sample_devices == SampleDevices::Gpu || (c.sample_devices == SampleDevices::Auto && o.gpu_on_machine);
  o.profile_budget_s = c.profile_budget_s;
  return o;
}

// One refusal record (once per key, evidence and reason): where each key's evidence went.
std::string refusal_record(const capture::SampleKey& k, const char* evidence, const std::string& reason,
                           uint64_t call) {
  format::JsonValue r = format::JsonValue::object();
  r.set("kind", format::JsonValue::string("refusal"));
  r.set("input_sha256", format::JsonValue::string(k.input_sha));
  r.set("op", format::JsonValue::string(k.op));
  r.set("stage", format::JsonValue::string(k.stage));
  r.set("evidence", format::JsonValue::string(evidence));
  r.set("reason", format::JsonValue::string(reason));
  r.set("call", format::JsonValue::integer(static_cast<int64_t>(call)));
  return format::canonical_json(r) + "\n";
}

}  // namespace

struct SamplingSession::Parts {
  sink::Claims claims;
  Broker broker;
  sink::SnapshotWriter writer;
  WriterSink writer_sink;
  CudaAccess cuda;
  capture::Sampler sampler;
  capture::SnapshotCapture snapshots;
  std::unique_ptr<StageGpuTime> stage_time;  // PROFILE with STAGE_GPU_TIME
  std::unique_ptr<LoadedPlan> plan;          // SAMPLE_PLAN
  sink::MetadataWriter* metadata;
  SampleDevices sample_devices;

  Parts(const Config& c, int64_t rank, const std::string& who, const std::string& run_dir, const std::string& run_id,
        sink::MetadataWriter* metadata, bool gpu)
      : claims(run_dir, rank),
        broker(&claims, static_cast<uint64_t>(c.sample_budget_run)),
        writer(run_dir, who, metadata, c.sample_coordination == SampleCoordination::Claims ? &claims : nullptr),
        writer_sink(&writer),
        cuda(
            metrics_of(c), [metadata](std::string line) { metadata->add_record(std::move(line)); }, run_dir + "/claims",
            c.profile_unguarded, [this](std::function<void()> chore) { return writer.run_chore(std::move(chore)); }),
        snapshots(&sampler, &writer_sink, &broker, &cuda, snapshot_options(c, rank, run_id, gpu)),
        plan(load_sample_plan(c, gpu)),
        metadata(metadata),
        sample_devices(c.sample_devices) {
    if (c.profile && c.stage_gpu_time)
      stage_time = std::make_unique<StageGpuTime>([this](int device) { return cuda.window_epoch(device); });
  }
};

SamplingSession::SamplingSession(std::unique_ptr<Parts> parts) : parts_(std::move(parts)) {}
SamplingSession::~SamplingSession() { finalize(); }

namespace {

// The sampling options choose which calls get snapshots or counters: with neither on, one line says they do nothing.
void warn_sampling_options_without_evidence(const Config& c) {
  const Config defaults;
  std::string set;
  for (const auto& [name, changed] :
       {std::pair<const char*, bool>{"LINGPROBE_SAMPLE_PLAN", !c.sample_plan.empty()},
        {"LINGPROBE_SAMPLE_OPS", c.sample_ops != defaults.sample_ops},
        {"LINGPROBE_SAMPLE_FIRST", c.sample_first != defaults.sample_first},
        {"LINGPROBE_SAMPLE_SKIP", c.sample_skip != defaults.sample_skip},
        {"LINGPROBE_SAMPLE_EVERY", c.sample_every != defaults.sample_every},
        {"LINGPROBE_SAMPLE_PROBABILITY", c.sample_probability != defaults.sample_probability}})
    if (changed) set += std::string(set.empty() ? "" : ", ") + name;
  if (!set.empty())
    log_warn(set + " choose(s) the calls that get snapshots or counters, but neither LINGPROBE_SNAPSHOTS=1 nor " +
             "LINGPROBE_PROFILE=1 is set: ignored; set one of them to take evidence");
}

}  // namespace

std::unique_ptr<SamplingSession> SamplingSession::create(const Config& c, int64_t rank, int64_t world_size,
                                                         const std::string& who, const std::string& run_dir,
                                                         const std::string& run_id, sink::MetadataWriter* metadata) {
  if (!c.snapshots && !c.profile) {
    warn_sampling_options_without_evidence(c);
    return nullptr;
  }
  const bool gpu = gpu_on_machine();
  auto parts = std::make_unique<Parts>(c, rank, who, run_dir, run_id, metadata, gpu);
  capture::SamplingOptions so;
  so.enabled = true;
  so.first = static_cast<uint64_t>(c.sample_first);
  so.skip = static_cast<uint64_t>(c.sample_skip);
  so.every = static_cast<uint64_t>(c.sample_every);
  so.probability = c.sample_probability;
  so.seed = static_cast<uint64_t>(c.sample_seed);
  (void)so.selection.parse(c.sample_ops, "");  // validated with the configuration
  so.coordination = coordination_of(c.sample_coordination);
  so.evidence = static_cast<uint8_t>((c.snapshots ? capture::kSnapshot : 0) | (c.profile ? capture::kCounters : 0) |
                                     (c.profile && c.profile_timing ? capture::kTiming : 0));
  if (parts->plan) so.plan = parts->plan->keys;
  parts->sampler.configure(so, &parts->broker, rank, world_size);
  parts->sampler.set_refusal_sink(
      [metadata](const capture::SampleKey& k, const char* evidence, const std::string& reason, uint64_t call) {
        metadata->add_record(refusal_record(k, evidence, reason, call));
      });
  if (c.profile && !gpu)
    log_warn(
        "LINGPROBE_PROFILE=1, but this machine shows the process no NVIDIA GPU (no /dev/nvidiactl, or "
        "CUDA_VISIBLE_DEVICES hides them): no counters will be taken" +
        std::string(c.snapshots ? "; snapshots go on" : ""));
  return std::unique_ptr<SamplingSession>(new SamplingSession(std::move(parts)));
}

capture::Sampler* SamplingSession::sampler() { return &parts_->sampler; }
capture::SampledCallHooks* SamplingSession::hooks() { return &parts_->snapshots; }
capture::StageTiming* SamplingSession::stage_timing() { return parts_->stage_time.get(); }

void SamplingSession::on_new_signature(uint32_t id, const std::string& sha, const std::string& text) {
  parts_->writer.add_signature(id, sha, text);
}

void SamplingSession::poll() {
  parts_->sampler.poll();
  parts_->cuda.poll();
  if (parts_->stage_time) parts_->stage_time->poll();
}

void SamplingSession::add_counts(format::CountsSnapshot& counts) {
  for (const auto& [what, reasons] : parts_->snapshots.drops())
    for (const auto& [reason, n] : reasons) counts.dropped[what][reason] += n;
  const capture::SamplingStats s = parts_->sampler.stats();
  counts.sampling["keys"] = s.keys;
  counts.sampling["keys_sampled"] = s.sampled;
  counts.sampling["samples"] = s.samples;
  counts.sampling["snapshots_written"] = parts_->writer.written();
  counts.sampling["profiles_written"] = parts_->writer.profiles_written();
  counts.sampling["snapshot_bytes"] = parts_->writer.bytes_written();
  if (parts_->cuda.windows() || parts_->cuda.stall_us()) {
    counts.sampling["profile_windows"] = parts_->cuda.windows();
    counts.sampling["profile_stall_us"] = parts_->cuda.stall_us();
  }
  counts.unsampled = parts_->sampler.unsampled_reasons();
  if (parts_->stage_time) parts_->stage_time->add_counts(counts);
}

void SamplingSession::set_identity(int64_t rank, int64_t world_size, const std::string& who) {
  parts_->sampler.set_rank(rank, world_size);
  parts_->snapshots.set_rank(rank);
  parts_->writer.set_who(who);
  parts_->claims.set_rank(rank);
}

bool hold_counters(bool hold, int wait_seconds) { return gpu::hold_counters(hold, wait_seconds); }

void SamplingSession::finalize() {
  if (gpu::CudaDriver* d = gpu::CudaDriver::loaded()) d->set_finishing();  // no exit hangs behind a stuck stream
  if (parts_->stage_time) parts_->stage_time->finalize();                  // before the final counts record
  if (parts_->plan && !plan_written_.exchange(true))
    parts_->metadata->add_record(plan_record(*parts_->plan, parts_->sampler.plan_unmet()));
  parts_->writer.finalize();
  if (!exit_said_.exchange(true)) say_if_nothing_ran_on_the_gpu();  // after the drain: the samples' verdicts are in
}
// A program whose due keys all ran off the GPU while only GPU calls are sampled (a CPU job on a GPU machine) ends
// with no evidence: said once, at exit, with the option that samples its calls. Not when any key was sampled, here
// or by another process, or stays unsampled for another reason.
void SamplingSession::say_if_nothing_ran_on_the_gpu() {
  uint64_t off_gpu = 0, other = 0;
  const std::string suffix = ":not_on_gpu";
  for (const auto& [reason, keys] : parts_->sampler.unsampled_reasons())
    (reason.size() > suffix.size() && reason.compare(reason.size() - suffix.size(), suffix.size(), suffix) == 0
         ? off_gpu
         : other) += keys;
  if (off_gpu == 0 || other > 0 || parts_->sampler.stats().sampled > 0) return;
  log_warn(std::to_string(off_gpu) +
           " input key(s) were not sampled: their calls ran on the CPU or the meta device, "
           "and only GPU calls are sampled (LINGPROBE_SAMPLE_DEVICES=" +
           std::string(parts_->sample_devices == SampleDevices::Gpu ? "gpu" : "auto, on a machine with an NVIDIA GPU") +
           "); set LINGPROBE_SAMPLE_DEVICES=any to sample them");
}

void SamplingSession::after_fork() {
  if (parts_->stage_time) parts_->stage_time->after_fork();
}
uint64_t SamplingSession::snapshots_written() const { return parts_->writer.written(); }
uint64_t SamplingSession::snapshot_bytes() const { return parts_->writer.bytes_written(); }
SamplingTally SamplingSession::tally() const {
  SamplingTally t;
  t.snapshots = parts_->writer.written();
  t.stall_s = static_cast<double>(parts_->cuda.stall_us()) / 1e6;
  const format::DropCounts drops = parts_->snapshots.drops();
  if (const auto profiles = drops.find("profiles"); profiles != drops.end())
    if (const auto spent = profiles->second.find("budget_profile"); spent != profiles->second.end())
      t.budget_profile_calls = spent->second;
  return t;
}

}  // namespace lingprobe::api
