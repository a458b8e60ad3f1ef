#include "audit/capability_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "audit/capability_job.h"
#include "audit/roofline_svg.h"
#include "audit/metadata_reader.h"
#include "audit/profile_evidence.h"
#include "audit/run_paths.h"
#include "audit/stage_time.h"
#include "audit/summary_file.h"
#include "format/canonical_json.h"
#include "format/flops.h"
#include "format/json_parse.h"
#include "format/sha256.h"
#include "format/snapshot_file.h"
#include "sink/run_directory.h"

namespace lingprobe::audit {
namespace {

using format::JsonValue;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The first tensor's dtype in a signature value (nested lists walked); "" if none.
std::string first_dtype(const JsonValue* v) {
  if (!v) return "";
  if (v->kind() == JsonValue::Kind::Object) return json_text(v->find("dtype"));
  if (v->kind() == JsonValue::Kind::Array)
    for (const auto& x : v->items())
      if (std::string d = first_dtype(&x); !d.empty()) return d;
  return "";
}

}  // namespace

// The math mode an op's arithmetic runs in. For GEMM, convolution and
// attention ops, what ran: the narrower of the first argument's and the
// output's dtype (inside an autocast region the recorded inputs are the
// pre-cast ones, fp32 activations beside bf16 weights, and the op computes
// in the autocast dtype, its output's; an fp8 or int8 GEMM computes in its
// inputs' and writes a wider output); for the others the first argument's. For fp32 GEMMs and convolutions, the TF32
// switches of the call's math policy (without one, torch's defaults: matmul
// no, cuDNN yes). "" where the table has no roof.
std::string math_mode(const JsonValue& sig, const JsonValue* policy) {
  const std::string op = json_text(sig.find("op"));
  const bool gemm = op.find("linear") != std::string::npos || op.find("mm") != std::string::npos ||
                    op.find("matmul") != std::string::npos;
  const bool conv = op.find("conv") != std::string::npos;
  const bool attention = op.find("attention") != std::string::npos || op.find("flash") != std::string::npos;
  std::string dtype = first_dtype(sig.find("args"));
  if (const std::string out = first_dtype(sig.find("output")); (gemm || conv || attention) && !out.empty())
    if (dtype.empty() || format::dtype_element_size(out) <= format::dtype_element_size(dtype)) dtype = out;
  auto policy_true = [&](const char* k, bool fallback) {
    const JsonValue* v = policy ? policy->find(k) : nullptr;
    return v && v->kind() == JsonValue::Kind::Bool ? v->as_bool() : fallback;
  };
  if (dtype == "torch.bfloat16") return "bf16";
  if (dtype == "torch.float16") return "fp16";
  if (dtype == "torch.float64") return "fp64";
  if (dtype.rfind("torch.float8", 0) == 0) return "fp8";
  if (dtype == "torch.int8" || dtype == "torch.uint8") return "int8";
  if (dtype != "torch.float32") return "";  // integers, bool, complex: no roof in the table
  if (gemm && policy_true("matmul_allow_tf32", false)) return "tf32";
  if (conv && policy_true("cudnn_allow_tf32", true)) return "tf32";  // torch's default: cuDNN may use TF32
  return "fp32";
}

namespace {

std::string now_iso() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  std::tm tm{};
  gmtime_r(&ts.tv_sec, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[96];
  std::snprintf(out, sizeof out, "%s.%06ld+00:00", buf, ts.tv_nsec / 1000);
  return out;
}

}  // namespace

bool device_peak(const std::string& gpu, const std::string& mode, Peak& p) {
  // NVIDIA datasheets, dense (no sparsity). H200 SXM and H100 SXM share the
  // Hopper SM (same FLOP/s); their memories differ.
  double bf16 = 0, dram = 0;
  // By name as the driver reports it ("NVIDIA H200", "NVIDIA H100 80GB HBM3",
  // "NVIDIA H100 PCIe"); GH200 and the NVL parts have other figures: none here.
  const std::string name = " " + gpu + " ";
  auto has = [&](const char* token) { return name.find(token) != std::string::npos; };
  if (has(" NVL") || has("GH200")) return false;
  if (has(" H200 ")) {
    bf16 = 989.4e12, dram = 4.8e12, p.source = "NVIDIA H200 datasheet (SXM, dense)";
  } else if (has(" H100 ") && has(" PCIe")) {
    bf16 = 756.5e12, dram = 2.0e12, p.source = "NVIDIA H100 PCIe datasheet (dense)";
  } else if (has(" H100 ")) {
    bf16 = 989.4e12, dram = 3.35e12, p.source = "NVIDIA H100 SXM datasheet (dense)";
  } else {
    return false;
  }
  // fp32: the non-tensor rate; fp64: the FP64 tensor-core rate (what DGEMM uses on Hopper).
  const std::map<std::string, double> scale = {{"bf16", 1.0},         {"fp16", 1.0}, {"tf32", 0.5},
                                               {"fp8", 2.0},          {"int8", 2.0}, {"fp32", 67.0 / 989.4},
                                               {"fp64", 67.0 / 989.4}};
  auto it = scale.find(mode);
  if (it == scale.end()) return false;
  p.flops = bf16 * it->second;
  p.dram_bytes = dram;
  return true;
}

namespace {

// The profiled signatures by the GPU time they would save at their roof
// (estimated time x (1 - the bounding roof's fraction)): where the run's
// time is left. Keys without counters have no row (they are unmeasured).
std::string left_on_the_table(const std::vector<Job>& jobs) {
  std::vector<const Job*> rows;
  double total = 0;
  for (const auto& j : jobs)
    if (j.recoverable_us >= 0) rows.push_back(&j), total += j.recoverable_us;
  if (rows.empty()) return "";
  std::sort(rows.begin(), rows.end(), [](const Job* a, const Job* b) { return a->recoverable_us > b->recoverable_us; });
  std::ostringstream md;
  md << "\n### Left on the table\n\nGPU time each profiled signature would save at its roof (its estimated time x (1 - "
        "achieved / roof), for whichever of its math mode's and DRAM's roofs bounds it): "
     << human(total * 1e-6, "s")
     << " in all.\n\n| would save | est. GPU time | bound | % of that roof | mode | signature |\n"
     << "|---|---|---|---|---|---|\n";
  for (size_t i = 0; i < rows.size() && i < 10; ++i) {
    const Job& j = *rows[i];
    const bool math = j.frac_flops >= j.frac_dram;
    char row[512];
    std::snprintf(row, sizeof row, "| %s | %s | %s | %d%% | %s | `%s` %s |\n",
                  human(j.recoverable_us * 1e-6, "s").c_str(), human(j.est_us * 1e-6, "s").c_str(),
                  math ? "math" : "DRAM", static_cast<int>(std::lround(100 * (math ? j.frac_flops : j.frac_dram))),
                  j.mode.c_str(), j.label.c_str(), j.h16.substr(0, 12).c_str());
    md << row;
  }
  return md.str();
}

}  // namespace

namespace {

// 2. One job per profiled signature: its first passed profile, else its first.
std::vector<Job> signature_jobs(const std::string& run, const ReportInputs& in, std::vector<Warning>& warnings) {
  std::vector<Job> jobs;
  for (const EvidenceRecord& p : in.profiles) {
    Job j;
    if (!profile_job(run, p, in, warnings, j)) continue;
    // One job per signature: its first passed profile, else its first.
    auto same = std::find_if(jobs.begin(), jobs.end(), [&](const Job& x) { return x.sha == p.sha; });
    if (same == jobs.end()) {
      jobs.push_back(std::move(j));
    } else if (j.passed && !same->passed) {
      warnings.push_back({WarningCode::kProfileSuperseded,
                          json_text(same->json.find("output")) + ": " + json_text(same->json.find("status")) +
                              "; this signature's job is " + p.path + ", which passed"});
      *same = std::move(j);
    } else {
      warnings.push_back(
          {WarningCode::kFurtherProfile, p.path + ": a further profile of a signature that has a job (not used)"});
    }
  }
  return jobs;
}

// 3. The totals over the jobs: estimated GPU time, FLOPs attributed to profiled signatures or not, the measured
// GPU time per stage.
struct Totals {
  std::set<std::string> profiled;  // the passed jobs' signatures
  double est_us = 0, flops = 0, attributed_flops = 0;
  uint64_t unattributed_calls = 0, unattributed_sigs = 0;
  StageTimeView measured;
};

Totals run_totals(const std::vector<Job>& jobs, const ReportInputs& in) {
  Totals t;
  for (const auto& j : jobs)
    if (j.passed) t.profiled.insert(j.sha);
  for (const auto& j : jobs)
    if (j.passed) t.est_us += j.est_us;
  for (const auto& [sha, n] : in.calls) {
    const auto text = in.texts.find(sha);
    auto parsed = format::parse_json(text == in.texts.end() ? std::string() : text->second);
    const auto f = parsed.status.ok() ? format::flops_per_call(parsed.value) : std::nullopt;
    if (f) t.flops += static_cast<double>(*f) * static_cast<double>(n);
    if (t.profiled.count(sha)) {
      if (f) t.attributed_flops += static_cast<double>(*f) * static_cast<double>(n);
    } else {
      t.unattributed_calls += n;
      ++t.unattributed_sigs;
    }
  }
  std::map<std::string, double> attributed_by_stage;
  for (const auto& j : jobs)
    if (j.passed) attributed_by_stage[j.stage] += j.est_us;
  t.measured = stage_time_view(in.counted, attributed_by_stage);
  return t;
}

// 4. The jobs, passed first by estimated GPU time, with their shares; `all_passed`: every job passed and replayed
// exactly where it was replayed.
JsonValue job_list(std::vector<Job>& jobs, const Totals& t, bool& all_passed) {
  std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
    return a.passed != b.passed ? a.passed : a.est_us > b.est_us;  // passed first, by estimated GPU time
  });
  JsonValue list = JsonValue::array();
  all_passed = !jobs.empty();
  for (auto& j : jobs) {
    j.json.set("share_of_estimated_gpu_time",
               j.passed && t.est_us > 0 ? JsonValue::floating(j.est_us / t.est_us) : JsonValue::null());
    // Of the total the report knows; null for a job whose stage's time is not in it (no clean interval, unmeasured).
    j.json.set("share_of_measured_gpu_time",
               j.passed && t.measured.denominator_us > 0 && t.measured.without_windows_us.count(j.stage)
                   ? JsonValue::floating(j.est_us / t.measured.denominator_us)
                   : JsonValue::null());
    const JsonValue* c = j.json.find("correctness");
    all_passed =
        all_passed && json_text(j.json.find("status")) == "passed" &&
        (!c || c->is_null() ||
         (c->find("exact") && c->find("exact")->kind() == JsonValue::Kind::Bool && c->find("exact")->as_bool()));
    list.push_back(j.json);
  }
  return list;
}

JsonValue whole_run(const std::vector<Job>& jobs, const ReportInputs& in, const Totals& t) {
  JsonValue whole = JsonValue::object();
  whole.set("signatures", JsonValue::integer(static_cast<int64_t>(in.calls.size())));
  whole.set("profiled_signatures", JsonValue::integer(static_cast<int64_t>(jobs.size())));
  whole.set("passed_signatures", JsonValue::integer(static_cast<int64_t>(t.profiled.size())));
  whole.set("estimated_gpu_time_us", JsonValue::floating(t.est_us));
  whole.set("flops", JsonValue::floating(t.flops));
  whole.set("attributed_flops", JsonValue::floating(t.attributed_flops));
  double recoverable = 0;
  for (const auto& j : jobs) recoverable += std::max(0.0, j.recoverable_us);
  whole.set("recoverable_gpu_time_us", JsonValue::floating(recoverable));
  whole.set("unattributed_signatures", JsonValue::integer(static_cast<int64_t>(t.unattributed_sigs)));
  whole.set("unattributed_calls", JsonValue::integer(static_cast<int64_t>(t.unattributed_calls)));
  whole.set("achieved_flops_per_second",
            t.est_us > 0 ? JsonValue::floating(t.attributed_flops / (t.est_us * 1e-6)) : JsonValue::null());
  whole.set("measured_gpu_time", t.measured.json);
  whole.set("note", JsonValue::string(
                        "estimated GPU time = sum over profiled signatures of (kernel time per call x recorded calls): "
                        "the recorded ops "
                        "only (LINGPROBE_OPS), kernels in isolation under replay. measured_gpu_time is the run's own "
                        "GPU time per stage "
                        "(CUDA events, LINGPROBE_STAGE_GPU_TIME) and what of it the profiled signatures account for; " +
                        std::string(t.measured.json.is_null()
                                        ? "this run has no such measurement (PROFILE off, or no CUDA op)"
                                        : "share_of_measured_gpu_time divides by its total without the windows")));
  return whole;
}

// 5. summary.md's capability section: what is left on the table first, then the top jobs.
std::string capability_section(const std::vector<Job>& jobs, const ReportInputs& in, const Totals& t) {
  std::ostringstream md;
  md << kCapabilityHeading << "\n";
  if (jobs.empty()) {
    md << "\nNo profiled call in this run (" << in.calls.size()
       << " signatures): counters are measured with LINGPROBE_PROFILE=1 on calls with CUDA tensors "
          "(docs/COUNTERS.md).\n";
  } else {
    std::map<std::string, int> by_status;
    for (const auto& j : jobs) ++by_status[json_text(j.json.find("status"))];
    std::string statuses;
    for (const auto& [st, n] : by_status) statuses += (statuses.empty() ? "" : ", ") + std::to_string(n) + " " + st;
    md << left_on_the_table(jobs) << "\n"
       << jobs.size() << " of " << in.calls.size() << " signatures profiled inline (" << statuses
       << "); estimated GPU time of the recorded ops " << human(t.est_us * 1e-6, "s")
       << " (kernel time per call x calls), " << t.unattributed_sigs << " signature(s) and " << t.unattributed_calls
       << " call(s) unattributed. Roofline: reports/roofline.svg.\n"
       << t.measured.markdown
       << "\n| share of est. GPU time | calls | us/call | achieved | % of peak | DRAM | % of DRAM peak | mode | status "
          "| signature |\n"
       << "|---|---|---|---|---|---|---|---|---|---|\n";
    for (size_t i = 0; i < jobs.size() && i < 10; ++i) {
      const Job& j = jobs[i];
      auto pct = [&j](double f) {
        return j.over_roof ? std::string("over roof") : f >= 0 ? std::to_string(std::lround(100 * f)) + "%" : "-";
      };
      char row[640];
      char share[32] = "-";
      if (j.passed && t.est_us > 0) std::snprintf(share, sizeof share, "%.1f%%", 100 * j.est_us / t.est_us);
      std::snprintf(row, sizeof row, "| %s | %llu | %.1f | %s | %s | %s | %s | %s | %s | `%s` %s |\n", share,
                    static_cast<unsigned long long>(j.calls), j.time_us,
                    j.flops_per_s > 0 ? human(j.flops_per_s, "FLOP/s").c_str() : "-", pct(j.frac_flops).c_str(),
                    human(j.dram_bytes_per_s, "B/s").c_str(), pct(j.frac_dram).c_str(), j.mode.c_str(),
                    json_text(j.json.find("status")).c_str(), j.label.c_str(), j.h16.substr(0, 12).c_str());
      md << row;
    }
  }
  md << "\n" << kCapabilityEnd << "\n";
  return md.str();
}

}  // namespace

ReportOutcome run_report(const ReportOptions& options) {
  ReportOutcome out;
  std::string run = options.run_dir;
  const std::string found = sink::find_run_directory(run);
  const std::vector<std::string> files = sink::metadata_files(run);
  if (files.empty()) {
    const std::string& why = found;
    out.status = format::Status(format::StatusCode::kBadInput,
                                why.empty() ? run + " is not a run directory (no metadata/*.jsonl)" : why);
    return out;
  }
  ReportInputs in;
  out.status = read_report_inputs(files, in);
  if (!out.status.ok()) return out;
  std::vector<Job> jobs = signature_jobs(run, in, out.warnings);
  const Totals t = run_totals(jobs, in);
  bool all_passed = false;
  JsonValue list = job_list(jobs, t, all_passed);
  JsonValue whole = whole_run(jobs, in, t);
  JsonValue report = JsonValue::object();
  report.set("generated_at", JsonValue::string(options.generated_at.empty() ? now_iso() : options.generated_at));
  report.set("status", JsonValue::string(jobs.empty() ? "no_profiles" : all_passed ? "passed" : "partial"));
  report.set("jobs", std::move(list));
  report.set(
      "scope",
      JsonValue::string(
          "One job per profiled signature of this run, measured inline on the run's own calls (its snapshot's hash as "
          "input_sha256; correctness from `lingprobe replay` of that snapshot where one ran). Kernel times come from "
          "the key's timed call where it has one (kernel_time_source activity: CUPTI Activity's durations of its "
          "kernels, run as in the job), else from the counter window (counters: kernel replay serialises each "
          "kernel, so times are per kernel in isolation); GPU clocks are not locked; the DRAM rate is the window's "
          "bytes over the window's time. Percentages of peak use datasheet peaks for the op's math mode "
          "(docs/COUNTERS.md). " +
          std::to_string(t.unattributed_sigs) + " recorded signature(s) without a profile."));
  report.set("whole_run", std::move(whole));
  report.set("warnings", warnings_json(out.warnings));

  const std::string reports = run + "/reports";
  if (std::string e = sink::make_directories(reports); !e.empty()) {
    out.status = format::Status(format::StatusCode::kIoFailed, e);
    return out;
  }
  out.report_path = reports + "/capability_report.json";
  out.svg_path = reports + "/roofline.svg";
  out.summary = capability_section(jobs, in, t);
  // summary.md keeps the audit's part; the capability section is replaced, not repeated.
  const std::string summary_path = reports + "/summary.md";
  const std::string summary = compose_summary({split_summary(read_file(summary_path)).audit, out.summary});
  for (const auto& [path, text] :
       {std::make_pair(out.report_path, format::pretty_json(report) + "\n"),
        std::make_pair(out.svg_path, roofline_svg(jobs)), std::make_pair(summary_path, summary)})
    if (std::string e = sink::replace_file(path, text); !e.empty()) {
      out.status = format::Status(format::StatusCode::kIoFailed, e);
      return out;
    } else {
      out.written.push_back(path);
    }
  return out;
}

}  // namespace lingprobe::audit
