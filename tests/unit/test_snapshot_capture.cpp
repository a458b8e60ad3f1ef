// The sampled-call capture on CPU tensors, its refusals and budgets, without
// a run directory: a fake sink keeps every job at once. Covers the rules of
// issue 26: a refused call leaves its key to a later call, set-up calls
// (writes to a parameter, random or uninitialised results) use at most
// their share of the byte budget, meta and (where a GPU is used) CPU calls
// are refused before any claim, and the thread's autocast state is part of
// the math policy a replay re-enters.
#include "capture/torch_guard.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/CPUAllocator.h>
#include <catch2/catch.hpp>
#include <torch/version.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "capture/autocast_state.h"
#include "capture/math_policy.h"
#include "capture/setup_calls.h"
#include "capture/snapshot_capture.h"
#include "capture/tensor_copy.h"
#include "runtime/snapshot_job.h"

using namespace lingprobe::capture;
using lingprobe::runtime::SnapshotJob;

namespace {

struct KeepAll : SnapshotSink {
  std::vector<std::string> kept;  // each job's op ("aten.mm.default") and what it held
  void submit(SnapshotJob job) override {
    const std::string op = job.document.find("op") ? job.document.find("op")->as_string() : "(counters only)";
    kept.push_back(op);
    job.done(SnapshotJob::Result::Kept, "snapshots/x.pt", std::string(64, 'a'), SnapshotJob::kKeptSnapshot);
  }
};

struct Call {
  const c10::FunctionSchema* schema;
  std::vector<c10::IValue> inputs;
  std::string dotted;
};

Call call_of(const char* name, std::vector<c10::IValue> inputs, const char* overload = nullptr) {
  if (!overload) overload = std::string(name) == "aten::add_" ? "Tensor" : "";
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  REQUIRE(handle);
  std::string dotted = std::string(name).replace(std::string(name).find("::"), 2, ".") + ".default";
  return Call{&handle->schema(), std::move(inputs), dotted};
}

struct Rig {
  Sampler sampler;
  KeepAll sink;
  std::unique_ptr<SnapshotCapture> capture;
  std::vector<std::string> refusals;
  explicit Rig(SnapshotOptions o, uint8_t evidence = kSnapshot, DeviceAccess* device = nullptr) {
    SamplingOptions so;
    so.enabled = true;
    so.coordination = Coordination::None;
    so.evidence = evidence;
    sampler.configure(so, nullptr, 0, 1);
    sampler.set_refusal_sink([this](const SampleKey& k, const char* evidence, const std::string& reason, uint64_t) {
      refusals.push_back(k.op + " " + evidence + " " + reason);
    });
    capture = std::make_unique<SnapshotCapture>(&sampler, &sink, nullptr, device, o);
  }
  // One call of `c` under key `key` as the recorder runs it: true if a sample was started (and finished).
  // `raises`: the op throws, so its end callback runs while the exception unwinds (RecordFunction's destructor).
  bool run(const std::string& key, Call& c, const std::vector<c10::IValue>& outputs, bool raises = false) {
    SampleKey* k = sampler.key_for(key, c.schema->name(), c.schema->name(), "unstaged");
    if (!sampler.due(k)) return false;
    SampledCall call;
    call.schema = c.schema;
    call.inputs = c10::ArrayRef<const c10::IValue>(c.inputs.data(), c.inputs.size());
    call.op_dotted = &c.dotted;
    call.key = k;
    if (const CallRefusal why = capture->refusal(call); why != CallRefusal::None) {
      sampler.refused_early(k, why);
      return false;
    }
    if (!sampler.take(k)) return false;
    void* token = capture->begin(call);
    if (!token) return false;
    if (raises) {
      struct EndWhileUnwinding {
        SnapshotCapture* capture;
        void* token;
        ~EndWhileUnwinding() { capture->end(token, {}, 1, 1); }
      };
      try {
        EndWhileUnwinding end{capture.get(), token};
        throw std::runtime_error("the op's own error");
      } catch (const std::runtime_error&) {
      }
      return true;
    }
    capture->end(token, c10::ArrayRef<const c10::IValue>(outputs.data(), outputs.size()), 1, 1);
    return true;
  }
};

std::string key(char c) { return std::string(64, c); }

// A machine with a GPU that no window of these CPU calls reaches (each is refused no_cuda_tensor before any of this).
struct NoDevice : DeviceAccess {
  Capture stream_capture(void*) override { return Capture::None; }
  std::shared_ptr<void> relax_capture_mode() override { return nullptr; }
  std::unique_ptr<DeviceTransfer> transfer(int, void*, const void*, size_t, std::string& e) override {
    e = "no device";
    return nullptr;
  }
  std::unique_ptr<CounterWindow> open_counters(int, void*, std::string& r) override { return r = "none", nullptr; }
  std::unique_ptr<CounterWindow> open_timing(int, void*, std::string& r) override { return r = "none", nullptr; }
  void counter_call_ended(int) override {}
  bool settling_after_window(int) const override { return false; }
};

// The CPU allocator, while it lives, out of memory for anything over 1 MiB (as a device clone can be): through
// c10::SetCPUAllocator, the allocator torch's CPU tensors take. allocate and copy_data are declared both ways, as
// torch 1.13 (const allocate) and 2.x (non-const allocate, copy_data) each want them.
struct OutOfMemoryAbove1MiB : c10::Allocator {
  c10::Allocator* real = c10::GetCPUAllocator();
  // the same priority both ways (SetCPUAllocator replaces at an equal or higher one), so that it can be used again
  OutOfMemoryAbove1MiB() { c10::SetCPUAllocator(this, 100); }
  ~OutOfMemoryAbove1MiB() { c10::SetCPUAllocator(real, 100); }
  c10::DataPtr allocate(size_t n) const {
    TORCH_CHECK_WITH(OutOfMemoryError, n <= (1u << 20), "out of memory (test allocator)");
    return real->allocate(n);
  }
  c10::DataPtr allocate(size_t n) { return static_cast<const OutOfMemoryAbove1MiB*>(this)->allocate(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const { std::memcpy(dest, src, count); }
};

}  // namespace

TEST_CASE("capture: set-up calls use their share of the budget; the compute keeps the rest", "[capture]") {
  SnapshotOptions o;
  o.budget_process = 1 << 20;  // set-up calls: 128 KiB of it
  Rig rig(o);
  at::Tensor weight = at::empty({256, 256}).set_requires_grad(true);  // a parameter: 256 KiB
  Call init = call_of("aten::normal_", {weight, 0.0, 1.0, c10::IValue()});
  CHECK_FALSE(rig.run(key('a'), init, {weight}));  // writes a parameter: over the set-up share
  CHECK(rig.refusals == std::vector<std::string>{"aten::normal_ snapshot setup_share"});
  at::Tensor x = at::ones({64, 256});
  Call mm = call_of("aten::mm", {x, weight.detach()});
  CHECK(rig.run(key('b'), mm, {at::mm(x, weight.detach())}));  // 384 KiB of compute: kept
  CHECK(rig.sink.kept == std::vector<std::string>{"aten.mm.default"});
  at::Tensor small = at::empty({16, 16}).set_requires_grad(true);
  Call small_init = call_of("aten::normal_", {small, 0.0, 1.0, c10::IValue()});
  CHECK(rig.run(key('c'), small_init, {small}));  // a set-up call within the share is kept
}

TEST_CASE("capture: meta calls, and CPU calls where a GPU is used, are refused before any claim", "[capture]") {
  SnapshotOptions o;
  o.gpu_calls_only = true;
  Rig rig(o);
  Call meta = call_of("aten::mm", {at::empty({4, 4}, at::kMeta), at::empty({4, 4}, at::kMeta)});
  CHECK_FALSE(rig.run(key('d'), meta, {at::empty({4, 4}, at::kMeta)}));
  Call cpu = call_of("aten::mm", {at::ones({4, 4}), at::ones({4, 4})});
  CHECK_FALSE(rig.run(key('d'), cpu, {at::ones({4, 4})}));
  CHECK(rig.refusals == std::vector<std::string>{"aten::mm snapshot no_storage", "aten::mm snapshot not_on_gpu"});
  CHECK(rig.sink.kept.empty());
  CHECK(rig.sampler.unsampled_reasons() == std::map<std::string, uint64_t>{{"snapshot:not_on_gpu", 1}});
}

TEST_CASE("capture: a key refused on meta is sampled at its first real call", "[capture]") {
  Rig rig(SnapshotOptions{});
  Call meta = call_of("aten::mm", {at::empty({4, 4}, at::kMeta), at::empty({4, 4}, at::kMeta)});
  Call real = call_of("aten::mm", {at::ones({4, 4}), at::ones({4, 4})});
  CHECK_FALSE(rig.run(key('e'), meta, {at::empty({4, 4}, at::kMeta)}));
  CHECK(rig.run(key('e'), real, {at::ones({4, 4})}));
  CHECK(rig.sink.kept == std::vector<std::string>{"aten.mm.default"});
  CHECK(rig.sampler.unsampled_reasons().empty());
}

TEST_CASE("capture: the math policy holds the thread's autocast state", "[capture]") {
  auto text = [](const lingprobe::format::PickleValue& p, const char* k) { return p.find(k)->as_string(); };
  CHECK(text(current_math_policy(), "autocast_cpu") == "false");
  AutocastState on = AutocastState::current();
  on.cpu = true;
  on.apply();
  const auto policy = current_math_policy();
  on.cpu = false;
  on.apply();
  CHECK(text(policy, "autocast_cpu") == "true");
  CHECK(text(policy, "autocast_cpu_dtype") == "torch.bfloat16");
  CHECK(text(policy, "autocast_cuda") == "false");
}

TEST_CASE("capture: view-only calls count as set-up; copying ones and an optimizer's writes do not", "[capture]") {
  SnapshotOptions o;
  o.budget_process = 1 << 20;  // set-up calls: 128 KiB of it
  Rig rig(o);
  at::Tensor weight = at::ones({256, 256}).set_requires_grad(true);  // 256 KiB
  Call detach = call_of("aten::detach", {weight});                   // nn.Parameter detaches every new weight
  CHECK_FALSE(rig.run(key('f'), detach, {weight.detach()}));
  at::Tensor x = at::ones({128, 256});
  Call flatten = call_of("aten::contiguous", {x.t(), static_cast<int64_t>(c10::MemoryFormat::Contiguous)});
  CHECK(rig.run(key('g'), flatten, {x.t().contiguous()}));  // may copy: compute
  Call step = call_of("aten::add_", {weight, at::ones({256, 256}), 1.0});
  CHECK(rig.run(key('h'), step, {weight}));  // an optimizer's write to a parameter: compute
  CHECK(rig.refusals == std::vector<std::string>{"aten::detach snapshot setup_share"});
}

TEST_CASE("capture: a move or copy across devices is set-up, a frozen weight's too; a cast on one device is not",
          "[capture]") {
  auto setup = [](Call& c) {
    SampledCall call;
    call.schema = c.schema;
    call.inputs = c10::ArrayRef<const c10::IValue>(c.inputs.data(), c.inputs.size());
    call.op_dotted = &c.dotted;
    return is_setup_call(call);
  };
  at::Tensor frozen = at::ones({64, 64});  // requires_grad_(False): a frozen model's weight, as any tensor
  const c10::IValue float32(static_cast<int64_t>(at::kFloat)), bf16(static_cast<int64_t>(at::kBFloat16));
  Call to_gpu = call_of("aten::to", {frozen, c10::Device("cuda:0"), float32, false, false, c10::IValue()}, "device");
  CHECK(setup(to_gpu));  // before: compute, and a frozen model's move to the GPU spent the compute's budget
  Call stay = call_of("aten::to", {frozen, c10::Device("cpu:0"), float32, false, false, c10::IValue()}, "device");
  CHECK_FALSE(setup(stay));  // .to(device) where the tensor is already: its index named or not, no move
  Call cast = call_of("aten::to", {frozen, bf16, false, false, c10::IValue()}, "dtype");
  CHECK_FALSE(setup(cast));  // an activation's cast looks the same: compute
  at::Tensor on_meta = at::empty({64, 64}, at::TensorOptions().device(at::kMeta));
  Call load = call_of("aten::copy_", {on_meta, frozen, false});
  CHECK(setup(load));  // a checkpoint's tensor copied into a weight on another device
  Call same = call_of("aten::copy_", {frozen, at::zeros({64, 64}), false});
  CHECK_FALSE(setup(same));  // a copy on one device into a tensor that is no parameter: compute
  // Module._apply asks this of every parameter and its moved copy: a snapshot of both, no kernel (before: compute,
  // and a frozen resnet18's .cuda() refused its conv2d snapshots budget_process on the GPU)
  Call shallow = call_of("aten::_has_compatible_shallow_copy_type", {on_meta, frozen});
  CHECK(setup(shallow));
  Call scalar = call_of("aten::mul", {on_meta, at::scalar_tensor(2.0)}, "Tensor");
  CHECK_FALSE(setup(scalar));  // a CPU scalar tensor joins any op: compute
}

TEST_CASE("capture: trunc_normal_'s in-place steps on a parameter are set-up; the same on an activation is not",
          "[capture]") {
  // A new user's swin_t: trunc_normal_ (uniform_, then erfinv_, mul_, add_, clamp_ on the weight) held the whole
  // "Top by time" table and 377 MB of snapshots counted as compute.
  SnapshotOptions o;
  o.budget_process = 1 << 20;  // set-up calls: 128 KiB of it
  Rig rig(o);
  at::Tensor weight = at::rand({256, 256}).set_requires_grad(true);  // 256 KiB
  Call erfinv = call_of("aten::erfinv_", {weight});
  CHECK_FALSE(rig.run(key('i'), erfinv, {weight}));
  Call scale = call_of("aten::mul_", {weight, 0.02}, "Scalar");
  CHECK_FALSE(rig.run(key('j'), scale, {weight}));
  at::Tensor number = at::scalar_tensor(0.5);  // Python's weight.add_(0.5) passes a wrapped number
  number.unsafeGetTensorImpl()->set_wrapped_number(true);
  Call shift = call_of("aten::add_", {weight, number, 1.0});
  CHECK_FALSE(rig.run(key('m'), shift, {weight}));
  Call clamp = call_of("aten::clamp_", {weight, -2.0, 2.0});
  CHECK_FALSE(rig.run(key('k'), clamp, {weight}));
  CHECK(rig.refusals == std::vector<std::string>{"aten::erfinv_ snapshot setup_share",
                                                 "aten::mul_ snapshot setup_share", "aten::add_ snapshot setup_share",
                                                 "aten::clamp_ snapshot setup_share"});
  at::Tensor activation = at::rand({256, 256});  // not a parameter: compute
  Call halve = call_of("aten::mul_", {activation, 0.5}, "Scalar");
  CHECK(rig.run(key('l'), halve, {activation}));
  // AdamW's decoupled weight decay, param.mul_(1 - lr * wd), in step(): the parameter has its gradient by then
  Rig step_rig(o);
  weight.mutable_grad() = at::zeros({256, 256});
  Call decay = call_of("aten::mul_", {weight, 0.999}, "Scalar");
  CHECK(step_rig.run(key('n'), decay, {weight}));
  // a 0-dim tensor that is not a wrapped number (a capturable optimizer's lr) is a tensor operand: compute
  Rig tensor_rig(o);
  at::Tensor fresh = at::rand({256, 256}).set_requires_grad(true);
  Call by_tensor = call_of("aten::mul_", {fresh, at::scalar_tensor(0.5)}, "Tensor");
  CHECK(tensor_rig.run(key('o'), by_tensor, {fresh}));
  // an activation inside the graph (h = w * 2; h.relu_()): compute, not a parameter's set-up (that it reads no
  // .grad, which made torch warn, test_evidence_defaults.py checks under -W error)
  Rig graph_rig(o);
  at::Tensor h = at::rand({256, 256}).set_requires_grad(true) * 2;
  Call relu = call_of("aten::relu_", {h});
  CHECK(graph_rig.run(key('p'), relu, {h}));
  CHECK((step_rig.refusals.empty() && tensor_rig.refusals.empty() && graph_rig.refusals.empty()));
}

TEST_CASE("capture: a call with an argument no replay can rebuild (a Storage) takes no snapshot, and settles the key",
          "[capture]") {
  // A fork DataLoader's batch arrives by set_(Storage) from a worker's shared memory: its snapshot failed replay.
  SnapshotOptions o;
  Rig rig(o);
  at::Tensor batch = at::empty({4, 3});
  at::Tensor source = at::ones({4, 3});
  Call set = call_of("aten::set_",
                     {batch, c10::IValue(source.storage()), int64_t{0}, c10::IValue(std::vector<int64_t>{4, 3}),
                      c10::IValue(std::vector<int64_t>{3, 1})},
                     "source_Storage_storage_offset");
  CHECK_FALSE(rig.run(key('s'), set, {batch}));
  CHECK(rig.refusals == std::vector<std::string>{"aten::set_ snapshot unsupported_argument"});
  CHECK(rig.sink.kept.empty());
  CHECK_FALSE(rig.run(key('s'), set, {batch}));  // settled: no later call is tried
  CHECK(rig.refusals.size() == 1);
  CHECK(lingprobe::capture::replayable_value(c10::IValue(std::vector<int64_t>{4, 3})));
  CHECK_FALSE(lingprobe::capture::replayable_value(c10::IValue(source.storage())));
}

TEST_CASE("capture: a snapshot over the archive's limit is refused before any copy, and settles the key", "[capture]") {
  SnapshotOptions o;
  o.max_snapshot_bytes = 1 << 20;  // stands in for the 4 GiB of an archive without ZIP64
  Rig rig(o);
  at::Tensor big = at::ones({512, 1024});  // 2 MiB of input
  Call mm = call_of("aten::mm", {big, at::ones({1024, 4})});
  CHECK_FALSE(rig.run(key('i'), mm, {at::mm(big, at::ones({1024, 4}))}));
  CHECK(rig.refusals == std::vector<std::string>{"aten::mm snapshot too_large"});
  CHECK(rig.sink.kept.empty());
  CHECK(rig.sampler.unsampled_reasons() == std::map<std::string, uint64_t>{{"snapshot:too_large", 1}});
  for (int i = 0; i < 8; ++i) CHECK_FALSE(rig.run(key('i'), mm, {}));             // settled: no later call is tried
  Call grows = call_of("aten::mm", {at::ones({1024, 64}), at::ones({64, 256})});  // 320 KiB in, 1 MiB out
  CHECK(rig.run(key('j'), grows, {at::ones({1024, 256})}));  // begun; refused at its end, nothing copied out
  CHECK(rig.refusals.back() == "aten::mm snapshot too_large");
  CHECK(rig.sink.kept.empty());
}

TEST_CASE("capture: a call whose op raised keeps nothing and leaves its key to the next call", "[capture]") {
  Rig rig(SnapshotOptions{});
  Call mm = call_of("aten::mm", {at::ones({4, 4}), at::ones({4, 4})});
  CHECK(rig.run(key('g'), mm, {}, /*raises=*/true));
  CHECK(rig.sink.kept.empty());
  CHECK(rig.capture->drops().at("snapshots") == std::map<std::string, uint64_t>{{"raised", 1}});
  // the key's reason while it waits: its call raised (a new user read "rule_skip_every_probability" at defaults)
  CHECK(rig.sampler.unsampled_reasons() == std::map<std::string, uint64_t>{{"snapshot:raised", 1}});
  CHECK(rig.refusals == std::vector<std::string>{"aten::mm snapshot raised"});  // recorded once, as refusals are
  CHECK(rig.run(key('g'), mm, {at::ones({4, 4})}));
  CHECK(rig.sink.kept == std::vector<std::string>{"aten.mm.default"});
}

TEST_CASE("capture: an op with returns that ends without outputs raised, where the exception count missed it",
          "[capture]") {
  // torch 2.11's wheel ends a call that raised with std::uncaught_exceptions() unchanged: the end callback runs with
  // no outputs and no exception seen (docs/gpu/snapshots-raised-check-h100-2026-12-05.txt).
  Rig rig(SnapshotOptions{});
  Call mm = call_of("aten::mm", {at::ones({4, 4}), at::ones({4, 4})});
  CHECK(rig.run(key('k'), mm, {}));
  CHECK(rig.sink.kept.empty());
  CHECK(rig.capture->drops().at("snapshots") == std::map<std::string, uint64_t>{{"raised", 1}});
  CHECK(rig.run(key('k'), mm, {at::ones({4, 4})}));
  CHECK(rig.sink.kept == std::vector<std::string>{"aten.mm.default"});
}

TEST_CASE("capture: a call made while another exception unwinds, and that returns, is kept", "[capture]") {
  Rig rig(SnapshotOptions{});
  Call mm = call_of("aten::mm", {at::ones({4, 4}), at::ones({4, 4})});
  bool taken = false;
  struct CallsInItsDestructor {  // an op called from a destructor during unwinding: begin and end see one exception
    Rig& rig;
    Call& mm;
    bool& taken;
    ~CallsInItsDestructor() { taken = rig.run(key('h'), mm, {at::ones({4, 4})}); }
  };
  try {
    CallsInItsDestructor caller{rig, mm, taken};
    throw std::runtime_error("not the op's");
  } catch (const std::runtime_error&) {
  }
  CHECK(taken);
  CHECK(rig.sink.kept == std::vector<std::string>{"aten.mm.default"});
  CHECK(rig.capture->drops().count("snapshots") == 0);
}

TEST_CASE("capture: a written argument whose copy fails refuses the snapshot alone; the key's snapshot waits",
          "[capture]") {
  // Before, a failed copy (device memory, a transfer) refused the call's counters with its snapshot, although
  // counters need no copy (issue 26): the window is now tried all the same (here refused, a CPU call), and the
  // snapshot, not settled, is taken by the key's next call.
  SnapshotOptions o;
  o.profile = true;
  NoDevice device;
  Rig rig(o, kSnapshot | kCounters, &device);
  at::Tensor x = at::ones({512, 1024});  // 2 MiB, written by add_: copied before the op
  Call add = call_of("aten::add_", {x, at::ones({1}), c10::Scalar(1)});
  {
    OutOfMemoryAbove1MiB out_of_memory;
    CHECK_FALSE(rig.run(key('o'), add, {x}));
  }
  CHECK(rig.refusals ==
        std::vector<std::string>{"aten::add_ snapshot device_oom", "aten::add_ counters no_cuda_tensor"});
  CHECK(rig.capture->drops() ==
        lingprobe::format::DropCounts{{"snapshots", {{"device_oom", 1}}}, {"profiles", {{"no_cuda_tensor", 1}}}});
  CHECK(rig.sink.kept.empty());
  CHECK(rig.run(key('o'), add, {x}));
  CHECK(rig.sink.kept == std::vector<std::string>{"aten.add_.default"});
}
