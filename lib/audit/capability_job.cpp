#include "audit/capability_job.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "audit/capability_report.h"
#include "audit/profile_evidence.h"
#include "audit/run_paths.h"
#include "format/canonical_json.h"
#include "format/flops.h"
#include "format/json_parse.h"
#include "format/sha256.h"

namespace lingprobe::audit {

using format::JsonValue;

std::string json_text(const JsonValue* v) { return v && v->kind() == JsonValue::Kind::String ? v->as_string() : ""; }

double json_number(const JsonValue* v) {
  if (!v) return 0;
  if (v->kind() == JsonValue::Kind::Float) return v->as_float();
  if (v->kind() == JsonValue::Kind::Int) return static_cast<double>(v->as_int());
  return 0;
}

namespace {

// The first tensor's shape among a signature's arguments (nested lists walked), as JSON; "" if none.
std::string first_shape(const JsonValue* v) {
  if (!v) return "";
  if (v->kind() == JsonValue::Kind::Object && v->find("shape")) return format::canonical_json(*v->find("shape"));
  if (v->kind() == JsonValue::Kind::Array)
    for (const auto& item : v->items())
      if (std::string s = first_shape(&item); !s.empty()) return s;
  return "";
}

// The call ran in a CUDA autocast region (its math policy, as the profile or its replay recorded it; profiles are
// of CUDA calls, so CPU autocast casts nothing in their windows).
bool autocast_on(const JsonValue* policy) {
  const JsonValue* v = policy ? policy->find("autocast_cuda") : nullptr;
  return v && ((v->kind() == JsonValue::Kind::Bool && v->as_bool()) ||
               (v->kind() == JsonValue::Kind::String && v->as_string() == "true"));
}

// A profile's files as the run wrote them, read.
struct ProfileFiles {
  std::string manifest_sha;
  JsonValue identity, kernels, manifest, comparison;
  bool replayed = false;  // its replay's comparison was read
};

// Why a file the manifest names is missing or altered since the run; "" when none is.
std::string altered_file(const std::string& dir, const JsonValue& manifest) {
  const JsonValue* listed = manifest.find("sha256");
  if (!listed || listed->kind() != JsonValue::Kind::Object || !listed->find("kernels.json") ||
      !listed->find("identity.json"))
    return "manifest.json lists no kernels.json or identity.json";
  for (const auto& [name, v] : listed->members()) {
    std::string sha;
    if (name.find('/') != std::string::npos || !format::sha256_file_hex(dir + "/" + name, sha) || sha != json_text(&v))
      return name + " is missing or altered since the run (its SHA-256 differs from the manifest's)";
  }
  return "";
}

// The profile's files read, each checked against the SHA-256 the run recorded (the manifest's) or its manifest
// names; false with a warning when any is missing, altered or unreadable.
bool read_profile_files(const std::string& run, const EvidenceRecord& p, std::vector<Warning>& warnings,
                        ProfileFiles& pf) {
  const std::string dir = run + "/" + p.path;
  if (!evidence_path_inside(p.path) || !format::sha256_file_hex(dir + "/manifest.json", pf.manifest_sha) ||
      pf.manifest_sha != p.evidence_sha) {
    warnings.push_back({WarningCode::kProfileAltered,
                        p.path + ": missing or altered since the run (its manifest's SHA-256 does not match); no job"});
    return false;
  }
  if (!format::parse_json_file(dir + "/manifest.json", pf.manifest)) {
    warnings.push_back({WarningCode::kProfileUnreadable, p.path + ": unreadable manifest.json; no job"});
    return false;
  }
  if (const std::string altered = altered_file(dir, pf.manifest); !altered.empty()) {
    warnings.push_back({WarningCode::kProfileAltered, p.path + ": " + altered + "; no job"});
    return false;
  }
  if (!format::parse_json_file(dir + "/identity.json", pf.identity) ||
      !format::parse_json_file(dir + "/kernels.json", pf.kernels)) {
    warnings.push_back({WarningCode::kProfileUnreadable, p.path + ": unreadable profile files; no job"});
    return false;
  }
  pf.replayed =
      format::parse_json_file(run + "/replays/" + basename(p.path) + "/replay_comparison.json", pf.comparison);
  return true;
}

// What the job's figures were derived from, besides the profile's files.
struct Derived {
  JsonValue sig;
  std::optional<int64_t> flops;  // per call
  double bytes = 0;              // DRAM, read and written, per call
  Peak peak;
  bool known = false;  // the device's peak
};

// The job's figures: kernel time, FLOP and DRAM rates against the device's roofs, and the GPU time that running at
// the roof would save; a warning when a figure is over a roof.
Derived measure_job(const EvidenceRecord& p, const ReportInputs& in, const ProfileFiles& pf,
                    std::vector<Warning>& warnings, Job& j) {
  Derived m;
  const auto text = in.texts.find(p.sha);
  auto parsed = format::parse_json(text == in.texts.end() ? std::string() : text->second);
  m.sig = parsed.status.ok() ? parsed.value : JsonValue::object();
  const JsonValue& sig = m.sig;
  j = Job{};
  j.sha = p.sha;
  j.h16 = p.sha.substr(0, 16);
  j.stage = json_text(sig.find("stage"));
  const auto n = in.calls.find(p.sha);
  j.calls = n == in.calls.end() ? 0 : n->second;
  j.label = json_text(sig.find("op"));
  j.shape = first_shape(sig.find("args"));
  // The profile's own math policy (the call's), else its replay's.
  const JsonValue* policy = pf.identity.find("math_policy");
  if (!policy && pf.replayed) policy = pf.comparison.find("math_policy");
  j.mode = math_mode(sig, policy);
  // The time is the key's timed call's where it has one (its kernels ran as without lingprobe), else the
  // counter window's own; the DRAM rate stays the window's bytes over the window's time.
  const auto timed = in.timings.find(p.sha);  // only timed calls with a kernel time are there
  const bool activity = timed != in.timings.end();
  const JsonValue& time_kernels = activity ? timed->second.kernels : pf.kernels;
  j.counters_time_us = kernels_time_us(pf.kernels).value_or(0.0);
  j.time_us = activity ? kernels_time_us(time_kernels).value_or(0.0) : j.counters_time_us;
  j.time_source = activity ? "activity" : "counters";
  for (const auto& k : pf.kernels.items())
    m.bytes += kernel_metric_si(k, "dram__bytes_read.sum").value_or(0.0) +
               kernel_metric_si(k, "dram__bytes_write.sum").value_or(0.0);
  m.flops = format::flops_per_call(sig);
  const auto& flops = m.flops;
  // Inside an autocast region an arithmetic op's window also holds the casts of its inputs: their time is
  // reported apart, and the FLOP rate is the op's own kernels'.
  if (flops && *flops > 0 && autocast_on(policy)) j.cast_us = copy_kernels_time_us(time_kernels);
  const double t = j.counters_time_us * 1e-6, own = (j.time_us - j.cast_us) * 1e-6;
  if (flops && own > 0) j.flops_per_s = static_cast<double>(*flops) / own;
  if (t > 0) j.dram_bytes_per_s = m.bytes / t;
  if (flops && m.bytes > 0) j.intensity = static_cast<double>(*flops) / m.bytes;
  j.est_us = j.time_us * static_cast<double>(j.calls);
  m.known = device_peak(json_text(pf.identity.find("gpu_name")), j.mode, m.peak);
  if (m.known) {
    j.peak_flops = m.peak.flops;
    j.peak_dram = m.peak.dram_bytes;
    if (flops && *flops > 0 && own > 0) j.frac_flops = j.flops_per_s / m.peak.flops;
    if (t > 0) j.frac_dram = j.dram_bytes_per_s / m.peak.dram_bytes;
  }
  j.passed = json_text(pf.identity.find("status")) == "passed";
  // Above 100% of a roof is a defect (a math mode or a time taken wrongly), never a figure to print as is.
  j.over_roof = j.passed && (j.frac_flops > 1.0 || j.frac_dram > 1.0);  // a window that failed says so itself
  if (j.over_roof)
    warnings.push_back({WarningCode::kOverRoof,
                        p.path + ": " + std::to_string(static_cast<int>(std::max(j.frac_flops, j.frac_dram) * 100)) +
                            "% of its " + j.mode +
                            " roof, over 100%: its math mode or its kernel time is wrong "
                            "(report it); not counted in the totals"});
  j.passed = j.passed && !j.over_roof;
  // What running at its roof would save: the time x (1 - achieved / roof) of whichever roof bounds it (the
  // higher of the math mode's and DRAM's fractions).
  if (j.passed && std::max(j.frac_flops, j.frac_dram) >= 0)
    j.recoverable_us = j.est_us * (1 - std::max(j.frac_flops, j.frac_dram));
  return m;
}

// The job's entry as the evidence gives it: its status, files and their SHA-256s, the replay's correctness.
JsonValue evidence_json(const EvidenceRecord& p, const ReportInputs& in, const ProfileFiles& pf, const Job& j) {
  std::string snapshot_sha;
  for (const EvidenceRecord& s : in.snapshots)
    if (s.sha == p.sha && s.seq == p.seq && s.rank == p.rank) snapshot_sha = s.evidence_sha;
  JsonValue correctness = JsonValue::null();
  if (pf.replayed) {
    correctness = JsonValue::object();
    for (const char* k : {"op", "stage", "shape", "exact", "max_abs", "rmse", "finite", "math_policy", "scope"})
      if (const JsonValue* v = pf.comparison.find(k)) correctness.set(k, *v);
  }
  JsonValue sums = JsonValue::object();
  if (const JsonValue* m = pf.manifest.find("sha256"))
    for (const auto& [name, v] : m->members()) sums.set(name, v);
  sums.set("manifest.json", JsonValue::string(pf.manifest_sha));
  JsonValue job = JsonValue::object();
  job.set("stage", JsonValue::string(j.stage));
  // a window that passed, its figures above a roof: a defect of the report's inputs, not a result
  job.set("status", JsonValue::string(j.over_roof ? "over_roof" : json_text(pf.identity.find("status"))));
  job.set("output", JsonValue::string(p.path));
  job.set("elapsed_seconds", JsonValue::floating(json_number(pf.identity.find("window_seconds"))));
  job.set("allocated", JsonValue::string(json_text(pf.identity.find("allocated"))));
  job.set("input_sha256", snapshot_sha.empty() ? JsonValue::null() : JsonValue::string(snapshot_sha));
  job.set("correctness", correctness);
  job.set("kernel_count", JsonValue::integer(static_cast<int64_t>(pf.kernels.items().size())));
  job.set("kernels", pf.kernels);
  job.set("sha256", std::move(sums));
  return job;
}

// The additions to the job's entry: its figures and what they were taken against.
void add_figures_json(const EvidenceRecord& p, const ProfileFiles& pf, const Derived& m, const Job& j, JsonValue& job) {
  job.set("device", JsonValue::string(json_text(pf.identity.find("cuda_device"))));
  job.set("signature", m.sig);
  job.set("signature_sha256", JsonValue::string(p.sha));
  job.set("rank", JsonValue::integer(p.rank));
  job.set("seq", JsonValue::integer(static_cast<int64_t>(p.seq)));
  job.set("calls", JsonValue::integer(static_cast<int64_t>(j.calls)));
  job.set("flops_per_call", m.flops ? JsonValue::integer(*m.flops) : JsonValue::null());
  job.set("kernel_time_us_per_call", JsonValue::floating(j.time_us));
  job.set("kernel_time_source", JsonValue::string(j.time_source));
  job.set("counters_kernel_time_us_per_call", JsonValue::floating(j.counters_time_us));
  job.set("cast_kernel_time_us_per_call", JsonValue::floating(j.cast_us));
  job.set("dram_bytes_per_call", JsonValue::floating(m.bytes));
  job.set("math_mode", JsonValue::string(j.mode));
  job.set("achieved_flops_per_second", j.flops_per_s > 0 ? JsonValue::floating(j.flops_per_s) : JsonValue::null());
  job.set("achieved_dram_bytes_per_second", JsonValue::floating(j.dram_bytes_per_s));
  job.set("arithmetic_intensity", j.intensity > 0 ? JsonValue::floating(j.intensity) : JsonValue::null());
  job.set("peak", m.known ? JsonValue::object({{"flops_per_second", JsonValue::floating(m.peak.flops)},
                                               {"dram_bytes_per_second", JsonValue::floating(m.peak.dram_bytes)},
                                               {"source", JsonValue::string(m.peak.source)}})
                          : JsonValue::null());
  auto fraction = [&](double f) { return f >= 0 && !j.over_roof ? JsonValue::floating(f) : JsonValue::null(); };
  job.set("fraction_of_peak_flops", fraction(j.frac_flops));
  job.set("fraction_of_peak_dram", fraction(j.frac_dram));
  job.set("over_roof", JsonValue::boolean(j.over_roof));
  if (j.over_roof)  // for whoever finds the defect, never for a reader of the results
    job.set("over_roof_fraction", JsonValue::floating(std::max(j.frac_flops, j.frac_dram)));
  job.set("recoverable_gpu_time_us", j.recoverable_us >= 0 ? JsonValue::floating(j.recoverable_us) : JsonValue::null());
  job.set("bound", JsonValue::string(j.frac_flops < 0 && j.frac_dram < 0 ? ""
                                     : j.frac_flops >= j.frac_dram       ? "math"
                                                                         : "dram"));
  job.set("estimated_gpu_time_us", JsonValue::floating(j.est_us));
  job.set("passes", pf.identity.find("passes") ? *pf.identity.find("passes") : JsonValue::null());
  job.set(
      "scope",
      JsonValue::string(
          "Inline CUPTI range profiler (auto range, kernel replay: each kernel replayed once per pass) on this run's "
          "own "
          "call (rank " +
          std::to_string(p.rank) + ", seq " + std::to_string(p.seq) +
          "); per-kernel times in isolation, GPU clocks not locked (as the run had them); not an end-to-end timing"));
}

}  // namespace

format::Status read_report_inputs(const std::vector<std::string>& files, ReportInputs& in) {
  // The run: calls per signature (the ranks'), signature texts, the profile and snapshot records.
  bool any_rank = false;
  std::vector<FileSummary>& summaries = in.summaries;
  for (const auto& f : files) {
    FileSummary s;
    ReadResult rr = read_metadata_file(f, s);
    if (!rr.status.ok()) return rr.status;
    any_rank = any_rank || s.role == "rank";
    summaries.push_back(std::move(s));
  }
  for (const FileSummary& s : summaries) {
    if (s.role == "launcher" || s.role == "child" || (any_rank && s.role != "rank")) continue;
    in.counted.push_back(&s);
    for (const auto& [id, n] : (s.has_counts ? s.counts : s.call_records)) {
      auto it = s.signature_sha.find(id);
      if (it != s.signature_sha.end()) in.calls[it->second] += n;
    }
    for (const auto& [sha, text] : s.signature_json) in.texts[sha] = text;
    for (const auto& e : s.profiles)
      if (s.signature_sha.count(e.id))
        in.profiles.push_back({s.signature_sha.at(e.id), e.path, e.sha256, e.seq, s.rank});
    for (const auto& e : s.snapshots)
      if (s.signature_sha.count(e.id))
        in.snapshots.push_back({s.signature_sha.at(e.id), e.path, e.sha256, e.seq, s.rank});
    for (const auto& t : s.timings) {
      if (!s.signature_sha.count(t.id) || in.timings.count(s.signature_sha.at(t.id))) continue;
      if (auto kernels = timed_kernels(t)) in.timings[s.signature_sha.at(t.id)] = TimedCall{s.rank, t.seq, *kernels};
    }
  }
  return format::Status::Ok();
}

bool profile_job(const std::string& run, const EvidenceRecord& p, const ReportInputs& in,
                 std::vector<Warning>& warnings, Job& j) {
  ProfileFiles pf;
  if (!read_profile_files(run, p, warnings, pf)) return false;
  const Derived m = measure_job(p, in, pf, warnings, j);
  JsonValue job = evidence_json(p, in, pf, j);
  add_figures_json(p, pf, m, j, job);
  // The call the kernel time comes from, when not the profiled one (PROFILE_TIMING).
  const auto timed = in.timings.find(p.sha);
  job.set("timed_call", j.time_source != "activity"
                            ? JsonValue::null()
                            : JsonValue::object({
                                  {"rank", JsonValue::integer(timed->second.rank)},
                                  {"seq", JsonValue::integer(static_cast<int64_t>(timed->second.seq))},
                                  {"timing", JsonValue::string("CUPTI Activity, no range profiler")},
                                  {"kernels", timed->second.kernels},
                              }));
  j.json = std::move(job);
  return true;
}

std::string human(double x, const char* unit) {
  const char* prefixes[] = {"", "K", "M", "G", "T", "P"};
  int i = 0;
  while (std::fabs(x) >= 1000 && i < 5) x /= 1000, ++i;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.3g %s%s", x, prefixes[i], unit);
  return buf;
}

}  // namespace lingprobe::audit
