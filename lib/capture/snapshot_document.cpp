#include "capture/snapshot_document.h"

#include <unistd.h>

#include <utility>

#include "format/snapshot_file.h"

namespace lingprobe::capture {

using format::PickleValue;

PickleValue snapshot_document(const SnapshotFacts& facts, PickleValue args, PickleValue kwargs, PickleValue output) {
  PickleValue doc = PickleValue::dict();
  doc.set("format", PickleValue::string(format::kSnapshotFormat));
  doc.set("op", PickleValue::string(facts.op));
  doc.set("name", PickleValue::string(facts.name));
  doc.set("overload", PickleValue::string(facts.overload));
  doc.set("schema", PickleValue::string(facts.schema));
  doc.set("input_sha256", PickleValue::string(facts.input_sha256));
  doc.set("stage", PickleValue::string(facts.stage));
  doc.set("rank", PickleValue::integer(facts.rank));
  doc.set("seq", PickleValue::integer(static_cast<int64_t>(facts.seq)));
  doc.set("run_id", PickleValue::string(facts.run_id));
  doc.set("pid", PickleValue::integer(::getpid()));
  doc.set("torch_version", PickleValue::string(facts.torch_version));
  doc.set("math_policy", facts.math_policy);
  doc.set("setup_call", PickleValue::boolean(facts.setup_call));
  if (facts.fold_scalars) doc.set("fold_scalars", PickleValue::boolean(true));  // the replay's signature folds too
  PickleValue written = PickleValue::list();
  for (int64_t w : facts.written_args) written.push_back(PickleValue::integer(w));
  doc.set("written_args", std::move(written));
  doc.set("captured", PickleValue::string("written_args copied before the op; every other argument and the output "
                                          "after it (the op does not write them)"));
  doc.set("args", std::move(args));
  doc.set("kwargs", std::move(kwargs));
  doc.set("output", std::move(output));
  return doc;
}

}  // namespace lingprobe::capture
