#include "api/session.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "api/exit_signals.h"
#include "api/load_check.h"
#include "api/exit_report.h"
#include "api/log.h"
#include "api/program_calls.h"
#include "api/sampling.h"
#include "api/writer_sink.h"
#include "capture/fork_gate.h"
#include "capture/nvtx_stages.h"
#include "capture/recorder.h"
#include "format/canonical_json.h"
#include "format/json_value.h"
#include "format/sha256.h"
#include "gpu/cuda_driver.h"
#include "sink/metadata_writer.h"

namespace lingprobe::api {
namespace {

int64_t clock_ns(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Session {
  std::mutex finalize_mu;  // one finalize at a time, for its whole drain (never taken by the writer thread)
  std::mutex mu;           // guards everything below except the atomics
  std::atomic<lingprobe_state> state{LINGPROBE_STATE_FRESH};
  bool config_ok = false;
  bool init_failed = false;    // running with recording off after a failed init: the next init tries again
  bool process_hooks = false;  // atexit, atfork and the first-load hooks, registered once
  Config config;
  Identity identity;
  std::string run_id;
  std::string run_dir;  // OUT/{run_id}
  std::string metadata_path;
  int64_t start_unix_ns = 0, start_mono_ns = 0;
  std::unique_ptr<WriterSink> sink;
  std::unique_ptr<sink::MetadataWriter> writer;
  std::unique_ptr<SamplingSession> sampling;            // null when sampling is off (or a child)
  std::atomic<SamplingSession*> sampling_now{nullptr};  // the same, for the writer thread's reads
  std::string control_seen;                             // last control-file content acted upon
};

// Set in a forked child's atfork handler: every entry point then returns at
// once, taking no lock (another thread of the parent may have held any of
// them at the fork, and it is gone).
std::atomic<bool> g_forked_child{false};

Session& S() {
  static Session* s = new Session;  // never destroyed: used from atexit and fork handlers
  return *s;
}

std::string header_json(const Session& s) {
  using format::JsonValue;
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  JsonValue h = JsonValue::object();
  h.set("kind", JsonValue::string("header"));
  h.set("format", JsonValue::string("lingprobe.metadata/1"));
  h.set("run_id", JsonValue::string(s.run_id));
  h.set("role", JsonValue::string(role_name(s.identity.role)));
  h.set("rank", JsonValue::integer(s.identity.rank));
  h.set("world_size", JsonValue::integer(s.identity.world_size));
  h.set("local_rank", JsonValue::integer(s.identity.local_rank));
  h.set("rank_source", JsonValue::string(s.identity.rank_source));
  if (s.identity.role == Role::Child) {
    h.set("parent_pid", JsonValue::integer(s.identity.parent_pid));
    h.set("parent_rank", JsonValue::integer(s.identity.parent_rank));
  }
  h.set("pid", JsonValue::integer(getpid()));
  h.set("host", JsonValue::string(host));
  h.set("torch_version", JsonValue::string(capture::torch_version()));
  h.set("lingprobe_version", JsonValue::string(LINGPROBE_VERSION_STRING));
  h.set("start_unix_ns", JsonValue::integer(s.start_unix_ns));
  h.set("start_mono_ns", JsonValue::integer(s.start_mono_ns));
  h.set("config", config_json(s.config));
  return format::canonical_json(h);
}

void poll_control_file() {
  Session& s = S();
  std::string path;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    path = s.config.control_file;
  }
  if (path.empty()) return;
  std::ifstream f(path);
  std::string word;
  if (!(f >> word)) return;
  if (word == s.control_seen) return;
  s.control_seen = word;
  std::string err;
  if (word == "start" || word == "stop")
    session_set_recording(word == "start", err);
  else
    log_warn("control file '" + path + "' says '" + word + "'; expected 'start' or 'stop'");
}

void start_sampling_locked(Session& s);

// The writer and the file exist from the first start on; the thread and the
// file start lazily inside the writer.
void ensure_writer_locked(Session& s) {
  if (s.writer) return;
  sink::WriterOptions wo;
  wo.path = s.metadata_path;
  wo.run_dir = s.run_dir;
  wo.flush_interval_ms = s.config.flush_interval_ms;
  wo.header_json = header_json(s);
  wo.on_open = [out = s.config.out_dir, id = s.run_id] { sink::link_latest(out, id); };
  s.writer = std::make_unique<sink::MetadataWriter>(
      wo,
      [] {
        format::CountsSnapshot counts = capture::recorder_counts();
        if (SamplingSession* sampling = S().sampling_now.load()) sampling->add_counts(counts);
        return counts;
      },
      [] {
        poll_control_file();
        if (SamplingSession* sampling = S().sampling_now.load()) sampling->poll();
      });
  s.sink = std::make_unique<WriterSink>(s.writer.get(), s.config.overflow == OverflowPolicy::Block);
  // Children do not sample: their calls are not rows, and a key a child claimed first would leave
  // the rank's signature without evidence. (A child that becomes a rank, mp.spawn, samples from then on.)
  if (s.identity.role != Role::Child)
    start_sampling_locked(s);
  else if (s.config.snapshots || s.config.profile)
    s.sink->keep_signatures();
}

void start_sampling_locked(Session& s) {
  s.sampling = SamplingSession::create(s.config, s.identity.rank, s.identity.world_size, who_of(s.identity), s.run_dir,
                                       s.run_id, s.writer.get());
  if (!s.sampling) return;
  s.sink->set_sampling(s.sampling.get());
  s.sampling_now.store(s.sampling.get());
}

capture::RecorderOptions recorder_options(const Config& c, std::string& error) {
  capture::RecorderOptions ro;
  error = ro.selection.parse(c.ops, c.ops_deny);
  if (error.empty()) {
    format::OpSelection sample_ops;
    error = sample_ops.parse(c.sample_ops, "", "LINGPROBE_SAMPLE_OPS");
  }
  ro.nested = c.nested;
  ro.suppress_nested = c.suppress_nested == SuppressNested::Always  ? capture::NestedSuppression::Always
                       : c.suppress_nested == SuppressNested::Never ? capture::NestedSuppression::Never
                                                                    : capture::NestedSuppression::Auto;
  ro.suppress_min_nested = static_cast<uint32_t>(std::min<int64_t>(c.suppress_nested_min, 1 << 20));
  ro.call_records = c.call_records;
  ro.call_times = c.call_times;
  ro.fold_scalars = c.fold_scalars;
  ro.buffer_records = static_cast<size_t>(c.buffer_records);
  ro.skip_calls = static_cast<uint64_t>(c.skip_calls);
  ro.skip_seconds = c.skip_seconds;
  return ro;
}

// What the processes this one starts inherit: the launch id (so that they
// write into the same run directory) and, unless this is torchrun's agent
// (whose workers are ranks), this process as their parent. The Python shim
// mirrors these into os.environ, which Python copied at start-up.
void export_for_children(const Session& s) {
  ::setenv("LINGPROBE_RUN_ID", s.run_id.c_str(), 1);
  if (s.identity.role == Role::Launcher) {
    ::unsetenv("LINGPROBE_PARENT_PID");
    ::unsetenv("LINGPROBE_PARENT_RANK");
    return;
  }
  ::setenv("LINGPROBE_PARENT_PID", std::to_string(getpid()).c_str(), 1);
  const int64_t rank = s.identity.role == Role::Rank ? s.identity.rank : -1;
  ::setenv("LINGPROBE_PARENT_RANK", std::to_string(rank).c_str(), 1);
}

void at_exit_finalize() { session_finalize("exit"); }

void signal_finalize(const char* signal_name) { session_finalize(signal_name); }

// Exit handlers run in reverse order. Finalize resolves GPU work (the stage clock's last intervals, device copies
// of snapshots), which fails once the CUDA driver has torn itself down at exit, and hashes the snapshots still being
// written, which crashed once libcrypto's cleanup had run: registered again when lingprobe first loads the driver and
// after its first digest, after those libraries' own exit handlers, it runs before them (a second finalize returns
// at once).
void register_finalize_again() { std::atexit(at_exit_finalize); }

void fork_prepare() { capture::ForkGate::prepare_fork(); }
void fork_parent() { capture::ForkGate::after_fork(); }

void fork_child() {
  // Only the forking thread survives: the writer thread is gone. The child
  // records nothing (its parent's file is not ours to append to).
  Session& s = S();
  g_forked_child.store(true);
  new (&s.mu) std::mutex();  // for the path getters, which still answer
  capture::stop_after_fork();
  capture::ForkGate::after_fork();
  exit_signals_after_fork();
  if (SamplingSession* sampling = s.sampling_now.load())
    sampling->after_fork();  // the stage clock stops, GPU untouched
}

const char* plain_getenv(const char* name) { return std::getenv(name); }

lingprobe_status check_running(Session& s, std::string& error) {
  const auto st = s.state.load();
  if (st == LINGPROBE_STATE_FRESH) {
    error = "lingprobe is not initialized";
    return LINGPROBE_ERROR_NOT_INITIALIZED;
  }
  if (st == LINGPROBE_STATE_FINALIZED) {
    error =
        "lingprobe was finalized: finalize() ends the process's only run; record again in a new process (stop() and "
        "start() pause and resume within the run)";
    return LINGPROBE_ERROR_FINALIZED;
  }
  if (loaded_by_ld_preload(&error)) return LINGPROBE_ERROR_UNAVAILABLE;
  if (!s.config_ok) {
    error = "lingprobe's configuration was invalid at init; recording is off";
    return LINGPROBE_ERROR_INVALID_CONFIG;
  }
  if (g_forked_child.load()) {
    error = "this is a forked child; lingprobe records only in the process that initialised it";
    return LINGPROBE_ERROR_UNAVAILABLE;
  }
  return LINGPROBE_OK;
}

// A later init's configuration against the running one: the same is idempotent; another says which options differ.
lingprobe_status same_configuration(const Config& running, const Config& asked, std::string& error) {
  const std::string differ = config_differences(running, asked);
  if (differ.empty()) return LINGPROBE_OK;
  error = "lingprobe is already initialised with other options (" + differ +
          "); the first configuration stays (the first init's, or the environment's under LD_PRELOAD or "
          "`lingprobe run`): pass the same options to go on with it";
  return LINGPROBE_ERROR_ALREADY_INITIALIZED;
}

// atexit, atfork and the first-load hooks, once (also after a failed init: a child forked then records nothing).
void register_process_hooks(Session& s) {
  if (s.process_hooks) return;
  s.process_hooks = true;
  std::atexit(at_exit_finalize);
  gpu::CudaDriver::on_first_load(&register_finalize_again);
  format::on_first_digest(&register_finalize_again);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

}  // namespace

lingprobe_status session_init(const Config& config, std::string& error) {
  Session& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.state.load() == LINGPROBE_STATE_FINALIZED) {
    error =
        "lingprobe was finalized: finalize() ends the process's only run; record again in a new process (stop() and "
        "start() pause and resume within the run)";
    return LINGPROBE_ERROR_FINALIZED;
  }
  if (s.state.load() == LINGPROBE_STATE_RUNNING && !s.init_failed) return same_configuration(s.config, config, error);
  s.config = config;
  s.init_failed = true;  // until the end
  set_log_level(config.log_level);
  s.state.store(LINGPROBE_STATE_RUNNING);
  if (loaded_by_ld_preload(&error)) return LINGPROBE_ERROR_UNAVAILABLE;  // said once at load
  register_process_hooks(s);

  std::string err;
  const capture::RecorderOptions ro = recorder_options(config, err);
  if (!err.empty()) {
    error = err;
    log_error(err + "; recording is off (run `lingprobe config` for the options)");
    return LINGPROBE_ERROR_INVALID_CONFIG;
  }
  err = capture::set_nvtx_map(config.nvtx_map);
  if (err.empty()) {
    if (std::string why = sink::check_writable_directory(config.out_dir); !why.empty())
      err = "LINGPROBE_OUT: " + why + "; set it to a directory this process can write";
  }
  if (err.empty() && !config.control_file.empty()) {
    if (std::string why = sink::check_file_path(config.control_file); !why.empty())
      err = "LINGPROBE_CONTROL_FILE: " + why;
  }
  if (!err.empty()) {
    error = err;
    log_error(err + "; recording is off");
    return LINGPROBE_ERROR_INVALID_CONFIG;
  }
  s.identity = resolve_identity(config, plain_getenv, read_own_cmdline(), getpid());
  set_log_rank(s.identity.role == Role::Rank ? s.identity.rank : -1);
  s.start_unix_ns = clock_ns(CLOCK_REALTIME);
  s.start_mono_ns = clock_ns(CLOCK_MONOTONIC);
  s.run_id = resolve_run_id(config, plain_getenv, getpid(), getppid(), s.start_unix_ns / 1000000000);
  s.run_dir = sink::run_directory(config.out_dir, s.run_id);
  s.metadata_path = metadata_path_for(s.run_dir, s.identity);
  export_for_children(s);
  s.config_ok = true;
  s.init_failed = false;
  if (s.identity.role == Role::Launcher) {
    log_info("torchrun launcher process: recording nothing here (the ranks record into " + s.run_dir + ")");
    s.config_ok = false;  // start/stop refuse; no hook, no file
    return LINGPROBE_OK;
  }
  ensure_writer_locked(s);
  if (config.signal_flush) install_exit_signal_flush(signal_finalize);
  capture::RecorderOptions options = ro;
  if (s.sampling) {
    options.sampler = s.sampling->sampler();
    options.hooks = s.sampling->hooks();
    options.stage_timing = s.sampling->stage_timing();
  }
  capture::install_recorder(options, s.sink.get());
  if (!config.control_file.empty()) s.writer->start();
  if (config.enable) capture::set_recording(true);
  log_debug("initialised: " + s.metadata_path + (config.enable ? " (recording)" : " (waiting for start)"));
  return LINGPROBE_OK;
}

bool session_init_invalid() {
  Session& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.state.load() != LINGPROBE_STATE_FRESH && !s.init_failed) return false;
  s.config_ok = false;
  s.init_failed = true;
  s.state.store(LINGPROBE_STATE_RUNNING);
  register_process_hooks(s);
  return true;
}

lingprobe_status session_set_recording(bool on, std::string& error) {
  Session& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (auto st = check_running(s, error); st != LINGPROBE_OK) return st;
  capture::set_recording(on);
  return LINGPROBE_OK;
}

lingprobe_status session_flush(std::string& error) {
  Session& s = S();
  sink::MetadataWriter* w;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (auto st = check_running(s, error); st != LINGPROBE_OK) return st;
    w = s.writer.get();
  }
  if (w) w->flush();
  return LINGPROBE_OK;
}

lingprobe_status session_stop(std::string& error) {
  if (auto st = session_set_recording(false, error); st != LINGPROBE_OK) return st;
  if (session_flush(error) == LINGPROBE_ERROR_FINALIZED) error.clear();  // finalized meanwhile: written, and stopped
  return LINGPROBE_OK;
}

lingprobe_status session_finalize(const char* ended_by) {
  if (g_forked_child.load()) return LINGPROBE_OK;  // the parent's files are not the child's to close
  Session& s = S();
  // Held for the whole drain, so a second finalize (atexit beside an explicit
  // call) returns once the files are complete. s.mu is held only to flip the
  // state: the writer thread's cycle takes s.mu (control file, sampling poll),
  // and joining that thread while holding it hung processes at exit.
  std::lock_guard<std::mutex> finalizing(s.finalize_mu);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto st = s.state.load();
    if (st == LINGPROBE_STATE_FRESH) return LINGPROBE_ERROR_NOT_INITIALIZED;
    if (st == LINGPROBE_STATE_FINALIZED) return LINGPROBE_OK;
    s.state.store(LINGPROBE_STATE_FINALIZED);
  }
  // Fixed order: stop the hook, then drain the snapshots, then drain and close
  // the writer. Every other call sees FINALIZED under s.mu and touches neither.
  capture::set_recording(false);
  capture::uninstall_recorder();
  warn_stages_left_pushed_at_finalize();
  const ExitReport report = exit_report(s.config, s.identity, s.config_ok);
  if (report.keep_empty && s.writer) s.writer->keep_even_if_empty();
  if (s.sampling) s.sampling->finalize();  // its snapshot records go into the metadata file first
  if (s.writer) s.writer->finalize(ended_by);
  say_exit_report(report, s.config, s.metadata_path, s.run_dir,
                  s.sampling ? std::optional<SamplingTally>(s.sampling->tally()) : std::nullopt);
  return LINGPROBE_OK;
}

bool session_hold_counters(bool hold) { return hold_counters(hold); }

lingprobe_status session_set_rank(int64_t rank, int64_t local_rank, int64_t world_size, std::string& error) {
  Session& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (auto st = check_running(s, error); st != LINGPROBE_OK) return st;
  Identity id = s.identity;
  if (rank >= 0) id.rank = rank, id.rank_source = "api";
  if (local_rank >= 0)
    id.local_rank = local_rank;
  else if (rank >= 0 && s.identity.role != Role::Rank)
    id.local_rank = id.rank;
  if (world_size >= 0)
    id.world_size = world_size;
  else if (id.world_size <= id.rank)
    id.world_size = id.rank + 1;
  id.role = Role::Rank;
  id.parent_pid = id.parent_rank = -1;
  const Identity& cur = s.identity;
  if (cur.role == Role::Rank && cur.rank == id.rank && cur.local_rank == id.local_rank &&
      cur.world_size == id.world_size)
    return LINGPROBE_OK;  // nothing changes (torchrun's RANK agrees with init_process_group)
  Identity previous = s.identity;
  s.identity = id;
  const std::string path = metadata_path_for(s.run_dir, id);
  if (!s.writer->retarget(path, header_json(s))) {
    s.identity = previous;
    error = "the rank must be set before lingprobe's first flush (it names the metadata file, which '" +
            s.metadata_path + "' already is); set LINGPROBE_RANK, or call set_rank before the first recorded op";
    return LINGPROBE_ERROR_INVALID_ARGUMENT;
  }
  s.metadata_path = path;
  set_log_rank(id.rank);
  if (s.sampling) {
    s.sampling->set_identity(id.rank, id.world_size, who_of(id));
  } else if (previous.role == Role::Child) {  // a child that became a rank (mp.spawn) samples from now on
    start_sampling_locked(s);
    if (s.sampling) capture::enable_sampling(s.sampling->sampler(), s.sampling->hooks(), s.sampling->stage_timing());
  }
  export_for_children(s);
  return LINGPROBE_OK;
}

lingprobe_state session_state() {
  // a child of a process that had initialised: the parent's state is not this process's
  if (g_forked_child.load() && S().state.load() != LINGPROBE_STATE_FRESH) return LINGPROBE_STATE_FORKED_CHILD;
  return S().state.load();
}

bool session_in_forked_child() { return g_forked_child.load(std::memory_order_relaxed); }

void session_stats(lingprobe_stats& out) {
  Session& s = S();
  out.state = static_cast<int32_t>(session_state());
  if (g_forked_child.load()) return;  // nothing recorded here; the figures are the parent's
  const auto r = capture::recorder_stats();
  out.calls_seen = r.calls_seen;
  out.calls_recorded = r.calls_recorded;
  out.signatures = r.signatures;
  out.dropped = r.dropped;
  out.nested_seen = r.nested_seen;
  out.nested_suppressed = r.nested_suppressed;
  out.recording = capture::recording() ? 1 : 0;
  out.state = static_cast<int32_t>(s.state.load());
  std::lock_guard<std::mutex> lock(s.mu);
  out.records_written = s.writer ? s.writer->stats().records_written : 0;
  out.snapshots_written = s.sampling ? s.sampling->snapshots_written() : 0;
  out.snapshot_bytes = s.sampling ? s.sampling->snapshot_bytes() : 0;
  out.rank = s.identity.rank;
  out.world_size = s.identity.world_size;
}

lingprobe_status session_metadata_path(std::string& path) {
  Session& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.state.load() == LINGPROBE_STATE_FRESH) return LINGPROBE_ERROR_NOT_INITIALIZED;
  path = s.metadata_path;
  return LINGPROBE_OK;
}

lingprobe_status session_run_dir(std::string& path) {
  Session& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.state.load() == LINGPROBE_STATE_FRESH) return LINGPROBE_ERROR_NOT_INITIALIZED;
  path = s.run_dir;
  return LINGPROBE_OK;
}

}  // namespace lingprobe::api
