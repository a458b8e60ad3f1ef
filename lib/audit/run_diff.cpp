#include "audit/run_diff.h"

#include "audit/profile_evidence.h"

#include "audit/audit_rows.h"
#include "audit/row_pairing.h"
#include "audit/signature_compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "audit/coverage_audit.h"
#include "audit/operator_table.h"
#include "audit/signature_text.h"
#include "format/canonical_json.h"
#include "format/json_parse.h"
#include "format/glob.h"
#include "format/op_selection.h"
#include "sink/run_directory.h"

namespace lingprobe::audit {
namespace {

using format::JsonValue;
using Kind = JsonValue::Kind;

struct Run {
  std::string dir, run_id;
  int64_t world_size = 0;
  bool fold_scalars = false;
  std::string ops, ops_deny;  // its op selection
  format::OpSelection selection;
  JsonValue report;
  std::vector<DiffRow> rows;
};

JsonValue relative(long double a, long double b) {
  return a != 0 ? JsonValue::floating(static_cast<double>((b - a) / a)) : JsonValue::null();
}

// Kernel-by-kernel metric changes between two profiles (their kernels.json).
JsonValue kernel_changes(const Run& a, const DiffRow& ra, const Run& b, const DiffRow& rb) {
  JsonValue ka, kb;
  if (!format::parse_json_file(a.dir + "/" + ra.profile + "/kernels.json", ka) ||
      !format::parse_json_file(b.dir + "/" + rb.profile + "/kernels.json", kb))
    return JsonValue::null();
  JsonValue changes = kernel_metric_changes(ka, kb);
  if (changes.kind() != Kind::Object) return changes;
  changes.set("a_profile", JsonValue::string(ra.profile));
  changes.set("b_profile", JsonValue::string(rb.profile));
  changes.set("kernel_time_us_per_call_a", ra.kernel_us ? JsonValue::floating(*ra.kernel_us) : JsonValue::null());
  changes.set("kernel_time_us_per_call_b", rb.kernel_us ? JsonValue::floating(*rb.kernel_us) : JsonValue::null());
  return changes;
}

JsonValue row_json(const DiffRow& r) {
  return JsonValue::object({{"signature_sha256", JsonValue::string(r.sha)},
                            {"signature", JsonValue::string(r.text)},
                            {"calls", JsonValue::integer(static_cast<int64_t>(r.calls))},
                            {"calls_by_rank", r.calls_by_rank},
                            {"flops_per_call", r.flops ? JsonValue::integer(*r.flops) : JsonValue::null()},
                            {"profile", r.profile.empty() ? JsonValue::null() : JsonValue::string(r.profile)}});
}

// Calls per rank that runs them (the ranks of every row together).
long double per_rank(const std::vector<const DiffRow*>& rows) {
  std::set<std::string> ranks;
  uint64_t calls = 0;
  for (const DiffRow* r : rows) {
    calls += r->calls;
    for (const auto& [rank, n] : r->calls_by_rank.members()) ranks.insert(rank);
  }
  return ranks.empty() ? 0 : static_cast<long double>(calls) / ranks.size();
}

std::string calls_change_text(uint64_t a, uint64_t b) {
  std::string s = std::to_string(a) + " → " + std::to_string(b);
  if (a) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " (%+.1f%%)",
                  100.0 * (static_cast<double>(b) - static_cast<double>(a)) / static_cast<double>(a));
    s += buf;
  }
  return s;
}

// The run audited in memory: kBadInput (not a run directory), else the audit's failure.
format::Status load(std::string dir, Run& run, std::vector<Warning>& warnings) {
  if (std::string why = sink::find_run_directory(dir); !why.empty())
    return format::Status(format::StatusCode::kBadInput, why);
  AuditOptions o;
  o.inputs = {dir};
  o.write = false;
  AuditOutcome out = run_audit(o);
  for (const Warning& w : out.warnings) warnings.push_back({w.code, dir + ": " + w.message});
  if (!out.status.ok()) return format::Status(out.status.code(), dir + ": " + out.status.message());
  run.dir = out.run_dir;
  run.fold_scalars = out.fold_scalars;
  run.ops = out.ops;
  run.ops_deny = out.ops_deny;
  run.selection.parse(run.ops, run.ops_deny);  // checked when the run was recorded
  run.report = std::move(out.report);
  if (const JsonValue* r = run.report.find("run")) {
    if (const JsonValue* id = r->find("run_id")) run.run_id = id->as_string();
    if (const JsonValue* ws = r->find("world_size")) run.world_size = ws->as_int();
  }
  for (const JsonValue& row : run.report.find("rows")->items()) {
    DiffRow r;
    r.signature = row.find("signature");
    r.sha = row.find("signature_sha256")->as_string();
    const JsonValue* st = r.signature->find("stage");
    const JsonValue* op = r.signature->find("op");
    r.stage = st && st->kind() == Kind::String ? st->as_string() : "unstaged";
    r.op = op && op->kind() == Kind::String ? op->as_string() : "?";
    r.text = short_signature(*r.signature);
    r.calls = static_cast<uint64_t>(row.find("calls")->as_int());
    r.calls_by_rank = *row.find("calls_by_rank");
    if (const JsonValue* f = row.find("flops_per_call"); f && f->kind() == Kind::Int) r.flops = f->as_int();
    if (const JsonValue* p = row.find("profile"); p && p->kind() == Kind::Object)
      r.profile = p->find("path")->as_string();
    if (const JsonValue* k = row.find("kernel_time_us_per_call"); k && k->kind() == Kind::Float)
      r.kernel_us = k->as_float();
    if (const JsonValue* h = row.find("host_time_us"); h && h->kind() == Kind::Float) r.host_us = h->as_float();
    run.rows.push_back(std::move(r));
  }
  return format::Status::Ok();
}

// One entry's JSON: its rows, calls and FLOPs, stride variants, the differences of its pairs, counter changes.
JsonValue entry_json(const Run& a, const Run& b, const DiffEntry* e) {
  JsonValue ea = JsonValue::array(), eb = JsonValue::array();
  for (const DiffRow* r : e->a) ea.push_back(row_json(*r));
  for (const DiffRow* r : e->b) eb.push_back(row_json(*r));
  JsonValue j = JsonValue::object();
  j.set("kind", JsonValue::string(e->kind));
  j.set("op", JsonValue::string(e->op));
  j.set("a", std::move(ea));
  j.set("b", std::move(eb));
  j.set("calls_a", JsonValue::integer(static_cast<int64_t>(e->calls_a)));
  j.set("calls_b", JsonValue::integer(static_cast<int64_t>(e->calls_b)));
  j.set("calls_change", JsonValue::integer(static_cast<int64_t>(e->calls_b) - static_cast<int64_t>(e->calls_a)));
  j.set("calls_change_relative", relative(e->calls_a, e->calls_b));
  j.set("flops_a", json_number(e->flops_a));
  j.set("flops_b", json_number(e->flops_b));
  j.set("flops_moved", json_number(e->flops_b - e->flops_a));
  j.set("host_time_us_a", e->host_us_a ? JsonValue::floating(*e->host_us_a) : JsonValue::null());
  j.set("host_time_us_b", e->host_us_b ? JsonValue::floating(*e->host_us_b) : JsonValue::null());
  if (!e->pairing.empty()) j.set("pairing", JsonValue::string(e->pairing));
  j.set("calls_per_rank_a", json_number(per_rank(e->a)));
  j.set("calls_per_rank_b", json_number(per_rank(e->b)));
  JsonValue variants = JsonValue::array();
  for (const auto* rows : {&e->a, &e->b}) {  // rows of one side that differ from each other only in strides
    std::map<std::string, std::vector<const DiffRow*>> same;
    for (const DiffRow* r : *rows) same[format::canonical_json(without_strides(*r->signature))].push_back(r);
    for (const auto& [k, group] : same) {
      if (group.size() < 2) continue;
      JsonValue shas = JsonValue::array();
      for (const DiffRow* r : group) shas.push_back(JsonValue::string(r->sha));
      variants.push_back(
          JsonValue::object({{"side", JsonValue::string(rows == &e->a ? "a" : "b")}, {"signatures", std::move(shas)}}));
    }
  }
  if (!variants.items().empty()) j.set("stride_variants", std::move(variants));
  if (!e->a.empty() && !e->b.empty() && e->kind != "same_signature") {
    JsonValue pairs = JsonValue::array();
    for (const DiffRow* x : e->a)
      for (const DiffRow* y : e->b) {
        if (pairs.items().size() >= 16) break;
        std::vector<std::string> d;
        differences(*x->signature, *y->signature, "", d);
        JsonValue dj = JsonValue::array();
        for (auto& s : d) dj.push_back(JsonValue::string(std::move(s)));
        pairs.push_back(JsonValue::object(
            {{"a", JsonValue::string(x->sha)}, {"b", JsonValue::string(y->sha)}, {"differences", std::move(dj)}}));
      }
    j.set("pairs", std::move(pairs));
  }
  JsonValue kernels = JsonValue::array();
  for (const DiffRow* x : e->a)
    for (const DiffRow* y : e->b)
      if (!x->profile.empty() && !y->profile.empty())
        if (JsonValue k = kernel_changes(a, *x, b, *y); !k.is_null()) kernels.push_back(std::move(k));
  if (!kernels.items().empty()) j.set("counters", std::move(kernels));
  return j;
}

// A pair whose two sides read the same in the table (they differ in what the short text leaves out: strides, an
// offset, a keyword): what differs, under B's cell. A new user's fp32-against-autocast diff showed a "shape_changed"
// row with two identical sides; the stride change was in the JSON only.
std::string hidden_differences(const DiffEntry& e) {
  if (e.a.size() != 1 || e.b.size() != 1 || e.a[0]->text != e.b[0]->text) return "";
  std::vector<std::string> d;
  differences(*e.a[0]->signature, *e.b[0]->signature, "", d);
  std::string s;
  for (size_t i = 0; i < d.size() && i < 3; ++i) s += (i ? "; " : "<br>differs in ") + ("`" + d[i] + "`");
  if (d.size() > 3) s += " and more (--json)";
  return s;
}

// One entry's row in the Markdown detail table.
std::string entry_markdown(const DiffEntry& e) {
  auto cell = [](const std::vector<const DiffRow*>& rows) {
    std::map<std::string, int> same;  // rows of this side alike but for strides: their first tensor's stride shown
    for (const DiffRow* r : rows) ++same[format::canonical_json(without_strides(*r->signature))];
    std::string s;
    for (const DiffRow* r : rows) {
      s += (s.empty() ? "" : "<br>") + ("`" + r->text + "` " + r->sha.substr(0, 12));
      const JsonValue* args = r->signature->find("args");
      const JsonValue* stride =
          args && !args->items().empty() && is_tensor(args->items()[0]) ? args->items()[0].find("stride") : nullptr;
      if (same[format::canonical_json(without_strides(*r->signature))] > 1 && stride)
        s += " stride " + format::canonical_json(*stride);
    }
    return s.empty() ? std::string("—") : s;
  };
  auto count = [](long double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, x == std::floor(x) ? "%.0Lf" : "%.1Lf", x);
    return std::string(buf);
  };
  std::string per;
  if (!e.a.empty() && !e.b.empty()) {
    per = "; per rank " + count(per_rank(e.a)) + " → " + count(per_rank(e.b));
    if (e.host_us_a && e.host_us_b) per += "; host ms " + count(*e.host_us_a / 1e3) + " → " + count(*e.host_us_b / 1e3);
  } else if (const auto& host = e.a.empty() ? e.host_us_b : e.host_us_a) {  // one side: its own host time
    per = "; host ms " + count(*host / 1e3);
  }
  std::ostringstream detail;
  detail << "| " << e.kind << (e.pairing.empty() ? "" : " (by size order)") << " | "
         << human_count(e.flops_b - e.flops_a) << " | " << calls_change_text(e.calls_a, e.calls_b) << per << " | "
         << cell(e.a) << " | " << cell(e.b) << hidden_differences(e) << " |\n";
  return detail.str();
}

JsonValue side_json(const Run& r) {
  uint64_t calls = 0;
  for (const DiffRow& x : r.rows) calls += x.calls;
  return JsonValue::object({{"run_dir", JsonValue::string(r.dir)},
                            {"run_id", JsonValue::string(r.run_id)},
                            {"world_size", JsonValue::integer(r.world_size)},
                            {"ops", JsonValue::string(r.ops)},
                            {"ops_deny", JsonValue::string(r.ops_deny)},
                            {"signatures", JsonValue::integer(static_cast<int64_t>(r.rows.size()))},
                            {"calls", JsonValue::integer(static_cast<int64_t>(calls))}});
}

// "aten.relu.default" as an op selection matches it: the name and the name with its overload ("aten::relu",
// "aten::relu"; "aten.to.dtype": "aten::to", "aten::to.dtype").
bool records(const Run& run, const std::string& op, const std::string& stage) {
  const std::string op_name = operator_of(op), name = schema_name(op_name);
  const std::string overload = op.size() > op_name.size() ? op.substr(op_name.size() + 1) : "";
  return run.selection.selected(name, overload.empty() || overload == "default" ? name : name + "." + overload, stage);
}

// A row only in one run whose op the other run's selection does not record is no change of the program:
// not_recorded_in_a / not_recorded_in_b instead of only_in_b / only_in_a.
void mark_unrecorded(Pairing& pairing, const Run& a, const Run& b) {
  for (DiffEntry& e : pairing.entries) {
    if (e.kind == "only_in_a" && !records(b, e.op, e.stage)) e.kind = "not_recorded_in_b";
    if (e.kind == "only_in_b" && !records(a, e.op, e.stage)) e.kind = "not_recorded_in_a";
  }
  // after the program's changes in each stage's table, however many FLOPs they hold
  std::stable_partition(pairing.entries.begin(), pairing.entries.end(),
                        [](const DiffEntry& e) { return e.kind.rfind("not_recorded_in_", 0) != 0; });
}

// Under the head, when the runs recorded different ops: what each recorded.
std::string selections_markdown(const Run& a, const Run& b) {
  if (a.ops == b.ops && a.ops_deny == b.ops_deny) return "";
  auto text = [](const Run& r) {
    return (r.ops.empty() ? std::string("every op") : "LINGPROBE_OPS='" + r.ops + "'") +
           (r.ops_deny.empty() ? "" : ", LINGPROBE_OPS_DENY='" + r.ops_deny + "'");
  };
  return "**The runs recorded different ops** (A: " + text(a) + "; B: " + text(b) +
         "): a row only in one run whose op the other did not record is `not_recorded_in_a` or `not_recorded_in_b`, "
         "not counted as only in A or B, and its FLOPs are in neither column.\n\n";
}

// The Markdown's head: the two runs, how they are paired, and the overview table's header.
std::string markdown_head(const Run& a, const Run& b, const JsonValue& ja, const JsonValue& jb) {
  std::ostringstream md;
  md << "# lingprobe diff\n\n"
     << "- A: `" << a.dir << "` (run `" << a.run_id << "`, world size " << a.world_size
     << "): " << ja.find("signatures")->as_int() << " signatures, " << ja.find("calls")->as_int() << " calls\n"
     << "- B: `" << b.dir << "` (run `" << b.run_id << "`, world size " << b.world_size
     << "): " << jb.find("signatures")->as_int() << " signatures, " << jb.find("calls")->as_int() << " calls\n\n"
     << "Signatures are paired when identical; else when they changed only in shapes (same stage, op, dtypes, tensor "
        "ranks, list lengths, scalars, and weight/bias shapes); else when they changed only in dtypes (a run against "
        "its autocast twin). Sorted by FLOPs moved.\n\n"
     << selections_markdown(a, b)
     << "| stage | unchanged | calls changed | shape changed (1:1) | dtype changed (1:1) | paired as groups | only in "
        "A | only in B | FLOPs A | FLOPs B |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  return md.str();
}

// A stage's entries counted by kind, and its FLOPs in each run.
struct StageTotals {
  std::map<std::string, uint64_t> kinds;
  uint64_t groups = 0;  // one_to_many, many_to_one and many_to_many entries
  long double flops_a = 0, flops_b = 0;
};

// FLOPs of the ops both runs record: a row whose op the other run did not record counts in neither column.
StageTotals stage_totals(const std::string& stage, const std::vector<const DiffEntry*>& group, const Run& a,
                         const Run& b) {
  StageTotals t;
  for (const DiffRow& r : a.rows)
    if (r.stage == stage && records(b, r.op, stage)) t.flops_a += r.flops_total();
  for (const DiffRow& r : b.rows)
    if (r.stage == stage && records(a, r.op, stage)) t.flops_b += r.flops_total();
  for (const DiffEntry* e : group) ++t.kinds[e->kind];
  t.groups = t.kinds["one_to_many"] + t.kinds["many_to_one"] + t.kinds["many_to_many"];
  return t;
}

JsonValue stage_json(const std::string& stage, const std::vector<const DiffEntry*>& group, uint64_t unchanged,
                     StageTotals& t, const Run& a, const Run& b) {
  JsonValue list = JsonValue::array();
  for (const DiffEntry* e : group) list.push_back(entry_json(a, b, e));
  JsonValue counts = JsonValue::object(
      {{"unchanged", JsonValue::integer(static_cast<int64_t>(unchanged))},
       {"calls_changed", JsonValue::integer(static_cast<int64_t>(t.kinds["same_signature"]))},
       {"shape_changed", JsonValue::integer(static_cast<int64_t>(t.kinds["shape_changed"]))},
       {"dtype_changed", JsonValue::integer(static_cast<int64_t>(t.kinds["dtype_changed"]))},
       {"paired_groups", JsonValue::integer(static_cast<int64_t>(t.groups))},
       {"only_in_a", JsonValue::integer(static_cast<int64_t>(t.kinds["only_in_a"]))},
       {"only_in_b", JsonValue::integer(static_cast<int64_t>(t.kinds["only_in_b"]))},
       {"not_recorded_in_a", JsonValue::integer(static_cast<int64_t>(t.kinds["not_recorded_in_a"]))},
       {"not_recorded_in_b", JsonValue::integer(static_cast<int64_t>(t.kinds["not_recorded_in_b"]))}});
  return JsonValue::object({{"stage", JsonValue::string(stage)},
                            {"counts", std::move(counts)},
                            {"flops_a", json_number(t.flops_a)},
                            {"flops_b", json_number(t.flops_b)},
                            {"entries", std::move(list)}});
}

std::string stage_overview_row(const std::string& stage, uint64_t unchanged, StageTotals& t) {
  std::ostringstream md;
  md << "| " << stage << " | " << unchanged << " | " << t.kinds["same_signature"] << " | " << t.kinds["shape_changed"]
     << " | " << t.kinds["dtype_changed"] << " | " << t.groups << " | " << t.kinds["only_in_a"] << " | "
     << t.kinds["only_in_b"] << " | " << human_count(t.flops_a) << " | " << human_count(t.flops_b) << " |\n";
  return md.str();
}

// A stage's detail table: its first entries, and how many more the JSON holds.
std::string stage_detail(const std::string& stage, const std::vector<const DiffEntry*>& group, size_t markdown_rows) {
  if (group.empty()) return "";
  std::ostringstream detail;
  detail << "\n## Stage `" << stage << "`\n\n| change | FLOPs moved | calls A → B | A | B |\n|---|---|---|---|---|\n";
  for (size_t k = 0; k < group.size() && k < markdown_rows; ++k) detail << entry_markdown(*group[k]);
  if (group.size() > markdown_rows)
    detail << "\n"
           << group.size() - markdown_rows << " more in the JSON (`lingprobe diff --json`), or with `--rows 0`.\n";
  return detail.str();
}

// kBadInput when `stage` names a stage neither run has (a misspelt --stage would read as "nothing changed"), with
// the stages they have and the closest by edit distance (stage names are free text: NVTX ranges, "a:b").
format::Status check_stage_filter(const std::string& stage, const Run& a, const Run& b) {
  if (stage.empty()) return {};
  std::set<std::string> stages;
  for (const Run* run : {&a, &b})
    for (const DiffRow& r : run->rows) stages.insert(r.stage);
  if (stages.count(stage)) return {};
  if (stages.empty())
    return format::Status(format::StatusCode::kBadInput, "--stage '" + stage + "': neither run has any signature");
  std::string have;
  for (const std::string& s : stages) have += (have.empty() ? "" : ", ") + s;
  const std::string closest = format::closest_name(stage, stages, std::max<size_t>(1, stage.size() / 3));
  return format::Status(format::StatusCode::kBadInput,
                        "--stage '" + stage + "': neither run has that stage" +
                            (closest.empty() ? "" : " (did you mean '" + closest + "'?)") + "; their stages: " + have);
}

}  // namespace

DiffOutcome diff_runs(const DiffOptions& options) {
  DiffOutcome outcome;
  Run a, b;
  outcome.status = load(options.run_a, a, outcome.warnings);
  if (outcome.status.ok()) outcome.status = load(options.run_b, b, outcome.warnings);
  if (outcome.status.ok() && a.fold_scalars != b.fold_scalars)
    outcome.status = format::Status(format::StatusCode::kBadInput,
                                    (a.fold_scalars ? options.run_a : options.run_b) +
                                        " has its scalar values folded (LINGPROBE_FOLD_SCALARS=1) and " +
                                        (a.fold_scalars ? options.run_b : options.run_a) +
                                        " does not: the same call has a different signature in each; record both "
                                        "the same way");
  if (outcome.status.ok()) outcome.status = check_stage_filter(options.stage, a, b);
  if (!outcome.status.ok()) return outcome;

  Pairing pairing = pair_rows(a.rows, b.rows, options.stage);
  mark_unrecorded(pairing, a, b);
  // 3. The document, by stage.
  std::map<std::string, std::vector<const DiffEntry*>> by_stage;
  for (const DiffEntry& e : pairing.entries) by_stage[e.stage].push_back(&e);
  for (const auto& [stage, n] : pairing.unchanged) by_stage[stage];
  const JsonValue ja = side_json(a), jb = side_json(b);
  std::string md = markdown_head(a, b, ja, jb), detail;
  JsonValue stages = JsonValue::array();
  for (const auto& [stage, group] : by_stage) {
    StageTotals t = stage_totals(stage, group, a, b);
    const uint64_t unchanged = pairing.unchanged[stage];
    stages.push_back(stage_json(stage, group, unchanged, t, a, b));
    md += stage_overview_row(stage, unchanged, t);
    detail += stage_detail(stage, group, options.markdown_rows);
  }
  outcome.report =
      JsonValue::object({{"format", JsonValue::string("lingprobe.diff/1")},
                         {"a", ja},
                         {"b", jb},
                         {"stage_filter", options.stage.empty() ? JsonValue::null() : JsonValue::string(options.stage)},
                         {"stages", std::move(stages)}});
  outcome.markdown = md + detail;
  return outcome;
}

}  // namespace lingprobe::audit
