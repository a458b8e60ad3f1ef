#include "audit/coverage_audit.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include "audit/key_evidence.h"
#include "audit/metadata_reader.h"
#include "audit/plan_report.h"
#include "audit/profile_evidence.h"
#include "audit/rank_view.h"
#include "audit/signature_text.h"
#include "audit/summary_file.h"
#include "format/canonical_json.h"
#include "format/flops.h"
#include "format/json_parse.h"
#include "format/sha256.h"
#include "format/signature_fields.h"
#include "sink/run_directory.h"

namespace lingprobe::audit {
namespace {

using format::JsonValue;

bool is_dir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool is_symlink(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') names.emplace_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string parent(const std::string& p) {
  const size_t s = p.find_last_of('/');
  return s == std::string::npos ? "." : (s == 0 ? "/" : p.substr(0, s));
}

std::string basename(const std::string& p) {
  const size_t s = p.find_last_of('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

std::string strip_slash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

// `path` relative to `base` when it lies inside it.
std::string relative(const std::string& path, const std::string& base) {
  const std::string b = strip_slash(base) + "/";
  if (b != "./" && path.compare(0, b.size(), b) == 0) return path.substr(b.size());
  if (b == "./" && path.compare(0, 2, "./") == 0) return path.substr(2);
  return path;
}

struct Signature {
  std::string sha;
  JsonValue value;
  std::string stage, op;
  std::optional<int64_t> flops;
  std::map<int64_t, uint64_t> calls_by_rank;
  uint64_t calls = 0;
  std::vector<Evidence> snapshots;
  std::vector<Evidence> profiles;          // with counters
  std::optional<double> kernel_time_us;    // measured, per call (first profile)
};

struct Fraction {
  long double covered = 0, total = 0;
  bool total_known = true;
};

JsonValue number(long double x) {
  if (x == std::floor(x) && std::fabs(x) < 9.2e18L) return JsonValue::integer(static_cast<int64_t>(x));
  return JsonValue::floating(static_cast<double>(x));
}

JsonValue fraction_json(const Fraction& f) {
  JsonValue o = JsonValue::object();
  o.set("covered", number(f.covered));
  o.set("total", f.total_known ? number(f.total) : JsonValue::null());
  o.set("fraction", f.total_known && f.total > 0 ? JsonValue::floating(static_cast<double>(f.covered / f.total))
                                                 : JsonValue::null());
  return o;
}

// Coverage of one group of signatures (a stage, or the whole run).
JsonValue coverage_json(const std::vector<const Signature*>& group) {
  Fraction snap_sigs, snap_calls, snap_flops, ctr_sigs, ctr_calls, ctr_flops, ctr_time;
  uint64_t unknown_flops = 0;
  for (const Signature* s : group) {
    const bool snap = !s->snapshots.empty(), ctr = !s->profiles.empty();
    snap_sigs.total += 1;
    ctr_sigs.total += 1;
    snap_calls.total += s->calls;
    ctr_calls.total += s->calls;
    if (snap) snap_sigs.covered += 1, snap_calls.covered += s->calls;
    if (ctr) ctr_sigs.covered += 1, ctr_calls.covered += s->calls;
    if (!s->flops) {
      ++unknown_flops;
    } else {
      const long double f = static_cast<long double>(*s->flops) * s->calls;
      snap_flops.total += f;
      ctr_flops.total += f;
      if (snap) snap_flops.covered += f;
      if (ctr) ctr_flops.covered += f;
    }
    if (s->kernel_time_us) {
      const long double t = *s->kernel_time_us * s->calls;
      ctr_time.covered += t;
      ctr_time.total += t;
    } else if (!s->flops || *s->flops > 0) {
      ctr_time.total_known = false;  // an unmeasured FLOP-bearing (or unknown) signature
    }
  }
  JsonValue snapshots = JsonValue::object(
      {{"by_signatures", fraction_json(snap_sigs)}, {"by_calls", fraction_json(snap_calls)}, {"by_flops", fraction_json(snap_flops)}});
  JsonValue counters = JsonValue::object({{"by_signatures", fraction_json(ctr_sigs)},
                                          {"by_calls", fraction_json(ctr_calls)},
                                          {"by_flops", fraction_json(ctr_flops)},
                                          {"by_measured_time_us", fraction_json(ctr_time)}});
  return JsonValue::object({{"snapshots", snapshots},
                            {"counters", counters},
                            {"signatures_without_flop_formula", JsonValue::integer(static_cast<int64_t>(unknown_flops))}});
}

// Kernel time per call (µs) from a profile's kernels.json, if it has one.
std::optional<double> profile_time_us(const std::string& dir) {
  JsonValue kernels;
  return format::parse_json_file(dir + "/kernels.json", kernels) ? kernels_time_us(kernels) : std::nullopt;
}

std::string pct(const JsonValue& fraction) {
  const JsonValue* f = fraction.find("fraction");
  if (!f || f->is_null()) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", f->as_float() * 100);
  return buf;
}


std::string short_signature(const Signature& s) { return audit::short_signature(s.value); }

std::string make_summary(const std::map<std::string, std::vector<const Signature*>>& by_stage,
                         const std::vector<const Signature*>& all, const JsonValue& overall, const JsonValue& stages,
                         size_t files, const std::set<int64_t>& ranks, uint64_t dropped) {
  std::ostringstream md;
  uint64_t calls = 0;
  for (auto* s : all) calls += s->calls;
  md << "# lingprobe coverage audit\n\n"
     << all.size() << " distinct signatures, " << calls << " calls, from " << files << " metadata file(s) of "
     << ranks.size() << " rank(s); " << dropped
     << " dropped (call records, snapshots or profiles: `dropped` in coverage_audit.json says which).\n\n"
     << "| coverage | by signatures | by calls | by FLOPs | by measured time |\n|---|---|---|---|---|\n";
  for (const char* kind : {"snapshots", "counters"}) {
    const JsonValue& c = *overall.find(kind);
    md << "| " << kind << " | " << pct(*c.find("by_signatures")) << " | " << pct(*c.find("by_calls")) << " | "
       << pct(*c.find("by_flops")) << " | "
       << (c.find("by_measured_time_us") ? pct(*c.find("by_measured_time_us")) : std::string("-")) << " |\n";
  }
  size_t i = 0;
  for (const auto& [stage, group] : by_stage) {
    const JsonValue& st = stages.items()[i++];
    md << "\n## Stage `" << stage << "`: " << group.size() << " signatures, "
       << st.find("recorded_calls")->as_int() << " calls\n\n";
    std::vector<const Signature*> by_calls = group, by_flops;
    for (auto* s : group)
      if (s->flops && *s->flops > 0) by_flops.push_back(s);
    std::sort(by_flops.begin(), by_flops.end(), [](auto* a, auto* b) {
      return static_cast<long double>(*a->flops) * a->calls > static_cast<long double>(*b->flops) * b->calls;
    });
    md << "Top by calls:\n\n| calls | FLOPs/call | snapshot | counters | signature |\n|---|---|---|---|---|\n";
    for (size_t k = 0; k < by_calls.size() && k < 5; ++k) {
      auto* s = by_calls[k];
      md << "| " << s->calls << " | " << (s->flops ? human_count(*s->flops) : "unknown") << " | "
         << (s->snapshots.empty() ? "no" : "yes") << " | " << (s->profiles.empty() ? "no" : "yes") << " | `"
         << short_signature(*s) << "` " << s->sha.substr(0, 12) << " |\n";
    }
    if (!by_flops.empty()) {
      md << "\nTop by FLOPs (calls x FLOPs/call):\n\n| total FLOPs | calls | signature |\n|---|---|---|\n";
      for (size_t k = 0; k < by_flops.size() && k < 5; ++k) {
        auto* s = by_flops[k];
        md << "| " << human_count(static_cast<long double>(*s->flops) * s->calls) << " | " << s->calls << " | `"
           << short_signature(*s) << "` " << s->sha.substr(0, 12) << " |\n";
      }
    }
    size_t uncovered = 0;
    for (auto* s : group) uncovered += s->profiles.empty();
    md << "\nNot covered by counters: " << uncovered << " of " << group.size() << " signatures";
    const JsonValue& cov = *st.find("coverage")->find("counters");
    md << " (" << pct(*cov.find("by_calls")) << " of calls, " << pct(*cov.find("by_flops")) << " of FLOPs covered).\n";
  }
  return md.str();
}

}  // namespace

AuditOutcome run_audit(const AuditOptions& options) {
  AuditOutcome outcome;
  if (options.inputs.empty()) {
    outcome.error = "no input: give a run directory or metadata JSONL files";
    return outcome;
  }
  // 1. Files and the run directory (a launch's OUT/{run_id}; an OUT holding one launch).
  std::vector<std::string> files;
  std::string run_dir;
  auto add_run = [&](const std::string& dir) {
    if (run_dir.empty()) run_dir = dir;
    for (const auto& f : sink::metadata_files(dir)) files.push_back(f);
  };
  for (const auto& raw : options.inputs) {
    const std::string in = strip_slash(raw);
    if (is_dir(in + "/metadata")) {
      add_run(in);
    } else if (is_dir(in) && basename(in) == "metadata") {
      add_run(parent(in));
    } else if (is_dir(in)) {
      std::vector<std::string> launches;
      for (const auto& name : list_dir(in))
        if (!is_symlink(in + "/" + name) && is_dir(in + "/" + name + "/metadata")) launches.push_back(name);
      if (launches.size() > 1 && !options.allow_mixed_runs) {
        std::string names;
        for (size_t i = 0; i < launches.size(); ++i) names += (i ? ", " : "") + launches[i];
        outcome.error = in + " holds " + std::to_string(launches.size()) + " launches (" + names +
                        "): audit one run directory (" + in + "/" + launches.back() + ", or " + in +
                        "/latest for the newest), or pass --allow-mixed-runs";
        return outcome;
      }
      for (const auto& name : launches) add_run(in + "/" + name);
      if (launches.empty()) {
        outcome.error = "no metadata files (*.jsonl) found in " + in + " (neither " + in + "/metadata nor " + in +
                        "/{run_id}/metadata exists)";
        return outcome;
      }
    } else {
      if (run_dir.empty()) {
        const std::string dir = parent(in);
        run_dir = basename(dir) == "metadata" ? parent(dir) : dir;
      }
      files.push_back(in);
    }
  }
  if (files.empty()) {
    outcome.error = "no metadata files (*.jsonl) found in " + options.inputs.front();
    return outcome;
  }

  // 2. Read every file (streaming) and validate it; then sort the processes:
  // ranks make the rows; children (and, beside ranks, plain parents such as
  // mp.spawn's) are reported apart; launchers wrote nothing to count.
  std::vector<FileSummary> summaries;
  uint64_t bytes_total = 0;
  std::set<std::string> run_ids;
  bool any_rank = false;
  for (const auto& path : files) {
    FileSummary f;
    auto progress = [&](uint64_t done) {
      if (options.progress)
        std::fprintf(stderr, "\r[lingprobe audit] %s: %.0f MiB", basename(path).c_str(), static_cast<double>(done) / (1 << 20));
    };
    ReadResult rr = read_metadata_file(path, f, progress);
    if (options.progress && f.bytes >= (64u << 20)) std::fprintf(stderr, "\n");
    if (!rr.ok) {
      outcome.error = rr.error;
      return outcome;
    }
    bytes_total += f.bytes;
    if (f.bytes == 0 || !f.has_header) {
      outcome.warnings.push_back(path + ": " + (f.bytes == 0 ? "empty file" : "no header record") + "; skipped");
      continue;
    }
    if (f.format != "lingprobe.metadata/1") {
      outcome.error = path + ": format '" + f.format + "' is not lingprobe.metadata/1; refusing to mix formats";
      return outcome;
    }
    if (f.role == "launcher") {
      outcome.warnings.push_back(path + ": written by a launcher process; skipped");
      continue;
    }
    run_ids.insert(f.run_id);
    any_rank = any_rank || f.role == "rank";
    summaries.push_back(std::move(f));
  }
  if (run_ids.size() > 1) {
    std::string ids;
    for (const auto& id : run_ids) ids += (ids.empty() ? "'" : ", '") + id + "'";
    if (!options.allow_mixed_runs) {
      outcome.error = "these files belong to " + std::to_string(run_ids.size()) + " launches (run_id " + ids +
                      "); audit one launch's run directory, or pass --allow-mixed-runs to sum them";
      return outcome;
    }
    outcome.warnings.push_back("--allow-mixed-runs: summing " + std::to_string(run_ids.size()) + " launches (" + ids + ")");
  }

  std::map<std::string, Signature> sigs;
  std::set<int64_t> ranks;
  std::string run_id = run_ids.empty() ? "" : *run_ids.begin();
  int64_t world_size = -1;
  uint64_t dropped_total = 0;
  std::map<std::string, uint64_t> nested;  // calls nested below recorded ones, all files (LINGPROBE_SUPPRESS_NESTED)
  std::map<std::string, uint64_t> compile_time;  // compile-time calls on fake tensors, all files
  std::map<std::string, std::map<std::string, uint64_t>> dropped;
  std::map<std::string, uint64_t> sampling, unsampled;  // summed over the ranks' files
  std::vector<Refusal> refusals;                        // every rank's refusal records
  std::vector<PlanRecord> plans;                        // every process's sample plan record
  JsonValue sources = JsonValue::array();
  JsonValue others = JsonValue::array();
  uint64_t other_calls = 0;
  std::vector<std::pair<std::string, std::string>> source_rows;
  size_t used_files = 0;
  std::vector<const FileSummary*> row_files;  // the files whose calls make the rows
  // Each rank's stall caused by counter windows (its profile records and counts).
  struct WindowStall {
    uint64_t windows = 0;
    std::map<std::string, uint64_t> by_status;
    double window_s = 0, lock_wait_s = 0, max_window_s = 0;
    int64_t stall_us = -1;  // the counts record's total: refused waits for the lock included
  };
  std::map<int64_t, WindowStall> stalls;
  for (FileSummary& f : summaries) {
    const std::string& path = f.path;
    const std::map<uint32_t, uint64_t>* counts = &f.counts;
    if (!f.has_counts) {
      counts = &f.call_records;
      outcome.warnings.push_back(path + ": no counts record; counted its call records instead");
    } else if (!f.final_counts) {
      outcome.warnings.push_back(path + ": no final counts record (the process did not finish); using its last counts");
    }
    if (f.truncated_last_line) outcome.warnings.push_back(path + ": truncated last line skipped (killed while writing?)");
    for (const auto& [id, n] : *counts)
      if (!f.signature_sha.count(id)) {
        outcome.error = path + ": counts name signature id " + std::to_string(id) + ", which the file never defines";
        return outcome;
      }
    if (f.role == "child" || (f.role != "rank" && any_rank)) {
      uint64_t calls = 0;
      for (const auto& [id, n] : *counts) calls += n;
      other_calls += calls;
      JsonValue o = JsonValue::object();
      o.set("path", JsonValue::string(relative(path, run_dir)));
      o.set("sha256", JsonValue::string(f.sha256));
      o.set("role", JsonValue::string(f.role));
      o.set("pid", JsonValue::integer(f.pid));
      o.set("parent_pid", f.parent_pid >= 0 ? JsonValue::integer(f.parent_pid) : JsonValue::null());
      o.set("calls", JsonValue::integer(static_cast<int64_t>(calls)));
      o.set("signatures", JsonValue::integer(static_cast<int64_t>(counts->size())));
      others.push_back(std::move(o));
      continue;
    }
    if (world_size >= 0 && f.world_size != world_size) {
      outcome.error = path + ": world_size " + std::to_string(f.world_size) + " disagrees with " +
                      std::to_string(world_size) + " of the files before it; these files are not one run";
      return outcome;
    }
    world_size = f.world_size;
    for (const auto& [id, n] : *counts) {
      const std::string& sha = f.signature_sha.at(id);
      Signature& s = sigs[sha];
      if (s.sha.empty()) {
        s.sha = sha;
        auto parsed = format::parse_json(f.signature_json[sha]);
        if (!parsed.ok || parsed.value.kind() != JsonValue::Kind::Object) {
          outcome.error = path + ": signature " + sha + " has malformed signature_json";
          return outcome;
        }
        s.value = std::move(parsed.value);
        const JsonValue* st = s.value.find("stage");
        const JsonValue* op = s.value.find("op");
        s.stage = st && st->kind() == JsonValue::Kind::String ? st->as_string() : "unstaged";
        s.op = op && op->kind() == JsonValue::Kind::String ? op->as_string() : "?";
        s.flops = format::flops_per_call(s.value);
      }
      if (n == 0) continue;
      s.calls_by_rank[f.rank] += n;
      s.calls += n;
      ranks.insert(f.rank);
    }
    for (const auto& e : f.snapshots) {
      auto it = f.signature_sha.find(e.id);
      if (it != f.signature_sha.end()) sigs[it->second].snapshots.push_back(e);
    }
    for (const auto& e : f.profiles) {
      auto it = f.signature_sha.find(e.id);
      if (it != f.signature_sha.end()) sigs[it->second].profiles.push_back(e);
      WindowStall& st = stalls[f.rank];
      ++st.windows;
      ++st.by_status[e.status.empty() ? "unknown" : e.status];
      if (e.window_seconds >= 0) st.window_s += e.window_seconds, st.max_window_s = std::max(st.max_window_s, e.window_seconds);
      if (e.lock_wait_seconds >= 0) st.lock_wait_s += e.lock_wait_seconds;
    }
    if (auto it = f.sampling.find("profile_stall_us"); it != f.sampling.end()) {
      WindowStall& st = stalls[f.rank];
      st.stall_us = std::max<int64_t>(st.stall_us, 0) + static_cast<int64_t>(it->second);
    }
    for (const auto& [what, reasons] : f.dropped)
      for (const auto& [reason, n] : reasons) dropped[what][reason] += n, dropped_total += n;
    for (const auto& [k, n] : f.sampling) sampling[k] += n;
    for (const auto& [k, n] : f.unsampled) unsampled[k] += n;
    refusals.insert(refusals.end(), f.refusals.begin(), f.refusals.end());
    plans.insert(plans.end(), f.plans.begin(), f.plans.end());
    for (const auto& [k, n] : f.nested) nested[k] += n;
    for (const auto& [k, n] : f.compile_time) compile_time[k] += n;
    source_rows.emplace_back(relative(path, run_dir), f.sha256);
    row_files.push_back(&f);
    ++used_files;
  }
  // Signatures defined but never counted carry no calls: not rows.
  for (auto it = sigs.begin(); it != sigs.end();) it = it->second.calls ? std::next(it) : sigs.erase(it);

  std::vector<RankViewSignature> rank_signatures;
  for (const auto& [sha, s] : sigs) rank_signatures.push_back({sha, s.stage, s.op, short_signature(s), s.calls_by_rank});
  const RankView ranks_view = rank_view(world_size, row_files, rank_signatures);

  // 3. Evidence belongs to its run: only files this run's own records name,
  // whose SHA-256 still matches (a profile's is its manifest.json's). Anything
  // else under snapshots/ or profiles/ is foreign: reported, never counted.
  std::set<std::string> named;
  for (const FileSummary& f : summaries) {
    for (const auto& e : f.snapshots) named.insert(e.path);
    for (const auto& e : f.profiles) named.insert(e.path);
  }
  JsonValue rejected = JsonValue::array(), foreign = JsonValue::array();
  auto reject = [&](const Evidence& e, const std::string& why) {
    rejected.push_back(JsonValue::object({{"path", JsonValue::string(e.path)}, {"reason", JsonValue::string(why)}}));
    outcome.warnings.push_back("evidence " + e.path + " not counted: " + why);
  };
  for (auto& [sha, sig] : sigs) {
    std::vector<Evidence> kept;
    std::set<std::string> seen;
    for (const auto& e : sig.snapshots) {
      if (!seen.insert(e.path).second) continue;
      std::string actual;
      if (!evidence_path_inside(e.path)) reject(e, "its path leaves the run directory");
      else if (!format::sha256_file_hex(run_dir + "/" + e.path, actual)) reject(e, "missing");
      else if (actual != e.sha256) reject(e, "its SHA-256 differs from the one recorded (altered after the run)");
      else kept.push_back(e);
    }
    sig.snapshots = std::move(kept);
    kept.clear();
    seen.clear();
    for (const auto& e : sig.profiles) {
      if (!seen.insert(e.path).second) continue;
      std::string actual;
      if (!evidence_path_inside(e.path)) {
        reject(e, "its path leaves the run directory");
        continue;
      }
      const std::string dir = run_dir + "/" + e.path;
      if (!format::sha256_file_hex(dir + "/manifest.json", actual)) reject(e, "its manifest.json is missing");
      else if (actual != e.sha256) reject(e, "its manifest's SHA-256 differs from the one recorded");
      else if (auto t = profile_time_us(dir)) {
        if (!sig.kernel_time_us) sig.kernel_time_us = t;
        kept.push_back(e);
      }  // a profile without counters (e.g. counters unavailable) is not counter evidence
    }
    sig.profiles = std::move(kept);
  }
  // A complete file that a killed process renamed into place but did not
  // live to record (its record, even its signature's, was still queued):
  // its name says the rank, and a file of that rank ends without its final
  // counts. Listed apart (unrecorded_evidence), not counted, not a warning.
  auto unrecorded = [&summaries](const std::string& name) {
    static const std::regex kWho("_rank([0-9]+)_[0-9a-f]{16}(_|\\.pt$|$)");
    std::smatch m;
    if (!std::regex_search(name, m, kWho)) return false;
    const int64_t rank = std::stoll(m[1].str());
    return std::any_of(summaries.begin(), summaries.end(), [rank](const FileSummary& f) {
      return f.role != "child" && f.rank == rank && !f.final_counts;
    });
  };
  JsonValue unrecorded_json = JsonValue::array();
  for (const char* sub : {"snapshots", "profiles"})
    for (const auto& name : list_dir(run_dir + "/" + sub)) {
      const std::string rel = std::string(sub) + "/" + name;
      if (named.count(rel)) continue;
      if (unrecorded(name)) {
        unrecorded_json.push_back(JsonValue::object(
            {{"path", JsonValue::string(rel)},
             {"reason", JsonValue::string("complete, but its process ended (killed) before recording it")}}));
        continue;
      }
      foreign.push_back(JsonValue::object(
          {{"path", JsonValue::string(rel)}, {"reason", JsonValue::string("not named by this run's metadata")}}));
    }
  if (!foreign.items().empty())
    outcome.warnings.push_back(std::to_string(foreign.items().size()) +
                               " file(s) under snapshots/ or profiles/ are not this run's evidence (listed under "
                               "foreign_evidence; not counted)");

  // 4. Rows in the seed's order: stage, calls descending, sha ascending.
  std::vector<const Signature*> all;
  for (const auto& [sha, s] : sigs) all.push_back(&s);
  std::sort(all.begin(), all.end(), [](const Signature* a, const Signature* b) {
    if (a->stage != b->stage) return a->stage < b->stage;
    if (a->calls != b->calls) return a->calls > b->calls;
    return a->sha < b->sha;
  });
  std::map<std::string, std::vector<const Signature*>> by_stage;
  for (auto* s : all) by_stage[s->stage].push_back(s);

  auto evidence_json = [](const Evidence* e) {
    if (!e) return JsonValue::null();
    return JsonValue::object({{"path", JsonValue::string(e->path)}, {"sha256", JsonValue::string(e->sha256)}});
  };
  JsonValue rows = JsonValue::array();
  for (const Signature* s : all) {
    JsonValue by_rank = JsonValue::object();
    for (const auto& [rank, n] : s->calls_by_rank)
      if (n) by_rank.set(std::to_string(rank), JsonValue::integer(static_cast<int64_t>(n)));
    JsonValue inputs = JsonValue::array();
    for (const auto& p : s->profiles) {
      const Evidence* snap = s->snapshots.empty() ? nullptr : &s->snapshots.front();
      for (const auto& sn : s->snapshots)
        if (sn.seq == p.seq) snap = &sn;
      inputs.push_back(JsonValue::object({{"input", JsonValue::string(snap ? snap->path : p.path)},
                                          {"input_sha256", JsonValue::string(snap ? snap->sha256 : p.sha256)}}));
    }
    JsonValue row = JsonValue::object();
    row.set("signature", s->value);
    row.set("signature_sha256", JsonValue::string(s->sha));
    row.set("calls", JsonValue::integer(static_cast<int64_t>(s->calls)));
    row.set("calls_by_rank", std::move(by_rank));
    row.set("same_structural_signature_ncu_inputs", std::move(inputs));
    row.set("flops_per_call", s->flops ? JsonValue::integer(*s->flops) : JsonValue::null());
    row.set("snapshot", evidence_json(s->snapshots.empty() ? nullptr : &s->snapshots.front()));
    row.set("profile", evidence_json(s->profiles.empty() ? nullptr : &s->profiles.front()));
    row.set("kernel_time_us_per_call", s->kernel_time_us ? JsonValue::floating(*s->kernel_time_us) : JsonValue::null());
    rows.push_back(std::move(row));
  }
  JsonValue stages = JsonValue::array();
  for (const auto& [stage, group] : by_stage) {
    uint64_t calls = 0, with_prior = 0, calls_with_prior = 0;
    for (auto* s : group) {
      calls += s->calls;
      if (!s->profiles.empty()) ++with_prior, calls_with_prior += s->calls;
    }
    JsonValue st = JsonValue::object();
    st.set("stage", JsonValue::string(stage));
    st.set("distinct_signatures", JsonValue::integer(static_cast<int64_t>(group.size())));
    st.set("recorded_calls", JsonValue::integer(static_cast<int64_t>(calls)));
    st.set("signatures_with_prior_ncu_input", JsonValue::integer(static_cast<int64_t>(with_prior)));
    st.set("calls_with_structurally_matching_prior_input", JsonValue::integer(static_cast<int64_t>(calls_with_prior)));
    st.set("coverage", coverage_json(group));
    stages.push_back(std::move(st));
  }
  std::sort(source_rows.begin(), source_rows.end());
  for (const auto& [p, sha] : source_rows)
    sources.push_back(JsonValue::object({{"path", JsonValue::string(p)}, {"sha256", JsonValue::string(sha)}}));

  JsonValue overall = coverage_json(all);
  JsonValue ranks_json = JsonValue::array();
  for (int64_t r : ranks) ranks_json.push_back(JsonValue::integer(r));
  JsonValue dropped_json = JsonValue::object();
  for (const auto& [what, reasons] : dropped) {
    JsonValue r = JsonValue::object();
    for (const auto& [reason, n] : reasons) r.set(reason, JsonValue::integer(static_cast<int64_t>(n)));
    dropped_json.set(what, std::move(r));
  }
  JsonValue warnings = JsonValue::array();
  for (const auto& w : outcome.warnings) warnings.push_back(JsonValue::string(w));

  JsonValue report = JsonValue::object();
  report.set("status", JsonValue::string("structural_signature_coverage_audited"));
  report.set("scope", JsonValue::string(
      "All recorded metadata calls of one lingprobe run (" + std::to_string(used_files) + " file(s), " +
      std::to_string(ranks.size()) + " rank(s), world size " + std::to_string(world_size) +
      "), audited against this run's own evidence: 'same_structural_signature_ncu_inputs' lists each signature's "
      "profiles with hardware counters, measured inline on this run's own calls (the input is that call's snapshot "
      "where one exists). Exact op, nested argument shape/stride/dtype/scalars, kwargs and output metadata; device "
      "removed for cross-rank comparison. FLOPs are analytic (2 per multiply-add, bias included; data movement 0; "
      "null where no formula is known)."));
  report.set("stages", stages);
  report.set("rows", std::move(rows));
  report.set("sources", std::move(sources));
  report.set("coverage", overall);
  report.set("run", JsonValue::object({{"run_id", JsonValue::string(run_id)},
                                       {"world_size", JsonValue::integer(world_size)},
                                       {"ranks", std::move(ranks_json)},
                                       {"metadata_bytes", JsonValue::integer(static_cast<int64_t>(bytes_total))}}));
  report.set("dropped", std::move(dropped_json));
  report.set("other_processes", std::move(others));
  if (!compile_time.empty()) {
    JsonValue cj = JsonValue::object();
    for (const auto& [k, n] : compile_time) cj.set(k, JsonValue::integer(static_cast<int64_t>(n)));
    report.set("compile_time_calls", std::move(cj));
  }
  if (!nested.empty()) {
    JsonValue nj = JsonValue::object();
    for (const auto& [k, n] : nested) nj.set(k, JsonValue::integer(static_cast<int64_t>(n)));
    report.set("nested_calls", std::move(nj));
  }
  // What each key refused evidence at some call holds in the end (its signatures' snapshots and passed profiles).
  std::map<std::string, HeldEvidence> held;
  for (const auto& [sha, sig] : sigs) {
    if (sig.snapshots.empty() && sig.profiles.empty()) continue;
    HeldEvidence& h = held[format::input_key_sha256(sig.value)];
    h.snapshot = h.snapshot || !sig.snapshots.empty();
    for (const auto& p : sig.profiles) h.counters = h.counters || p.status == "passed";
  }
  const std::vector<KeyEvidence> refused_keys = key_evidence(refusals, held);
  if (!sampling.empty()) {
    JsonValue sj = JsonValue::object();
    for (const auto& [k, n] : sampling) sj.set(k, JsonValue::integer(static_cast<int64_t>(n)));
    JsonValue uj = JsonValue::object();
    for (const auto& [k, n] : unsampled) uj.set(k, JsonValue::integer(static_cast<int64_t>(n)));
    sj.set("unsampled_keys", std::move(uj));
    sj.set("refusals", key_evidence_json(refused_keys));
    if (!plans.empty()) sj.set("plan", plan_json(plans));
    report.set("sampling", std::move(sj));
  }
  JsonValue stall_rows = JsonValue::array();
  std::string stall_table;
  for (const auto& [rank, st] : stalls) {
    JsonValue statuses = JsonValue::object();
    std::string status_text;
    for (const auto& [k, n] : st.by_status) {
      statuses.set(k, JsonValue::integer(static_cast<int64_t>(n)));
      status_text += (status_text.empty() ? "" : ", ") + k + " " + std::to_string(n);
    }
    const double total = st.stall_us >= 0 ? static_cast<double>(st.stall_us) / 1e6 : st.window_s;
    stall_rows.push_back(JsonValue::object({{"rank", JsonValue::integer(rank)},
                                            {"windows", JsonValue::integer(static_cast<int64_t>(st.windows))},
                                            {"by_status", std::move(statuses)},
                                            {"window_seconds_total", JsonValue::floating(st.window_s)},
                                            {"lock_wait_seconds_total", JsonValue::floating(st.lock_wait_s)},
                                            {"max_window_seconds", JsonValue::floating(st.max_window_s)},
                                            {"stall_seconds_total", JsonValue::floating(total)}}));
    char line[160];
    std::snprintf(line, sizeof line, "| %lld | %llu | %.2f | %.2f | %.2f | %.2f | ", static_cast<long long>(rank),
                  static_cast<unsigned long long>(st.windows), total, st.window_s, st.lock_wait_s, st.max_window_s);
    stall_table += line + status_text + " |\n";
  }
  if (!stalls.empty())
    report.set("counter_windows", JsonValue::object({{"by_rank", std::move(stall_rows)}}));
  report.set("ranks", ranks_view.json);
  report.set("rejected_evidence", std::move(rejected));
  report.set("foreign_evidence", std::move(foreign));
  if (!unrecorded_json.items().empty()) report.set("unrecorded_evidence", std::move(unrecorded_json));
  report.set("warnings", std::move(warnings));

  // 5. Write: the report, then the summary (nothing when anything failed above).
  outcome.report_path = options.output.empty() ? run_dir + "/reports/coverage_audit.json" : options.output;
  outcome.summary_path = parent(outcome.report_path) + "/summary.md";
  outcome.summary = make_summary(by_stage, all, overall, stages, used_files, ranks, dropped_total);
  if (!nested.empty())
    outcome.summary += "\nCalls nested below top-level calls: " + std::to_string(nested["seen"]) +
                       " reached lingprobe (each boxed by the dispatcher); RecordFunction was switched off below " +
                       std::to_string(nested["suppressed_below"]) +
                       " top-level call(s) (LINGPROBE_SUPPRESS_NESTED), whose nested calls were neither boxed nor counted.\n";
  if (!compile_time.empty()) {
    uint64_t total = 0;
    std::string kinds;
    for (const auto& [k, n] : compile_time) total += n, kinds += (kinds.empty() ? "" : ", ") + k + " " + std::to_string(n);
    outcome.summary += "\nCalls torch.compile's tracing ran on fake tensors: " + std::to_string(total) + " (" + kinds +
                       "), counted as compile time, outside the rows above.\n";
  }
  if (!sampling.empty()) {
    std::vector<const Signature*> missing;
    for (auto* sg : all)
      if (sg->snapshots.empty()) missing.push_back(sg);
    std::string why;
    for (const auto& [k, n] : unsampled)
      if (n && k != "sampled_by_another_process") why += (why.empty() ? "" : ", ") + k + " " + std::to_string(n);
    std::string drops;
    if (auto it = dropped.find("snapshots"); it != dropped.end())
      for (const auto& [k, n] : it->second) drops += (drops.empty() ? "" : ", ") + k + " " + std::to_string(n);
    outcome.summary += "\n## Snapshots\n\n" + std::to_string(sampling["snapshots_written"]) + " snapshot(s), " +
                       human_count(static_cast<long double>(sampling["snapshot_bytes"])) + "B, of " +
                       std::to_string(sampling["keys"]) + " input key(s) seen by the ranks (each counted per rank). " +
                       std::to_string(missing.size()) + " of " + std::to_string(all.size()) +
                       " signatures have no snapshot" + (why.empty() ? "" : "; keys not sampled: " + why) +
                       (drops.empty() ? "" : "; samples dropped: " + drops) + ".\n";
    for (size_t k = 0; k < missing.size() && k < 10; ++k)
      outcome.summary += "- no snapshot: `" + short_signature(*missing[k]) + "` " + missing[k]->sha.substr(0, 12) +
                         " (" + std::to_string(missing[k]->calls) + " calls)\n";
    if (!refused_keys.empty()) outcome.summary += key_evidence_markdown(refused_keys, 20);
    outcome.summary += plan_markdown(plans, 20);
  }
  outcome.summary += ranks_view.markdown;
  if (!stall_table.empty())
    outcome.summary += "\n## Counter windows: each rank's stall\n\nWall seconds the ranks spent in counter windows "
                       "(kernel replay, one window at a time per GPU); the lock wait is time spent waiting for another "
                       "rank's window; the total adds waits that timed out (the window then refused as "
                       "`hardware_busy`).\n\n| rank | windows | stall s (total) | in windows s | of which lock wait s | "
                       "longest window s | status |\n|---|---|---|---|---|---|---|\n" + stall_table;
  if (const size_t n_others = report.find("other_processes")->items().size())
    outcome.summary += "\n## Other processes (not in the rows)\n\n" + std::to_string(n_others) +
                       " process(es) started by the ranks or starting them (DataLoader or compile workers, an "
                       "mp.spawn parent) recorded " + std::to_string(other_calls) +
                       " call(s); they are listed under `other_processes` in coverage_audit.json.\n";
  outcome.run_dir = run_dir;
  if (!options.write) {
    outcome.report = std::move(report);
    outcome.ok = true;
    return outcome;
  }
  if (std::string err = sink::make_directories(parent(outcome.report_path)); !err.empty()) {
    outcome.error = err;
    return outcome;
  }
  // `lingprobe report`'s section of an earlier summary.md survives a re-audit.
  std::string summary_file;
  {
    std::ifstream old_summary(outcome.summary_path, std::ios::binary);
    std::stringstream text;
    text << old_summary.rdbuf();
    summary_file = compose_summary({outcome.summary, split_summary(text.str()).capability});
  }
  for (const auto& [path, text] : {std::make_pair(outcome.report_path, format::pretty_json(report) + "\n"),
                                   std::make_pair(outcome.summary_path, summary_file)})
    if (std::string err = sink::replace_file(path, text); !err.empty()) {
      outcome.error = err;
      return outcome;
    }
  outcome.report = std::move(report);
  outcome.ok = true;
  return outcome;
}

}  // namespace lingprobe::audit
