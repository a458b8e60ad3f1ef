#include "capture/op_registry.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <new>

#include "capture/signature_builder.h"

namespace lingprobe::capture {

OpInfo::OpInfo(c10::FunctionSchema s, int8_t suppress_at_start, uint8_t collective_kind)
    : schema(std::move(s)), suppress(suppress_at_start), collective(collective_kind) {
  name = schema.name();
  with_overload = name + "." + schema.overload_name();
  if (schema.overload_name().empty()) with_overload = name;
  dotted = dotted_op_name(schema.operator_name());
  for (auto& x : selected) x.store(-1, std::memory_order_relaxed);
}

OpInfo* OpRegistry::find_or_add(const at::RecordFunction& fn) {
  auto schema = fn.operator_schema();
  if (!schema) return nullptr;  // a named scope, not an operator: ignored (never cached)
  const char* name = fn.name();
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = ops_.find(name); it != ops_.end()) return it->second;
  const RecorderOptions& o = options_;
  // Collectives may hand work to other threads with this thread's local state, RecordFunction's switch
  // included: their calls there would vanish. Never below them.
  const std::string& op_name = schema->name();
  const bool collective = op_name.rfind("c10d::", 0) == 0 || op_name.rfind("_c10d_functional::", 0) == 0;
  const int8_t suppress = o.nested || collective || o.suppress_nested == NestedSuppression::Never ? 0
                          : o.suppress_nested == NestedSuppression::Always                        ? 1
                                                                                                  : -1;
  auto* op = new OpInfo(std::move(*schema), suppress,
                        !collective                                  ? 0
                        : op_name == "_c10d_functional::wait_tensor" ? 2
                                                                     : 1);
  if (o.fold_scalars) op->fold = scalar_fold_of(op->schema);
  ops_.emplace(name, op);
  return op;
}

std::vector<std::pair<std::string, std::string>> OpRegistry::names() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(ops_.size());
  for (const auto& [pointer, op] : ops_) out.emplace_back(op->name, op->with_overload);
  return out;
}

bool OpRegistry::decide_selected(OpInfo* op, StageId stage) {
  const bool yes = options_.selection.selected(op->name, op->with_overload, stage_name(stage));
  op->selected[stage].store(yes ? 1 : 0, std::memory_order_relaxed);
  return yes;
}

OpInfo* OpCache::find_slow(OpRegistry& registry, const at::RecordFunction& fn, Slot& slot) {
  const char* name = fn.name();
  OpInfo* op = nullptr;
  if (auto it = ops_.find(name); it != ops_.end()) {
    op = it->second;
  } else {
    op = registry.find_or_add(fn);
    if (!op) return nullptr;
    ops_.emplace(name, op);
  }
  slot = Slot{name, op};
  return op;
}

std::vector<std::string> registered_op_names() {
  std::vector<std::string> out;
  for (const c10::OperatorName& op : c10::Dispatcher::singleton().getAllOpNames()) {
    out.push_back(op.name);
    if (!op.overload_name.empty()) out.push_back(op.name + "." + op.overload_name);
  }
  return out;
}

}  // namespace lingprobe::capture
