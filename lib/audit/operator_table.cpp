#include "audit/operator_table.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "audit/audit_rows.h"
#include "audit/signature_text.h"
#include "format/op_traits.h"
#include "format/signature_fields.h"

namespace lingprobe::audit {
namespace {

using format::JsonValue;

struct OperatorTotals {
  std::string name;
  uint64_t signatures = 0, calls = 0, timed_calls = 0, flop_calls = 0, unknown_flops = 0, measured = 0, raised = 0;
  int64_t host_ns = 0, raised_host_ns = 0;
  long double flops = 0, kernel_us = 0;
};

JsonValue share_or_null(long double part, long double whole, bool known) {
  return known && whole > 0 ? JsonValue::floating(static_cast<double>(part / whole)) : JsonValue::null();
}

std::string percent(const JsonValue* fraction) {
  if (!fraction || fraction->is_null()) return "-";
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.1f%%", fraction->as_float() * 100);
  return buf;
}

long double as_number(const JsonValue& v) {
  return v.kind() == JsonValue::Kind::Int ? static_cast<long double>(v.as_int()) : v.as_float();
}

std::string milliseconds(const JsonValue* us) {
  return !us || us->is_null() ? "-" : short_decimal(us->as_float() / 1e3);
}

// Where ops random or uninitialised by definition (initialisation, most often: normal_, uniform_, empty) hold 1%
// or more of the stage's host time: one line saying so, and what keeps model construction apart.
std::string set_up_line(const std::vector<JsonValue>& items) {
  double share = 0;
  std::string names;
  for (const JsonValue& o : items) {
    const JsonValue* s = o.find("host_time_share");
    if (!o.find("random_or_uninitialised")->as_bool() || !s || s->is_null()) continue;
    share += s->as_float();
    if (s->as_float() >= 0.01)
      names += std::string(names.empty() ? "" : ", ") + "`" + o.find("operator")->as_string() + "`";
  }
  if (share < 0.01) return "";
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%", share * 100);
  return std::string("\n") + text +
         " of the stage's host time is in ops whose results are random or uninitialised by "
         "definition" +
         (names.empty() ? std::string() : " (" + names + ")") +
         ": model construction, most often. A stage (`with lingprobe.stage(...)`, `LINGPROBE_STAGE_MAP` or "
         "`LINGPROBE_NVTX_MAP`, docs/USAGE.md) around the compute keeps them apart.\n";
}

// Where calls raised (their rows read `-> raised`): one line with their count per operator and their share of the
// stage's host time, which is the exception's handling, not the op's work.
std::string raised_line(const std::vector<JsonValue>& items) {
  uint64_t calls = 0;
  double share = 0;
  std::string names;
  for (const JsonValue& o : items) {
    const int64_t n = o.find("raised_calls")->as_int();
    if (n == 0) continue;
    calls += static_cast<uint64_t>(n);
    if (const JsonValue* s = o.find("raised_host_time_share"); !s->is_null()) share += s->as_float();
    names += std::string(names.empty() ? "" : ", ") + "`" + o.find("operator")->as_string() + "` " + std::to_string(n);
  }
  if (calls == 0) return "";
  char text[16];
  std::snprintf(text, sizeof text, "%.1f%%", share * 100);
  return "\n" + std::to_string(calls) + " call(s) raised (" + names + "): their rows read `-> raised`, their FLOPs " +
         "are 0, and their " + text + " of the stage's host time is the exception's, not the op's work.\n";
}

}  // namespace

std::string schema_name(const std::string& dotted) {
  const size_t dot = dotted.find('.');
  return dot == std::string::npos ? dotted : dotted.substr(0, dot) + "::" + dotted.substr(dot + 1);
}

std::string operator_of(const std::string& op) {
  const size_t first = op.find('.');
  const size_t last = op.rfind('.');
  return first == std::string::npos || first == last ? op : op.substr(0, last);
}

JsonValue operators_json(const std::vector<const Signature*>& group) {
  std::map<std::string, OperatorTotals> by_name;
  int64_t stage_host_ns = 0;
  long double stage_flops = 0;
  bool timed = false;
  for (const Signature* s : group) {
    OperatorTotals& t = by_name[operator_of(s->op)];
    t.name = operator_of(s->op);
    ++t.signatures;
    t.calls += s->calls;
    t.timed_calls += s->timed_calls;
    t.host_ns += s->host_ns;
    stage_host_ns += s->host_ns;
    timed = timed || s->timed_calls > 0;
    if (s->flops) {
      const long double f = static_cast<long double>(*s->flops) * s->flop_calls;
      t.flop_calls += s->flop_calls;
      t.flops += f;
      stage_flops += f;
    } else {
      ++t.unknown_flops;
    }
    if (s->kernel_time_us) t.kernel_us += *s->kernel_time_us * s->calls, ++t.measured;
    if (format::call_raised(s->value)) t.raised += s->calls, t.raised_host_ns += s->host_ns;
  }
  std::vector<const OperatorTotals*> order;
  for (const auto& [name, t] : by_name) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const OperatorTotals* a, const OperatorTotals* b) {
    if (a->host_ns != b->host_ns) return a->host_ns > b->host_ns;
    if (a->flops != b->flops) return a->flops > b->flops;
    return a->calls > b->calls;
  });
  JsonValue out = JsonValue::array();
  for (const OperatorTotals* t : order) {
    const bool has_flops = t->unknown_flops < t->signatures && t->flop_calls > 0;  // not nested only
    JsonValue o = JsonValue::object();
    o.set("operator", JsonValue::string(t->name));
    o.set("signatures", JsonValue::integer(static_cast<int64_t>(t->signatures)));
    o.set("calls", JsonValue::integer(static_cast<int64_t>(t->calls)));
    o.set("timed_calls", JsonValue::integer(static_cast<int64_t>(t->timed_calls)));
    const bool host = timed && t->timed_calls > 0;  // its time is inside its callers' where it ran nested only
    o.set("host_time_us", host ? JsonValue::floating(static_cast<double>(t->host_ns) / 1e3) : JsonValue::null());
    o.set("host_time_share", share_or_null(t->host_ns, stage_host_ns, host));
    o.set("flops", has_flops ? json_number(t->flops) : JsonValue::null());
    o.set("signatures_without_flop_formula", JsonValue::integer(static_cast<int64_t>(t->unknown_flops)));
    o.set("flop_share", share_or_null(t->flops, stage_flops, has_flops));
    o.set("kernel_time_us", t->measured ? JsonValue::floating(static_cast<double>(t->kernel_us)) : JsonValue::null());
    o.set("signatures_with_kernel_time", JsonValue::integer(static_cast<int64_t>(t->measured)));
    o.set("random_or_uninitialised", JsonValue::boolean(!format::result_by_definition(schema_name(t->name)).empty()));
    o.set("raised_calls", JsonValue::integer(static_cast<int64_t>(t->raised)));
    o.set("raised_host_time_share", share_or_null(t->raised_host_ns, stage_host_ns, host && t->raised));
    out.push_back(std::move(o));
  }
  return out;
}

std::string operators_markdown(const JsonValue& operators, size_t limit) {
  const auto& items = operators.items();
  if (items.empty()) return "";
  std::ostringstream md;
  md << "\nOperators (every overload and signature of one together; host time from the call records, FLOPs where a "
        "formula applies, kernel time where measured):\n\n"
        "| operator | host ms | host share | calls | signatures | FLOPs | FLOP share | kernel ms (measured) |\n"
        "|---|---|---|---|---|---|---|---|\n";
  double rest_share = 0;
  for (size_t k = 0; k < items.size(); ++k) {
    const JsonValue& o = items[k];
    if (k >= limit) {
      if (const JsonValue* s = o.find("host_time_share"); s && !s->is_null()) rest_share += s->as_float();
      continue;
    }
    const JsonValue* flops = o.find("flops");
    const int64_t unknown = o.find("signatures_without_flop_formula")->as_int();
    const bool nested_only = flops->is_null() && unknown < o.find("signatures")->as_int();  // a formula, no top call
    std::string flop_text = nested_only ? "nested" : flops->is_null() ? "unknown" : human_count(as_number(*flops));
    if (!flops->is_null() && unknown) flop_text += " (+" + std::to_string(unknown) + " unknown)";
    std::string kernel = milliseconds(o.find("kernel_time_us"));
    const int64_t measured = o.find("signatures_with_kernel_time")->as_int();
    if (measured && measured < o.find("signatures")->as_int())
      kernel += " (" + std::to_string(measured) + " of " + std::to_string(o.find("signatures")->as_int()) + ")";
    md << "| `" << o.find("operator")->as_string() << "` | " << milliseconds(o.find("host_time_us")) << " | "
       << percent(o.find("host_time_share")) << " | " << o.find("calls")->as_int() << " | "
       << o.find("signatures")->as_int() << " | " << flop_text << " | " << percent(o.find("flop_share")) << " | "
       << kernel << " |\n";
  }
  md << set_up_line(items) << raised_line(items);
  if (items.size() > limit) {
    char share[16];
    std::snprintf(share, sizeof share, "%.1f%%", rest_share * 100);
    md << "\n"
       << items.size() - limit << " more operator(s)"
       << (rest_share > 0 ? std::string(": ") + share + " of the host time" : "")
       << " (`operators` in coverage_audit.json lists every one).\n";
  }
  return md.str();
}

}  // namespace lingprobe::audit
