// libFuzzer: the readers of metadata JSONL files on any bytes as one rank's
// file: the audit's metadata reader (lib/audit/metadata_reader), and over the
// same file as a run directory the audit with its rank view, `lingprobe
// trace` and `lingprobe diff` of the run with itself and with a fixed run. Each must return an
// error or a result, never crash, hang or read out of bounds.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include "audit/coverage_audit.h"
#include "audit/metadata_reader.h"
#include "audit/run_diff.h"
#include "audit/trace_export.h"
#include "remove_at_exit.h"

namespace {

// A run directory of one metadata file, made once.
std::string make_run_dir() {
  char tmpl[] = "/tmp/lingprobe-fuzz-run-XXXXXX";
  if (!mkdtemp(tmpl)) return "/tmp";
  lingprobe::test::remove_at_exit(tmpl);  // each run left two in /tmp before
  std::error_code ignored;
  std::filesystem::create_directories(std::string(tmpl) + "/metadata", ignored);
  std::filesystem::create_directories(std::string(tmpl) + "/reports", ignored);
  return tmpl;
}
const std::string& run_dir() {
  static const std::string dir = make_run_dir();
  return dir;
}

// A fixed run to diff the input against, so that the pairing of shape changes runs (a linear and a conv3d,
// as the corpus's seeds have).
const std::string& other_run() {
  static const std::string dir = [] {
    const std::string d = make_run_dir();
    FILE* f = std::fopen((d + "/metadata/metadata_rank0_pid2.jsonl").c_str(), "wb");
    if (!f) return d;
    static const char kRun[] =
        R"({"format":"lingprobe.metadata/1","kind":"header","pid":2,"rank":0,"role":"single","run_id":"other",)"
        R"("start_mono_ns":1000,"start_unix_ns":1700000000000000000,"world_size":1})"
        "\n"
        R"({"id":0,"kind":"signature","sha256":"%s","signature_json":)"
        R"("{\"args\":[{\"dtype\":\"torch.bfloat16\",\"shape\":[1,7,64],\"stride\":[448,64,1]},)"
        R"({\"dtype\":\"torch.bfloat16\",\"shape\":[64,64],\"stride\":[64,1]}],\"kwargs\":{},)"
        R"(\"op\":\"aten.linear.default\",\"output\":{\"dtype\":\"torch.bfloat16\",\"shape\":[1,7,64],)"
        R"(\"stride\":[448,64,1]},\"stage\":\"dit\"}"})"
        "\n"
        R"({"depth":0,"id":0,"kind":"call","seq":0,"t0_ns":2000,"t1_ns":3000,"tid":2})"
        "\n"
        R"({"calls":{"0":1},"dropped":{},"final":true,"kind":"counts"})"
        "\n";
    std::fprintf(f, kRun, "1111111111111111111111111111111111111111111111111111111111111111");
    std::fclose(f);
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("lingprobe-fuzz-metadata", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  lingprobe::audit::FileSummary summary;
  if (!lingprobe::audit::read_metadata_file("/proc/self/fd/" + std::to_string(fd), summary).status.ok()) return 0;
  const std::string& dir = run_dir();
  FILE* f = std::fopen((dir + "/metadata/metadata_rank0_pid1.jsonl").c_str(), "wb");
  if (!f) return 0;
  std::fwrite(data, 1, size, f);
  std::fclose(f);
  lingprobe::audit::AuditOptions audit;
  audit.inputs = {dir};
  audit.write = false;
  (void)lingprobe::audit::run_audit(audit);
  lingprobe::audit::TraceOptions trace;
  trace.run_dir = dir;
  trace.output = dir + "/reports/trace.json";
  (void)lingprobe::audit::write_trace(trace);
  lingprobe::audit::DiffOptions diff;
  diff.run_a = diff.run_b = dir;
  (void)lingprobe::audit::diff_runs(diff);
  diff.run_b = other_run();
  (void)lingprobe::audit::diff_runs(diff);
  return 0;
}
