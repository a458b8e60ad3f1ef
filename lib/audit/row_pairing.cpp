#include "audit/row_pairing.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <set>
#include <utility>

#include "audit/signature_compare.h"

namespace lingprobe::audit {
namespace {

std::string pairing_key(const DiffRow& r) { return audit::pairing_key(*r.signature, r.stage, r.op); }

std::vector<int64_t> shapes(const DiffRow& r) { return signature_shapes(*r.signature); }

// By pairing key: the rows of A, and of B, that no same signature matched.
using Pool = std::map<std::string, std::pair<std::vector<const DiffRow*>, std::vector<const DiffRow*>>>;

bool wanted(const DiffRow& r, const std::string& stage) { return stage.empty() || r.stage == stage; }

// 1. The same signature in both: an entry where its calls changed; the rest pooled by pairing key.
Pool pair_same_signatures(const std::vector<DiffRow>& a, const std::vector<DiffRow>& b, const std::string& stage,
                          Pairing& p) {
  std::map<std::string, const DiffRow*> by_sha_b;
  for (const DiffRow& r : b)
    if (wanted(r, stage)) by_sha_b.emplace(r.sha, &r);
  std::set<std::string> matched;
  Pool pool;
  for (const DiffRow& r : a) {
    if (!wanted(r, stage)) continue;
    auto it = by_sha_b.find(r.sha);
    if (it == by_sha_b.end()) {
      pool[pairing_key(r)].first.push_back(&r);
      continue;
    }
    matched.insert(r.sha);
    if (it->second->calls == r.calls) {
      ++p.unchanged[r.stage];
      continue;
    }
    p.entries.push_back(DiffEntry{"same_signature", r.stage, r.op, {&r}, {it->second}, ""});
  }
  for (const DiffRow& r : b)
    if (wanted(r, stage) && !matched.count(r.sha)) pool[pairing_key(r)].second.push_back(&r);
  return pool;
}

std::string pooled_kind(size_t in_a, size_t in_b) {
  if (in_b == 0) return "only_in_a";
  if (in_a == 0) return "only_in_b";
  if (in_a == 1 && in_b == 1) return "shape_changed";
  if (in_a == 1) return "one_to_many";
  if (in_b == 1) return "many_to_one";
  return "many_to_many";
}

// The rows in the order of their shapes; none where that order is not strict.
std::vector<const DiffRow*> strictly_by_shape(std::vector<const DiffRow*> rows) {
  std::stable_sort(rows.begin(), rows.end(),
                   [](const DiffRow* x, const DiffRow* y) { return shapes(*x) < shapes(*y); });
  for (size_t i = 1; i < rows.size(); ++i)
    if (shapes(*rows[i - 1]) == shapes(*rows[i])) return std::vector<const DiffRow*>{};
  return rows;
}

// 2. Pairs that changed only in shapes, and what is left on one side.
void pair_pooled(const Pool& pool, std::vector<DiffEntry>& entries) {
  for (const auto& [key, sides] : pool) {
    const auto& [in_a, in_b] = sides;
    const DiffRow* any = in_a.empty() ? in_b.front() : in_a.front();
    DiffEntry e{pooled_kind(in_a.size(), in_b.size()), any->stage, any->op, in_a, in_b, ""};
    if (e.kind == "many_to_many" && in_a.size() == in_b.size()) {
      // As many on each side (a layer at several input sizes: a cached and an uncached frame): paired in the
      // order of their shapes where that order is strict on both sides (a larger input against a larger one).
      const auto sa = strictly_by_shape(in_a), sb = strictly_by_shape(in_b);
      if (!sa.empty() && !sb.empty()) {
        for (size_t i = 0; i < sa.size(); ++i)
          entries.push_back(DiffEntry{"shape_changed", e.stage, e.op, {sa[i]}, {sb[i]}, "size_order"});
        continue;
      }
    }
    if (e.kind == "only_in_a" || e.kind == "only_in_b") {  // one entry per signature
      for (const DiffRow* r : e.kind == "only_in_a" ? in_a : in_b) {
        DiffEntry one{e.kind, r->stage, r->op, {}, {}, ""};
        (e.kind == "only_in_a" ? one.a : one.b).push_back(r);
        entries.push_back(std::move(one));
      }
      continue;
    }
    entries.push_back(std::move(e));
  }
}

// Each entry's calls and FLOPs summed; the entries sorted by FLOPs moved, then calls changed, then SHA-256.
void sort_by_flops_moved(std::vector<DiffEntry>& entries) {
  for (DiffEntry& e : entries) {
    for (const DiffRow* r : e.a) e.calls_a += r->calls, e.flops_a += r->flops_total();
    for (const DiffRow* r : e.b) e.calls_b += r->calls, e.flops_b += r->flops_total();
    for (const DiffRow* r : e.a)
      if (r->host_us) e.host_us_a = e.host_us_a.value_or(0) + *r->host_us;
    for (const DiffRow* r : e.b)
      if (r->host_us) e.host_us_b = e.host_us_b.value_or(0) + *r->host_us;
  }
  std::sort(entries.begin(), entries.end(), [](const DiffEntry& x, const DiffEntry& y) {
    if (x.moved() != y.moved()) return x.moved() > y.moved();
    const int64_t cx = std::llabs(static_cast<int64_t>(x.calls_b) - static_cast<int64_t>(x.calls_a));
    const int64_t cy = std::llabs(static_cast<int64_t>(y.calls_b) - static_cast<int64_t>(y.calls_a));
    if (cx != cy) return cx > cy;
    const std::string& sx = (x.a.empty() ? x.b : x.a).front()->sha;
    const std::string& sy = (y.a.empty() ? y.b : y.a).front()->sha;
    return sx < sy;
  });
}

// 3. Rows left on one side that changed only in dtypes (a run against its autocast twin: the same calls, other
// output dtypes), paired one to one where a retyping key holds one row on each side.
void pair_retyped(std::vector<DiffEntry>& entries) {
  std::map<std::string, std::pair<std::vector<size_t>, std::vector<size_t>>> by_key;
  for (size_t i = 0; i < entries.size(); ++i) {
    const DiffEntry& e = entries[i];
    if (e.kind != "only_in_a" && e.kind != "only_in_b") continue;
    const DiffRow* r = e.kind == "only_in_a" ? e.a.front() : e.b.front();
    auto& sides = by_key[retyping_key(*r->signature, r->stage, r->op)];
    (e.kind == "only_in_a" ? sides.first : sides.second).push_back(i);
  }
  std::set<size_t> paired;
  std::vector<DiffEntry> retyped;
  for (const auto& [key, sides] : by_key) {
    if (sides.first.size() != 1 || sides.second.size() != 1) continue;
    const DiffEntry &in_a = entries[sides.first[0]], &in_b = entries[sides.second[0]];
    retyped.push_back(DiffEntry{"dtype_changed", in_a.stage, in_a.op, in_a.a, in_b.b, ""});
    paired.insert(sides.first[0]);
    paired.insert(sides.second[0]);
  }
  std::vector<DiffEntry> kept;
  for (size_t i = 0; i < entries.size(); ++i)
    if (!paired.count(i)) kept.push_back(std::move(entries[i]));
  for (DiffEntry& e : retyped) kept.push_back(std::move(e));
  entries = std::move(kept);
}

}  // namespace

long double DiffEntry::moved() const { return std::fabs(flops_b - flops_a); }

Pairing pair_rows(const std::vector<DiffRow>& a, const std::vector<DiffRow>& b, const std::string& stage) {
  Pairing p;
  const Pool pool = pair_same_signatures(a, b, stage, p);
  pair_pooled(pool, p.entries);
  pair_retyped(p.entries);
  sort_by_flops_moved(p.entries);
  return p;
}

}  // namespace lingprobe::audit
