// The evidence writer's counts: a profile-only job (snapshots off, counters
// on) writes a profile directory and no snapshot, and is counted as such.
// Before the fix it counted as a snapshot: the 4-rank --select all report's
// summary said "431 snapshot(s), 0B" with snapshots off.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "format/snapshot_file.h"
#include "sink/metadata_writer.h"
#include "sink/snapshot_writer.h"
#include "runtime/snapshot_job.h"
#include "test_support.h"

using namespace lingprobe;

namespace {
bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// A job of signature 1 with counters of `status` (and a snapshot document if `snapshot`); `kept` gets its kept
// bits, or 0xff where it was no kept job.
runtime::SnapshotJob profile_job(bool snapshot, const char* status, uint8_t& kept) {
  runtime::SnapshotJob job;
  job.signature_id = 1;
  job.stage = "dit";
  job.snapshot = snapshot;
  job.document = format::PickleValue::dict();
  job.profiled = true;
  job.profile.status = status;
  job.done = [&kept](runtime::SnapshotJob::Result r, const std::string&, const std::string&, uint8_t which) {
    kept = r == runtime::SnapshotJob::Result::Kept ? which : 0xff;
  };
  return job;
}

// Two processes' writers of one launch, each given one job of signature 1, run one after the other.
struct TwoProcesses {
  sink::Claims claims0, claims1;
  sink::MetadataWriter metadata;
  sink::SnapshotWriter rank0, rank1;
  TwoProcesses(const std::string& run, const std::string& sha)
      : claims0(run, 0),
        claims1(run, 1),
        metadata({run + "/metadata/m.jsonl", "{\"kind\":\"header\"}", 10000, {}, run},
                 [] { return format::CountsSnapshot{}; }),
        rank0(run, "rank0", &metadata, &claims0),
        rank1(run, "rank1", &metadata, &claims1) {
    rank0.add_signature(1, sha, "{\"op\":\"aten.mm.default\"}");
    rank1.add_signature(1, sha, "{\"op\":\"aten.mm.default\"}");
  }
  void write(runtime::SnapshotJob job0, runtime::SnapshotJob job1) {
    rank0.submit(std::move(job0));
    rank0.finalize();
    rank1.submit(std::move(job1));
    rank1.finalize();
    metadata.finalize();
  }
};
}  // namespace

TEST_CASE("a profile-only job counts as a profile, not as a snapshot", "[sink][snapshot]") {
  const std::string dir = test::temp_dir("lingprobe-evidence-");
  const std::string run = dir;
  REQUIRE(std::system(("mkdir -p " + run + "/metadata " + run + "/snapshots " + run + "/profiles").c_str()) == 0);
  sink::MetadataWriter metadata({run + "/metadata/m.jsonl", "{\"kind\":\"header\"}", 10000, {}, run},
                                [] { return format::CountsSnapshot{}; });
  sink::SnapshotWriter writer(run, "rank0", &metadata, nullptr);
  const std::string sha(64, 'a');
  writer.add_signature(0, sha, "{\"op\":\"aten.mm.default\"}");
  std::string kept;
  runtime::SnapshotJob job;
  job.signature_id = 0;
  job.stage = "dit";
  job.snapshot = false;
  job.profiled = true;
  job.profile.status = "passed";
  uint8_t files = 0;
  job.done = [&](runtime::SnapshotJob::Result r, const std::string& path, const std::string&, uint8_t which) {
    if (r == runtime::SnapshotJob::Result::Kept) kept = path;
    files = which;
  };
  writer.submit(std::move(job));
  writer.finalize();
  metadata.finalize();
  CHECK(kept == "profiles/dit_rank0_" + sha.substr(0, 16));
  CHECK(files == runtime::SnapshotJob::kKeptProfile);
  CHECK(exists(run + "/" + kept + "/manifest.json"));
  CHECK(writer.written() == 0);
  CHECK(writer.profiles_written() == 1);
  CHECK(writer.bytes_written() == 0);
}

TEST_CASE("a timed call's job is one kernel_timing record: no file, no claim, no snapshot or profile counted",
          "[sink][snapshot]") {
  const std::string dir = test::temp_dir("lingprobe-evidence-");
  const std::string run = dir;
  REQUIRE(std::system(("mkdir -p " + run + "/metadata").c_str()) == 0);
  sink::MetadataWriter metadata({run + "/metadata/m.jsonl", "{\"kind\":\"header\"}", 10000, {}, run},
                                [] { return format::CountsSnapshot{}; });
  sink::SnapshotWriter writer(run, "rank0", &metadata, nullptr);
  const std::string sha(64, 'b');
  writer.add_signature(3, sha, "{\"op\":\"aten.mm.default\"}");
  runtime::SnapshotJob job;
  job.signature_id = 3;
  job.seq = 42;
  job.stage = "dit";
  job.snapshot = false;
  job.timed = true;
  job.timing.status = "passed";
  job.timing.metrics = {"gpu__time_duration.sum"};
  format::ProfiledKernel k;
  k.name = "gemm";
  k.values = {24500.0};  // ns
  job.timing.kernels.push_back(k);
  job.timing.window_seconds = 0.001;
  job.timing.identity.set("joined_session", format::JsonValue::boolean(true));
  job.timing.identity.set("open_us", format::JsonValue::floating(0.5));
  job.timing.identity.set("stop_us", format::JsonValue::floating(1.25));
  job.timing.identity.set("records_wait_us", format::JsonValue::floating(400.0));
  job.timing.identity.set("flushes", format::JsonValue::integer(3));
  job.timing.identity.set("forced_flush", format::JsonValue::boolean(false));
  job.timing.identity.set("since_counter_call_us", format::JsonValue::floating(2500.0));
  uint8_t which = 0;
  std::string kept_sha;
  job.done = [&](runtime::SnapshotJob::Result r, const std::string&, const std::string& s, uint8_t w) {
    if (r == runtime::SnapshotJob::Result::Kept) which = w, kept_sha = s;
  };
  writer.submit(std::move(job));
  writer.finalize();
  metadata.finalize();
  CHECK(which == runtime::SnapshotJob::kKeptTiming);
  CHECK(kept_sha == sha);
  CHECK(writer.written() == 0);
  CHECK(writer.profiles_written() == 0);
  CHECK_FALSE(exists(run + "/profiles"));
  std::ifstream in(run + "/metadata/m.jsonl");
  std::string line, timing;
  while (std::getline(in, line))
    if (line.find("\"kind\":\"kernel_timing\"") != std::string::npos) timing = line;
  CHECK(timing.find("\"id\":3") != std::string::npos);
  CHECK(timing.find("\"seq\":42") != std::string::npos);
  CHECK(timing.find("\"gpu__time_duration.sum\":{\"unit\":\"us\",\"value\":24.5}") != std::string::npos);
  // window_s's split on the op's thread (timed_calls.cpp)
  CHECK(timing.find("\"joined_session\":true") != std::string::npos);
  CHECK(timing.find("\"open_us\":0.5") != std::string::npos);
  CHECK(timing.find("\"stop_us\":1.25") != std::string::npos);
  // and the writer's reading of the records
  CHECK(timing.find("\"records_wait_us\":400") != std::string::npos);
  CHECK(timing.find("\"flushes\":3") != std::string::npos);
  CHECK(timing.find("\"forced_flush\":false") != std::string::npos);
  CHECK(timing.find("\"since_counter_call_us\":2500") != std::string::npos);  // was never copied
}

// A timed call's window is completed on the writer's thread (the op's thread
// does not wait for the device): first, whatever else becomes of the job, so
// that the window is given back; a failed timing is dropped with its status.
TEST_CASE("the writer completes a timed call: a passed one is written, a failed one dropped with its status",
          "[sink][snapshot]") {
  const std::string dir = test::temp_dir("lingprobe-evidence-");
  const std::string run = dir;
  REQUIRE(std::system(("mkdir -p " + run + "/metadata").c_str()) == 0);
  sink::MetadataWriter metadata({run + "/metadata/m.jsonl", "{\"kind\":\"header\"}", 10000, {}, run},
                                [] { return format::CountsSnapshot{}; });
  sink::SnapshotWriter writer(run, "rank0", &metadata, nullptr);
  writer.add_signature(5, std::string(64, 'e'), "{\"op\":\"aten.mm.default\"}");
  struct Outcome {
    int completed = 0;
    runtime::SnapshotJob::Result result = runtime::SnapshotJob::Result::Duplicate;
    std::string what;
    uint8_t kept = 0;
  } passed, failed, unknown;
  auto timed_job = [](Outcome& o, uint32_t id, const char* status) {
    runtime::SnapshotJob job;
    job.signature_id = id;
    job.seq = 7;
    job.stage = "dit";
    job.snapshot = false;
    job.timed = true;
    job.complete_timing = [&o, status] {
      ++o.completed;
      format::ProfileData d;
      d.status = status;
      d.metrics = {"gpu__time_duration.sum"};
      return d;
    };
    job.done = [&o](runtime::SnapshotJob::Result r, const std::string& what, const std::string&, uint8_t kept) {
      o.result = r, o.what = what, o.kept = kept;
    };
    return job;
  };
  writer.submit(timed_job(passed, 5, "passed"));
  writer.submit(timed_job(failed, 5, "failed"));
  writer.submit(timed_job(unknown, 6, "passed"));  // a signature the writer does not know: dropped, yet completed
  writer.finalize();
  metadata.finalize();
  CHECK(passed.completed == 1);
  CHECK(passed.result == runtime::SnapshotJob::Result::Kept);
  CHECK(passed.kept == runtime::SnapshotJob::kKeptTiming);
  CHECK(failed.completed == 1);
  CHECK(failed.result == runtime::SnapshotJob::Result::Dropped);
  CHECK(failed.what == "failed");
  CHECK(unknown.completed == 1);
  CHECK(unknown.result == runtime::SnapshotJob::Result::Dropped);
  std::ifstream in(run + "/metadata/m.jsonl");
  std::string line;
  int records = 0;
  while (std::getline(in, line)) records += line.find("\"kind\":\"kernel_timing\"") != std::string::npos;
  CHECK(records == 1);
}

TEST_CASE("a timed call that also took a snapshot keeps its timing when another process owns the signature",
          "[sink][snapshot]") {
  const std::string dir = test::temp_dir("lingprobe-evidence-");
  const std::string run = dir;
  REQUIRE(std::system(("mkdir -p " + run + "/metadata " + run + "/snapshots").c_str()) == 0);
  const std::string sha(64, 'c');
  sink::Claims other(run, 1), mine(run, 0);
  REQUIRE(other.claim_signature(sha, sink::Claims::SignatureEvidence::Snapshot,
                                "snapshots/elsewhere.pt"));  // rank 1 wrote this signature's snapshot first
  sink::MetadataWriter metadata({run + "/metadata/m.jsonl", "{\"kind\":\"header\"}", 10000, {}, run},
                                [] { return format::CountsSnapshot{}; });
  sink::SnapshotWriter writer(run, "rank0", &metadata, &mine);
  writer.add_signature(5, sha, "{\"op\":\"aten.mm.default\"}");
  runtime::SnapshotJob job;
  job.signature_id = 5;
  job.seq = 7;
  job.stage = "dit";
  job.snapshot = true;  // its first call's snapshot was refused: this call took one along with the timing
  job.timed = true;
  job.timing.status = "passed";
  job.timing.metrics = {"gpu__time_duration.sum"};
  job.timing.kernels.push_back(format::ProfiledKernel{});
  job.timing.kernels.back().values = {1000.0};
  runtime::SnapshotJob::Result result = runtime::SnapshotJob::Result::Kept;
  job.done = [&](runtime::SnapshotJob::Result r, const std::string&, const std::string&, uint8_t) { result = r; };
  writer.submit(std::move(job));
  writer.finalize();
  metadata.finalize();
  CHECK(result == runtime::SnapshotJob::Result::Duplicate);
  std::ifstream in(run + "/metadata/m.jsonl");
  std::string line;
  bool timing = false;
  while (std::getline(in, line)) timing = timing || line.find("\"kind\":\"kernel_timing\"") != std::string::npos;
  CHECK(timing);  // before the fix it was written only after the claim, and so never
}

TEST_CASE("one process's counters of a signature leave its snapshot to another process", "[sink][snapshot]") {
  const std::string run = test::temp_dir("lingprobe-evidence-");
  REQUIRE(std::system(("mkdir -p " + run + "/metadata " + run + "/snapshots " + run + "/profiles").c_str()) == 0);
  const std::string sha(64, 'd');
  uint8_t kept0 = 0, kept1 = 0;
  TwoProcesses launch(run, sha);
  // rank 0's snapshot refused by its own byte budget: counters only
  launch.write(profile_job(false, "passed", kept0), profile_job(true, "passed", kept1));
  CHECK(kept0 == runtime::SnapshotJob::kKeptProfile);
  // before: a duplicate of rank 0's counters (0xff here), and so no snapshot of the signature in the launch
  CHECK(kept1 == (runtime::SnapshotJob::kKeptSnapshot | runtime::SnapshotJob::kDuplicateProfile));
  CHECK(exists(run + "/snapshots/dit_rank1_" + sha.substr(0, 16) + ".pt"));
  CHECK_FALSE(exists(run + "/profiles/dit_rank1_" + sha.substr(0, 16)));
  CHECK(launch.rank1.written() == 1);
  CHECK(launch.rank1.profiles_written() == 0);
}

TEST_CASE("counters that did not pass claim nothing: another process's passing counters are kept", "[sink][snapshot]") {
  const std::string run = test::temp_dir("lingprobe-evidence-");
  REQUIRE(std::system(("mkdir -p " + run + "/metadata " + run + "/snapshots " + run + "/profiles").c_str()) == 0);
  const std::string sha(64, 'e');
  uint8_t kept0 = 0, kept1 = 0;
  TwoProcesses launch(run, sha);
  launch.write(profile_job(false, "contaminated", kept0), profile_job(false, "passed", kept1));  // others' kernels
  CHECK(kept0 == runtime::SnapshotJob::kKeptProfile);  // written, as a record of why there are no counters
  CHECK(kept1 == runtime::SnapshotJob::kKeptProfile);  // before: a duplicate of the failed one, and no counters
  CHECK(launch.rank1.profiles_written() == 1);
}

namespace {
// A snapshot's tensor bytes whose going away queues a chore on the writer (as a pinned buffer's lease does).
struct ChoreOnRelease : format::BlobSource {
  sink::SnapshotWriter* writer;
  bool* ran;
  ChoreOnRelease(sink::SnapshotWriter* w, bool* r) : writer(w), ran(r) {}
  ~ChoreOnRelease() override {
    if (!writer->run_chore([r = ran] { *r = true; })) *ran = true;
  }
  uint64_t nbytes() const override { return 0; }
  std::string stream(const std::function<bool(const void*, size_t)>&) override { return ""; }
};
}  // namespace

TEST_CASE("the writer runs chores on its thread, also one queued by a job as it goes; none after finalize",
          "[sink][snapshot]") {
  const std::string run = test::temp_dir("lingprobe-chores-");
  REQUIRE(std::system(("mkdir -p " + run + "/metadata " + run + "/snapshots " + run + "/profiles").c_str()) == 0);
  sink::MetadataWriter metadata({run + "/metadata/m.jsonl", "{\"kind\":\"header\"}", 10000, {}, run},
                                [] { return format::CountsSnapshot{}; });
  sink::SnapshotWriter writer(run, "rank0", &metadata, nullptr);
  std::thread::id chore_thread;
  bool first = false, released = false;
  REQUIRE(writer.run_chore([&] {
    first = true;
    chore_thread = std::this_thread::get_id();
  }));
  runtime::SnapshotJob job;  // a signature the writer never heard of: dropped, and its blob goes with it
  job.signature_id = 99;
  job.blobs.push_back(std::make_unique<ChoreOnRelease>(&writer, &released));
  writer.submit(std::move(job));
  writer.finalize();  // a job that went while the writer held its queue's lock would hang here
  metadata.finalize();
  CHECK(first);
  CHECK(chore_thread != std::this_thread::get_id());
  CHECK(released);
  CHECK_FALSE(writer.run_chore([] {}));
}
