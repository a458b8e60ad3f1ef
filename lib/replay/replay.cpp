#include "replay/replay.h"

#include "capture/torch_guard.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/InferenceMode.h>
#include <torch/version.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
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

void flatten_tensors(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (v.isTensor())
    out.push_back(v.toTensor());
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

std::string write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  return f ? "" : "cannot write " + path;
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
                           bool deterministic_algorithms, bool has_generator) {
  auto starts = [&](const char* p) { return op.rfind(p, 0) == 0; };
  if (std::string why = format::result_by_definition(op); !why.empty()) return why;
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
    r.error = path + ": " + error_line(e);
    return r;
  } catch (...) {
    ReplayResult r;
    r.error = path + ": unknown error";
    return r;
  }
}

namespace {

ReplayResult replay_one(const std::string& path, const ReplayOptions& options) {
  ReplayResult r;
  RebuildContext ctx;
  format::SnapshotReader reader;
  ctx.reader = &reader;
  ctx.device = options.device;
  const auto t0 = std::chrono::steady_clock::now();
  if (std::string e = reader.open(path); !e.empty()) {
    r.error = path + ": " + e;
    return r;
  }
  const PickleValue& doc = reader.document();
  ctx.keep_cpu = has_cuda_tensor(doc);
  const std::string name = doc.find("name")->as_string(), overload = doc.find("overload")->as_string();
  r.op = doc.find("op")->as_string();
  r.stage = doc.find("stage")->as_string();
  ctx.log << "snapshot " << path << "\nop " << name << (overload.empty() ? "" : "." + overload) << " stage " << r.stage
          << " rank " << doc.find("rank")->as_int() << " seq " << doc.find("seq")->as_int() << "\n";
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  if (!handle) {
    const std::string full = name + (overload.empty() ? "" : "." + overload);
    const std::string ns = name.substr(0, name.find("::"));
    if (ns == "aten" || ns == "prim")
      r.error = path + ": unknown op " + full + " (not registered in torch " + TORCH_VERSION + ")";
    else  // an extension's op (torchvision::, a custom op): its library registers it
      r.skipped = "op " + full +
                  " is registered by a library this process did not load; replay it with "
                  "`lingprobe replay --library PATH/TO/THE/" +
                  ns + "/LIBRARY.so`";
    return r;
  }
  const c10::FunctionSchema& schema = handle->schema();
  const PickleValue* policy = doc.find("math_policy");
  apply_math_policy(policy, ctx.log);

  std::vector<c10::IValue> stack;
  std::vector<c10::IValue> inputs;
  std::vector<at::Tensor> expected;
  bool has_generator = false;
  std::string device_str = "cpu";
  try {
    c10::InferenceMode inference;
    const auto& params = schema.arguments();
    const auto& args = doc.find("args")->items();
    const PickleValue* kwargs = doc.find("kwargs");
    for (size_t i = 0; i < params.size(); ++i) {
      const PickleValue* v = i < args.size() ? &args[i] : kwargs->find(params[i].name());
      if (v && v->kind() == PickleValue::Kind::Dict && v->find("kind")->as_string() == "generator")
        has_generator = true;
      if (v)
        stack.push_back(rebuild(ctx, *v, params[i].real_type()));
      else if (params[i].default_value())
        stack.push_back(*params[i].default_value());
      else
        throw std::runtime_error("argument '" + params[i].name() + "' is missing from the snapshot");
    }
    if (args.size() > params.size()) throw std::runtime_error("more arguments than the schema has");
    for (const auto& v : stack) {
      std::vector<at::Tensor> ts;
      flatten_tensors(v, ts);
      for (const auto& t : ts)
        if (t.defined()) device_str = t.device().str();
    }
    inputs = stack;  // the replayed call's own signature is built from these (shapes do not change)
    // The recorded output, rebuilt on the CPU for the comparison.
    RebuildContext host_ctx;
    host_ctx.reader = &reader;
    host_ctx.device = "cpu";
    flatten_tensors(rebuild(host_ctx, *doc.find("output"), nullptr), expected);
    if (options.before_call) options.before_call();
    try {
      AutocastScope autocast(policy, ctx.log);
      handle->callBoxed(&stack);
    } catch (...) {
      if (options.after_call) options.after_call();
      throw;
    }
    if (options.after_call) options.after_call();
  } catch (const std::exception& e) {
    r.error = path + ": " + error_line(e);
    return r;
  }
  r.device = device_str;
  std::vector<at::Tensor> got;
  for (const auto& v : stack) flatten_tensors(v, got);
  Difference d;
  if (got.size() != expected.size()) {
    d.exact = false;
    ctx.log << "output count differs: recorded " << expected.size() << ", replayed " << got.size() << "\n";
  } else {
    for (size_t i = 0; i < got.size(); ++i) compare(expected[i], got[i], d);
  }
  r.max_abs = d.max_abs;
  r.rmse = d.n ? std::sqrt(d.sum_sq / static_cast<double>(d.n)) : 0.0;
  r.finite = d.finite;
  const std::string device_type = c10::Device(device_str).is_cuda() ? "cuda" : "cpu";
  r.nondeterministic = nondeterminism(schema.name(), device_type, policy_true(policy, "cudnn_benchmark"),
                                      policy_true(policy, "deterministic_algorithms"), has_generator);
  if (r.nondeterministic.empty()) r.exact = d.exact;
  const std::string replayed_sha =
      capture::canonical_signature(schema, c10::ArrayRef<const c10::IValue>(inputs.data(), inputs.size()),
                                   c10::ArrayRef<const c10::IValue>(stack.data(), stack.size()), r.stage)
          .sha256;
  const std::string recorded_sha = doc.find("signature_sha256") ? doc.find("signature_sha256")->as_string() : "";
  r.signature_matches = replayed_sha == recorded_sha;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  JsonValue shape = JsonValue::array();
  if (!got.empty() && got[0].defined())
    for (int64_t s : got[0].sizes()) shape.push_back(JsonValue::integer(s));
  JsonValue c = JsonValue::object();
  c.set("op", JsonValue::string(r.op));
  c.set("stage", JsonValue::string(r.stage));
  c.set("shape", std::move(shape));
  c.set("exact", r.exact ? JsonValue::boolean(*r.exact) : JsonValue::null());
  c.set("max_abs", JsonValue::floating(r.max_abs));
  c.set("rmse", JsonValue::floating(r.rmse));
  c.set("finite", JsonValue::boolean(r.finite));
  c.set("math_policy", policy_json(policy));
  c.set("scope", JsonValue::string("Original ATen op (" + name + (overload.empty() ? "" : "." + overload) +
                                   ", dispatcher, boxed) on this run's own saved tensors, rebuilt with their recorded "
                                   "layout; isolated replay on " +
                                   device_str + " by lingprobe replay"));
  if (!r.nondeterministic.empty()) c.set("nondeterministic", JsonValue::string(r.nondeterministic));
  c.set("signature_sha256", JsonValue::string(recorded_sha));
  c.set("replayed_signature_sha256", JsonValue::string(replayed_sha));
  c.set("signature_matches", JsonValue::boolean(r.signature_matches));
  c.set("layout_exact", JsonValue::boolean(ctx.layout_exact));
  c.set("input_sha256", JsonValue::string(doc.find("input_sha256") ? doc.find("input_sha256")->as_string() : ""));
  c.set("seq", JsonValue::integer(doc.find("seq")->as_int()));
  c.set("rank", JsonValue::integer(doc.find("rank")->as_int()));
  c.set("device", JsonValue::string(device_str));
  c.set("outputs", JsonValue::integer(static_cast<int64_t>(got.size())));
  c.set("elapsed_seconds", JsonValue::floating(secs));
  r.comparison = c;
  r.ok = true;
  ctx.log << "exact " << (r.exact ? (*r.exact ? "true" : "false") : "null (" + r.nondeterministic + ")") << " max_abs "
          << r.max_abs << " rmse " << r.rmse << " finite " << r.finite << " signature_matches " << r.signature_matches
          << " on " << device_str << " in " << secs << " s\n";

  if (!options.out_dir.empty()) {
    if (std::string e = sink::make_directories(options.out_dir); !e.empty()) {
      r.ok = false;
      r.error = e;
      return r;
    }
    std::string snapshot_sha;
    format::sha256_file_hex(path, snapshot_sha);
    const std::string rel = options.snapshot_rel.empty() ? path : options.snapshot_rel;
    r.comparison.set("snapshot", JsonValue::string(rel));
    r.comparison.set("snapshot_sha256", JsonValue::string(snapshot_sha));
    const std::vector<std::pair<std::string, std::string>> files = {
        {"replay_comparison.json", format::pretty_json(r.comparison) + "\n"},
        {"identity.json", format::pretty_json(identity_json(device_str, rel, snapshot_sha)) + "\n"},
        {"run.log", ctx.log.str()},
        {"replay_operator.py", replay_operator_script(path)},
    };
    JsonValue manifest = JsonValue::object();
    JsonValue sums = JsonValue::object();
    for (const auto& [file, text] : files) {
      if (std::string e = write_text(options.out_dir + "/" + file, text); !e.empty()) {
        r.ok = false;
        r.error = e;
        return r;
      }
      sums.set(file, JsonValue::string(format::sha256_hex(text)));
    }
    manifest.set("snapshot", JsonValue::string(rel));
    manifest.set("snapshot_sha256", JsonValue::string(snapshot_sha));
    manifest.set("sha256", std::move(sums));
    if (std::string e = write_text(options.out_dir + "/manifest.json", format::pretty_json(manifest) + "\n");
        !e.empty()) {
      r.ok = false;
      r.error = e;
    }
  }
  return r;
}

}  // namespace

}  // namespace lingprobe::replay
