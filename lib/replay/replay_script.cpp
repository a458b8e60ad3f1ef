// The standalone replay script written beside each replay: plain PyTorch
// (torch.load(weights_only=True) + torch.ops), so that a user can rerun the
// call by hand or under Nsight Compute, without lingprobe.
#include "replay/replay.h"

#include <cstdlib>

#include "format/canonical_json.h"

namespace lingprobe::replay {

namespace {

// `to` as a path relative to the directory `from`, both resolved (symlinks such as OUT/latest followed); `to`
// resolved where `from` cannot be, and `to` as given where it cannot.
std::string relative_path(const std::string& from, const std::string& to) {
  char* from_real = ::realpath(from.c_str(), nullptr);
  char* to_real = ::realpath(to.c_str(), nullptr);
  std::string result = to;
  if (from_real && to_real) {
    const std::string a = std::string(from_real) + "/", b = to_real;
    size_t common = 0;  // the length of the directories both share, up to a '/'
    for (size_t i = 0; i < a.size() && i < b.size() && a[i] == b[i]; ++i)
      if (a[i] == '/') common = i + 1;
    result.clear();
    for (size_t i = common; i < a.size(); ++i)
      if (a[i] == '/') result += "../";
    result += b.substr(common);
  } else if (to_real) {
    result = to_real;
  }
  std::free(from_real);
  std::free(to_real);
  return result;
}

}  // namespace

std::string replay_operator_script(const std::string& snapshot_path, const std::string& script_dir) {
  std::string quoted;  // a valid Python string literal for any path
  format::write_json_string(relative_path(script_dir, snapshot_path), quoted);
  return R"PY(#!/usr/bin/env python3
"""Replays one lingprobe snapshot with plain PyTorch: torch.load + torch.ops.

    python3 replay_operator.py [SNAPSHOT] [--device cuda] [--repeat N] [--nvtx]

Rebuilds every argument with its recorded shape, strides, storage offset and
data-pointer alignment, applies the recorded math policy, re-enters the
recorded autocast region, calls the op and compares with the recorded output
(exact, max_abs, rmse). --repeat runs the
call N more times (for profilers: ncu --nvtx --nvtx-include lingprobe_replay/)."""
import argparse, contextlib, json, math, os, torch

# the snapshot this was written for, relative to this script's directory: the script runs from anywhere, and a run
# directory moved whole keeps its replays
SNAPSHOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), )PY" +
         quoted + R"PY()


def span(shape, stride):
    return 0 if 0 in shape else 1 + sum((n - 1) * s for n, s in zip(shape, stride))


def tensor(v, device):
    dtype = getattr(torch, v["dtype"].split(".", 1)[1])
    data = v["data"].view(dtype) if v.get("raw") else v["data"]
    shape, stride, offset = v["shape"], v["stride"], v["storage_offset"]
    dev = torch.device(device or v["device"]) if not v["device"].startswith("cpu") else torch.device("cpu")
    es, extent = data.element_size(), span(shape, stride)
    buf = torch.zeros((offset + extent) * es + 8192, dtype=torch.uint8, device=dev)
    shift = 0
    for k in range(0, 8192, es):  # the recorded alignment of the data pointer
        p = buf.data_ptr() + k + offset * es
        if min(p & -p, 4096) == v["alignment"]:
            shift = k
            break
    storage = buf[shift:shift + (offset + extent) * es].view(dtype)
    t = storage.as_strided(shape, stride, offset)
    if v["layout"] == "span":
        storage[offset:offset + extent].copy_(data)
    else:
        t.copy_(data.reshape(shape))
    return t


def value(v, device):
    if isinstance(v, list):
        return [value(x, device) for x in v]
    if not isinstance(v, dict):
        return v
    kind = v["kind"]
    if kind == "tensor":
        return tensor(v, device)
    if kind == "float":
        return float(v["repr"])
    if kind == "complex":
        return complex(float(v["real"]), float(v["imag"]))
    if kind in ("dtype", "layout", "memory_format"):
        return getattr(torch, v["repr"].split(".", 1)[1])
    if kind == "device":
        return torch.device(device if device and not v["repr"].startswith("cpu") else v["repr"])
    if kind == "tuple":
        return tuple(value(x, device) for x in v["items"])
    if kind == "generator":  # the recorded state is not kept: a fresh one where the run's was (random all the same)
        return torch.Generator(device if device and not v.get("device", "cpu").startswith("cpu") else
                               v.get("device", "cpu")) if "device" in v else None
    raise SystemExit(f"cannot rebuild a {kind} value ({v.get('repr')})")


def apply_math_policy(p):
    b = lambda k: p.get(k) == "true"  # noqa: E731
    if "matmul_precision" in p:
        torch.set_float32_matmul_precision(p["matmul_precision"])
    torch.backends.cuda.matmul.allow_tf32 = b("matmul_allow_tf32")
    torch.backends.cudnn.allow_tf32 = b("cudnn_allow_tf32")
    torch.backends.cudnn.benchmark = b("cudnn_benchmark")
    torch.backends.cudnn.deterministic = b("cudnn_deterministic")
    torch.backends.cudnn.enabled = b("cudnn_enabled")
    torch.use_deterministic_algorithms(b("deterministic_algorithms"))


def autocast_regions(p):
    regions = contextlib.ExitStack()
    for dev in ("cuda", "cpu"):
        if p.get("autocast_" + dev) == "true":
            dtype = getattr(torch, p["autocast_" + dev + "_dtype"].split(".", 1)[1])
            regions.enter_context(torch.autocast(dev, dtype=dtype, cache_enabled=p.get("autocast_cache") != "false"))
    return regions


def promoting_as_number(t):
    """A 0-dim tensor that promotes as a wrapped number would: a float or complex one in the default dtype, which
    a dimensioned tensor of the same kind outranks and an integer one does not."""
    if t.is_complex():
        return t.to(torch.complex64 if torch.get_default_dtype() == torch.float32 else torch.complex128)
    return t.to(torch.get_default_dtype()) if t.is_floating_point() else t


def outputs(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for y in x for t in outputs(y)]
    return []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("snapshot", nargs="?", default=SNAPSHOT)
    ap.add_argument("--device", default="")
    ap.add_argument("--repeat", type=int, default=0)
    ap.add_argument("--nvtx", action="store_true", help="mark each call with an NVTX range lingprobe_replay")
    a = ap.parse_args()
    d = torch.load(a.snapshot, weights_only=True)
    apply_math_policy(d.get("math_policy", {}))
    ns, rest = d["name"].split("::", 1)
    try:
        packet = getattr(getattr(torch.ops, ns), rest)
    except (AttributeError, RuntimeError):  # an extension's op: the library the recorded process had loaded
        if not (d.get("library") and os.path.exists(d["library"])):
            raise
        torch.ops.load_library(d["library"])
        packet = getattr(getattr(torch.ops, ns), rest)
    op = getattr(packet, d["overload"] or "default")
    args = [value(x, a.device) for x in d["args"]]
    kwargs = {k: value(x, a.device) for k, x in d["kwargs"].items()}
    # A Python number the run's dispatcher wrapped (`x * 0.5`) promotes as a number: passed as one, torch.ops wraps
    # it again where the op's binding takes a number for that Tensor (add, mul, div, ...); elsewhere, the tensor.
    wrapped = [isinstance(v, dict) and bool(v.get("wrapped_number")) for v in d["args"]]
    numbers = [x.item() if w else x for x, w in zip(args, wrapped)]
    as_tensors = [promoting_as_number(x) if w else x for x, w in zip(args, wrapped)] if any(wrapped) else None
    with torch.inference_mode(), autocast_regions(d.get("math_policy", {})):
        for i in range(1 + a.repeat):
            if a.nvtx and torch.cuda.is_available():
                torch.cuda.nvtx.range_push("lingprobe_replay")
            try:
                out = op(*numbers, **kwargs)
            except (TypeError, RuntimeError):  # the binding takes no number for that Tensor (remainder.Tensor):
                if as_tensors is None:         # refused before the op ran, so it runs once, with 0-dim tensors
                    raise
                numbers, as_tensors = as_tensors, None
                out = op(*numbers, **kwargs)
            if a.nvtx and torch.cuda.is_available():
                torch.cuda.nvtx.range_pop()
    expected = outputs(value(d["output"], "cpu"))
    got = [t.cpu() for t in outputs(out)]
    same = lambda e, g: torch.equal(e, g) or (e.is_floating_point() and torch.equal(e.isnan(), g.isnan())  # noqa: E731
                                              and torch.equal(e.nan_to_num(), g.nan_to_num()))
    exact = len(got) == len(expected) and all(e.dtype == g.dtype and same(e, g) for e, g in zip(expected, got))
    diffs = [(g.double() - e.double()).abs().nan_to_num() for e, g in zip(expected, got) if e.numel()
             and not e.is_complex()]
    max_abs = max((float(x.max()) for x in diffs), default=0.0)
    n = sum(x.numel() for x in diffs)
    rmse = math.sqrt(sum(float((x * x).sum()) for x in diffs) / n) if n else 0.0
    print(json.dumps({"op": d["op"], "stage": d["stage"], "exact": exact, "max_abs": max_abs, "rmse": rmse,
                      "finite": all(bool(g.isfinite().all()) for g in got if g.is_floating_point())}))


if __name__ == "__main__":
    main()
)PY";
}

}  // namespace lingprobe::replay
