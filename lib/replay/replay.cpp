#include "replay/replay.h"

#include "capture/torch_guard.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/InferenceMode.h>
#include <torch/version.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <utility>
#include <sstream>
#include <type_traits>

#include "replay/math_settings.h"
#include "replay/snapshot_values.h"
#include "capture/signature_builder.h"
#include "capture/math_policy.h"
#include "capture/snapshot_capture.h"
#include "format/canonical_json.h"
#include "format/op_traits.h"
#include "format/sha256.h"
#include "format/snapshot_file.h"
#include "format/tensor_layout.h"
#include "gpu/cuda_driver.h"
#include "lingprobe/version.h"
#include "sink/run_directory.h"

namespace lingprobe::replay {
namespace {

using format::JsonValue;
using format::PickleValue;
using format::Status;
using format::StatusCode;

// An exception as one line: a c10::Error without its C++ backtrace.
std::string error_line(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  const size_t newline = text.find('\n');
  return newline == std::string::npos ? text : text.substr(0, newline);
}

bool policy_true(const PickleValue* policy, const char* key) {
  const PickleValue* v = policy ? policy->find(key) : nullptr;
  return v && v->kind() == PickleValue::Kind::String && v->as_string() == "true";
}

JsonValue policy_json(const PickleValue* p) { return p ? capture::policy_json(*p) : JsonValue::object(); }

// Tensors in order; None as an undefined tensor: a snapshot stores an undefined output (the attention weights
// `_native_multi_head_attention` does not compute) as None, and the replayed call returns it undefined.
void flatten_tensors(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor())
    out.push_back(v.toTensor());
  else if (v.isNone())
    out.emplace_back();
  else if (v.isList())
    for (const auto& x : v.toListRef()) flatten_tensors(x, out);
  else if (v.isTuple())
    for (const auto& x : v.toTupleRef().elements()) flatten_tensors(x, out);
}

struct Difference {
  bool exact = true, finite = true;
  double max_abs = 0, sum_sq = 0;
  int64_t n = 0;
};

void compare(const at::Tensor& expected, const at::Tensor& got, Difference& d) {
  if (!expected.defined() || !got.defined()) {
    d.exact = d.exact && expected.defined() == got.defined();
    return;
  }
  if (expected.sizes() != got.sizes() || expected.scalar_type() != got.scalar_type()) {
    d.exact = false;
    d.finite = false;
    return;
  }
  const at::Tensor e = expected.contiguous(), g = got.to(at::kCPU).contiguous();
  if (e.numel() == 0) return;
  d.exact = d.exact && std::memcmp(e.data_ptr(), g.data_ptr(), static_cast<size_t>(e.numel() * e.element_size())) == 0;
  const bool complex = e.is_complex();
  const at::Tensor ed = complex ? e.to(at::kComplexDouble) : e.to(at::kDouble);
  const at::Tensor gd = complex ? g.to(at::kComplexDouble) : g.to(at::kDouble);
  if (g.is_floating_point() || complex) d.finite = d.finite && at::isfinite(g).all().item<bool>();
  at::Tensor diff = (gd - ed).abs();
  if (!complex)
    diff = at::where(at::isnan(ed) & at::isnan(gd), at::zeros_like(diff), diff);
  else
    diff = diff.to(at::kDouble);
  d.max_abs = std::max(d.max_abs, diff.max().item<double>());
  d.sum_sq += (diff * diff).sum().item<double>();
  d.n += e.numel();
}

format::Status write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (f) return format::Status();
  return format::Status(format::StatusCode::kIoFailed, "cannot write " + path);
}

JsonValue identity_json(const std::string& device_str, const std::string& snapshot, const std::string& snapshot_sha) {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  JsonValue id = JsonValue::object();
  id.set("tool", JsonValue::string("lingprobe replay"));
  id.set("lingprobe_version", JsonValue::string(LINGPROBE_VERSION_STRING));
  id.set("torch_version", JsonValue::string(TORCH_VERSION));
  id.set("host", JsonValue::string(host));
  id.set("pid", JsonValue::integer(getpid()));
  id.set("device", JsonValue::string(device_str));
  c10::Device d(device_str);
  if (d.is_cuda()) {
    if (gpu::CudaDriver* drv = gpu::CudaDriver::get()) {
      const int index = d.has_index() ? d.index() : 0;
      id.set("gpu_name", JsonValue::string(drv->device_name(index)));
      id.set("gpu_uuid", JsonValue::string(drv->device_uuid(index)));
      id.set("driver_version", JsonValue::integer(drv->driver_version()));
    }
  }
  id.set("snapshot", JsonValue::string(snapshot));
  id.set("snapshot_sha256", JsonValue::string(snapshot_sha));
  return id;
}

}  // namespace

namespace {
ReplayResult replay_one(const std::string& path, const ReplayOptions& options);
}  // namespace

std::string nondeterminism(const std::string& op, const std::string& device_type, bool cudnn_benchmark,
                           bool deterministic_algorithms, bool has_generator, bool training_off) {
  auto starts = [&](const char* p) { return op.rfind(p, 0) == 0; };
  if (std::string why = format::result_by_definition(op); !why.empty() && !training_off) return why;
  if (has_generator) return "takes a Generator";
  const bool conv = op.find("conv") != std::string::npos || starts("aten::cudnn_");
  if (device_type == "cuda" && conv && cudnn_benchmark) return "cuDNN benchmark mode picks the algorithm per run";
  static const char* const kAtomics[] = {"aten::index_add",
                                         "aten::scatter_add",
                                         "aten::scatter_reduce",
                                         "aten::index_put",
                                         "aten::_index_put_impl",
                                         "aten::put_",
                                         "aten::embedding_dense_backward",
                                         "aten::_embedding_bag",
                                         "aten::histc",
                                         "aten::bincount",
                                         "aten::index_reduce"};
  if (device_type == "cuda" && !deterministic_algorithms)
    for (const char* a : kAtomics)
      if (starts(a)) return "CUDA kernel with atomic accumulation (deterministic algorithms off)";
  return "";
}

ReplayResult replay_snapshot(const std::string& path, const ReplayOptions& options) {
  try {
    return replay_one(path, options);
  } catch (const std::exception& e) {  // a c10::Error (an asynchronous CUDA fault, ...) fails this snapshot only
    ReplayResult r;
    r.status = Status(StatusCode::kFailed, path + ": " + error_line(e));
    return r;
  } catch (...) {
    ReplayResult r;
    r.status = Status(StatusCode::kFailed, path + ": unknown error");
    return r;
  }
}

namespace {

// A dropout outside training (`train=False`: a model in eval) returns its input: nothing random about it.
bool dropout_outside_training(const c10::FunctionSchema& schema, const std::vector<c10::IValue>& inputs) {
  if (schema.name().find("dropout") == std::string::npos) return false;
  const auto& args = schema.arguments();
  for (size_t i = 0; i < args.size() && i < inputs.size(); ++i)
    if (args[i].name() == "train") return inputs[i].isBool() && !inputs[i].toBool();
  return false;
}

// One replay's state, filled by its steps in order.
struct Replay {
  Replay(const std::string& path, const ReplayOptions& options) : path(path), options(options) {}
  const std::string& path;
  const ReplayOptions& options;
  ReplayResult r;
  RebuildContext ctx;
  format::SnapshotReader reader;
  const PickleValue* doc = nullptr;
  const PickleValue* policy = nullptr;
  std::string name, overload;
  decltype(c10::Dispatcher::singleton().findSchema(std::declval<const c10::OperatorName&>())) handle;
  std::vector<c10::IValue> stack, inputs;
  std::vector<at::Tensor> expected, got;
  bool has_generator = false;
  std::string device_str = "cpu";
  std::string recorded_sha, replayed_sha;
  double seconds = 0;

  std::string full_name() const { return name + (overload.empty() ? "" : "." + overload); }
};

// The library the recorded process had loaded for an extension's op (the snapshot's "library": torchvision's _C),
// loaded here once; false when the snapshot names none, it is not on this machine, or it does not load.
bool load_recorded_library(const PickleValue& doc, std::ostream& log, std::string& why_not) {
  const PickleValue* library = doc.find("library");
  if (!library || library->kind() != PickleValue::Kind::String || ::access(library->as_string().c_str(), R_OK) != 0)
    return false;
  const std::string& path = library->as_string();
  if (::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD)) return false;  // loaded, and the op is not its
  if (!::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
    // torch 2.11's torchvision _C links libtorch_python, whose Python symbols a process without Python lacks
    why_not = "the recorded library " + path + " does not load in this process (" + ::dlerror() + ")";
    log << why_not << "\n";
    return false;
  }
  log << "loaded " << path << ", which the recorded process had loaded\n";
  return true;
}

// The snapshot read and its operator found: SnapshotReader::open's codes (kBadInput: not a snapshot),
// kBadInput (an unknown aten op), kUnsupported (an extension's op whose library this process did not load).
Status open_snapshot(Replay& p) {
  p.ctx.reader = &p.reader;
  p.ctx.device = p.options.device;
  if (Status st = p.reader.open(p.path); !st.ok()) return Status(st.code(), p.path + ": " + st.message());
  const PickleValue& doc = p.reader.document();
  p.doc = &doc;
  p.ctx.keep_cpu = has_cuda_tensor(doc);
  p.name = doc.find("name")->as_string();
  p.overload = doc.find("overload")->as_string();
  p.r.op = doc.find("op")->as_string();
  p.r.stage = doc.find("stage")->as_string();
  p.ctx.log << "snapshot " << p.path << "\nop " << p.full_name() << " stage " << p.r.stage << " rank "
            << doc.find("rank")->as_int() << " seq " << doc.find("seq")->as_int() << "\n";
  p.handle = c10::Dispatcher::singleton().findSchema({p.name, p.overload});
  std::string library_not_loaded;
  if (!p.handle && load_recorded_library(doc, p.ctx.log, library_not_loaded))
    p.handle = c10::Dispatcher::singleton().findSchema({p.name, p.overload});
  if (p.handle) return Status();
  const std::string ns = p.name.substr(0, p.name.find("::"));
  if (ns == "aten" || ns == "prim")
    return Status(StatusCode::kBadInput,
                  p.path + ": unknown op " + p.full_name() + " (not registered in torch " + TORCH_VERSION + ")");
  // an extension's op (torchvision::, a custom op): its library registers it; for a namespace named like a Python
  // package whose library is its _C extension (torchvision's), the command that prints that library's path
  const bool identifier =
      !ns.empty() && !std::isdigit(static_cast<unsigned char>(ns[0])) &&
      std::all_of(ns.begin(), ns.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  const std::string finder = identifier ? "; a Python package's _C extension: python3 -c \"import " + ns +
                                              ", glob; print(*glob.glob(" + ns + ".__path__[0] + '/_C*.so'))\""
                                        : "";
  if (!library_not_loaded.empty())  // a Python extension: python3 has what it needs
    return Status(StatusCode::kUnsupported,
                  "op " + p.full_name() + " not registered in this process: " + library_not_loaded +
                      "; replay it in python3, where importing its package loads it (docs/SNAPSHOTS.md's script)");
  return Status(StatusCode::kUnsupported, "op " + p.full_name() +
                                              " not registered in this process (load its library with --load-library "
                                              "LIB.so" +
                                              finder + ")");
}

// The call's arguments rebuilt on the replay's device, in the schema's order.
void rebuild_arguments(Replay& p) {
  const auto& params = p.handle->schema().arguments();
  const auto& args = p.doc->find("args")->items();
  const PickleValue* kwargs = p.doc->find("kwargs");
  for (size_t i = 0; i < params.size(); ++i) {
    const PickleValue* v = i < args.size() ? &args[i] : kwargs->find(params[i].name());
    if (v && v->kind() == PickleValue::Kind::Dict && v->find("kind")->as_string() == "generator")
      p.has_generator = true;
    if (v)
      p.stack.push_back(rebuild(p.ctx, *v, params[i].real_type()));
    else if (params[i].default_value())
      p.stack.push_back(*params[i].default_value());
    else
      throw std::runtime_error("argument '" + params[i].name() + "' is missing from the snapshot");
  }
  if (args.size() > params.size()) throw std::runtime_error("more arguments than the schema has");
  for (const auto& v : p.stack) {
    std::vector<at::Tensor> ts;
    flatten_tensors(v, ts);
    for (const auto& t : ts)
      if (t.defined()) p.device_str = t.device().str();
  }
}

// The call run once, under the recorded math policy and autocast state; kFailed with the op's own error line.
Status run_call(Replay& p) {
  try {
    c10::InferenceMode inference;
    rebuild_arguments(p);
    p.inputs = p.stack;  // the replayed call's own signature is built from these (shapes do not change)
    // The recorded output, rebuilt on the CPU for the comparison.
    RebuildContext host_ctx;
    host_ctx.reader = &p.reader;
    host_ctx.device = "cpu";
    flatten_tensors(rebuild(host_ctx, *p.doc->find("output"), nullptr), p.expected);
    if (p.options.before_call) p.options.before_call();
    try {
      AutocastScope autocast(p.policy, p.ctx.log);
      p.handle->callBoxed(&p.stack);
    } catch (...) {
      if (p.options.after_call) p.options.after_call();
      throw;
    }
    if (p.options.after_call) p.options.after_call();
  } catch (const std::exception& e) {
    return Status(StatusCode::kFailed, p.path + ": " + error_line(e));
  }
  return Status();
}

// The replayed outputs against the recorded ones, and the replayed call's signature against the recorded one.
void compare_result(Replay& p) {
  ReplayResult& r = p.r;
  r.device = p.device_str;
  for (const auto& v : p.stack) flatten_tensors(v, p.got);
  Difference d;
  if (p.got.size() != p.expected.size()) {
    d.exact = false;
    p.ctx.log << "output count differs: recorded " << p.expected.size() << ", replayed " << p.got.size() << "\n";
  } else {
    for (size_t i = 0; i < p.got.size(); ++i) compare(p.expected[i], p.got[i], d);
  }
  r.max_abs = d.max_abs;
  r.rmse = d.n ? std::sqrt(d.sum_sq / static_cast<double>(d.n)) : 0.0;
  r.finite = d.finite;
  const std::string device_type = c10::Device(p.device_str).is_cuda() ? "cuda" : "cpu";
  r.nondeterministic = nondeterminism(p.handle->schema().name(), device_type, policy_true(p.policy, "cudnn_benchmark"),
                                      policy_true(p.policy, "deterministic_algorithms"), p.has_generator,
                                      dropout_outside_training(p.handle->schema(), p.inputs));
  if (r.nondeterministic.empty()) r.exact = d.exact;
  const PickleValue* folded = p.doc->find("fold_scalars");
  const capture::ScalarFold fold = folded && folded->kind() == PickleValue::Kind::Bool && folded->as_bool()
                                       ? capture::scalar_fold_of(p.handle->schema())
                                       : capture::ScalarFold{};
  p.replayed_sha = capture::canonical_signature(
                       p.handle->schema(), c10::ArrayRef<const c10::IValue>(p.inputs.data(), p.inputs.size()),
                       c10::ArrayRef<const c10::IValue>(p.stack.data(), p.stack.size()), r.stage, fold)
                       .sha256;
  p.recorded_sha = p.doc->find("signature_sha256") ? p.doc->find("signature_sha256")->as_string() : "";
  r.signature_matches = p.replayed_sha == p.recorded_sha;
}

// replay_comparison.json, and the log's last line.
void describe_result(Replay& p) {
  const ReplayResult& r = p.r;
  const PickleValue& doc = *p.doc;
  JsonValue shape = JsonValue::array();
  if (!p.got.empty() && p.got[0].defined())
    for (int64_t s : p.got[0].sizes()) shape.push_back(JsonValue::integer(s));
  JsonValue c = JsonValue::object();
  c.set("op", JsonValue::string(r.op));
  c.set("stage", JsonValue::string(r.stage));
  c.set("shape", std::move(shape));
  c.set("exact", r.exact ? JsonValue::boolean(*r.exact) : JsonValue::null());
  c.set("max_abs", JsonValue::floating(r.max_abs));
  c.set("rmse", JsonValue::floating(r.rmse));
  c.set("finite", JsonValue::boolean(r.finite));
  c.set("math_policy", policy_json(p.policy));
  c.set("scope", JsonValue::string("Original ATen op (" + p.full_name() +
                                   ", dispatcher, boxed) on this run's own saved tensors, rebuilt with their recorded "
                                   "layout; isolated replay on " +
                                   p.device_str + " by lingprobe replay"));
  if (!r.nondeterministic.empty()) c.set("nondeterministic", JsonValue::string(r.nondeterministic));
  c.set("signature_sha256", JsonValue::string(p.recorded_sha));
  c.set("replayed_signature_sha256", JsonValue::string(p.replayed_sha));
  c.set("signature_matches", JsonValue::boolean(r.signature_matches));
  c.set("layout_exact", JsonValue::boolean(p.ctx.layout_exact));
  c.set("input_sha256", JsonValue::string(doc.find("input_sha256") ? doc.find("input_sha256")->as_string() : ""));
  c.set("seq", JsonValue::integer(doc.find("seq")->as_int()));
  c.set("rank", JsonValue::integer(doc.find("rank")->as_int()));
  c.set("device", JsonValue::string(p.device_str));
  c.set("outputs", JsonValue::integer(static_cast<int64_t>(p.got.size())));
  c.set("elapsed_seconds", JsonValue::floating(p.seconds));
  p.r.comparison = c;
  p.ctx.log << "exact " << (r.exact ? (*r.exact ? "true" : "false") : "null (" + r.nondeterministic + ")")
            << " max_abs " << r.max_abs << " rmse " << r.rmse << " finite " << r.finite << " signature_matches "
            << r.signature_matches << " on " << p.device_str << " in " << p.seconds << " s\n";
}

// replays/{stem}/: the comparison, identity, log and script, and a manifest of their hashes; kIoFailed.
Status write_replay_files(Replay& p) {
  const std::string& dir = p.options.out_dir;
  if (std::string e = sink::make_directories(dir); !e.empty()) return Status(StatusCode::kIoFailed, e);
  std::string snapshot_sha;
  format::sha256_file_hex(p.path, snapshot_sha);
  const std::string rel = p.options.snapshot_rel.empty() ? p.path : p.options.snapshot_rel;
  p.r.comparison.set("snapshot", JsonValue::string(rel));
  p.r.comparison.set("snapshot_sha256", JsonValue::string(snapshot_sha));
  const std::vector<std::pair<std::string, std::string>> files = {
      {"replay_comparison.json", format::pretty_json(p.r.comparison) + "\n"},
      {"identity.json", format::pretty_json(identity_json(p.device_str, rel, snapshot_sha)) + "\n"},
      {"run.log", p.ctx.log.str()},
      {"replay_operator.py", replay_operator_script(p.path, dir)},
  };
  JsonValue manifest = JsonValue::object();
  JsonValue sums = JsonValue::object();
  for (const auto& [file, text] : files) {
    if (Status st = write_text(dir + "/" + file, text); !st.ok()) return st;
    sums.set(file, JsonValue::string(format::sha256_hex(text)));
  }
  manifest.set("snapshot", JsonValue::string(rel));
  manifest.set("snapshot_sha256", JsonValue::string(snapshot_sha));
  manifest.set("sha256", std::move(sums));
  return write_text(dir + "/manifest.json", format::pretty_json(manifest) + "\n");
}

ReplayResult replay_one(const std::string& path, const ReplayOptions& options) {
  Replay p(path, options);
  const auto t0 = std::chrono::steady_clock::now();
  p.r.status = open_snapshot(p);
  if (!p.r.status.ok()) return std::move(p.r);
  p.policy = p.doc->find("math_policy");
  apply_math_policy(p.policy, p.ctx.log);
  p.r.status = run_call(p);
  if (!p.r.status.ok()) return std::move(p.r);
  compare_result(p);
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  describe_result(p);
  if (!options.out_dir.empty()) p.r.status = write_replay_files(p);
  return std::move(p.r);
}

}  // namespace

}  // namespace lingprobe::replay
