"""Launch-bound decode loop: what lingprobe costs where every ATen call is
cheap (issue 14). One command:

    python3 bench/decode_bench.py --device cuda [--reps 3] [--json OUT]   # the GPU machine
    /usr/bin/python3 bench/decode_bench.py --device cpu --quick           # here: a smaller model, a smoke run

The model is a Llama-style decoder of our own (RMSNorm, rotary embeddings,
grouped K/V cache grown by torch.cat, SDPA, SiLU-gated MLP; random weights,
bf16 on CUDA, fp32 on CPU), batch 1, greedy decoding: each token is one
forward of ~40 top-level ATen calls per layer, most of them with nested calls
(linear: t, addmm or matmul; the views; to), and one .item() that waits for the
GPU, as a serving loop does.

--workload hf-llama runs the loop people run instead (issue 29): Hugging Face
transformers' LlamaForCausalLM (hidden 1024, intermediate 2816, 12 layers, 16
heads, 8 K/V heads, vocab 32000; random init, bf16 on CUDA), batch 1, a
32-token prompt, generate(max_new_tokens=48, min_new_tokens=48,
do_sample=False): one block is one generate() call, its time divided by its
48 new tokens.

    python3 bench/decode_bench.py --device cuda --workload hf-llama --reps 2 --pairs 8 --process-configs none,floor,lingprobe

Two measurements, as docs/PERFORMANCE.md describes:
- interleaved inside one process (group 'main'): the configurations that can
  be switched at run time, each measured in pairs of blocks (off, then on) of
  --tokens tokens, configurations rotating, --pairs pairs; a process reports
  the median of its paired differences per token. Rows: none (nothing
  switched: the noise), floor (an empty global RecordFunction callback asking
  for inputs and outputs), floor-toplevel (the same callback switching
  RecordFunction off below each top-level call, as lingprobe can), lingprobe
  (recording every top-level call, call records on, LINGPROBE_SUPPRESS_NESTED
  as configured: auto by default), torch.profiler (record_shapes, CPU and CUDA
  activity).
- one configuration per process (--reps processes each, interleaved): the
  rows that are fixed at initialisation: lingprobe with
  LINGPROBE_SUPPRESS_NESTED=never (nested calls boxed, as before this issue),
  always, nested (LINGPROBE_NESTED=1), idle sampling (LINGPROBE_SNAPSHOTS=1,
  LINGPROBE_PROFILE=1, nothing selected to sample), lingprobe loaded with
  recording off; and none, floor and lingprobe again, each alone in its process.

The breakdown per token (from the 'main' processes): top-level and nested
calls per token (lingprobe's counters), the toggle's cost (one off/on pair of
at::enableRecordFunction, timed in the process) times the suppressed calls,
the top-level floor (floor-toplevel minus the toggles), the nested floor
avoided (floor minus the top-level floor) and lingprobe's own work (lingprobe
minus floor-toplevel, the toggles being the same calls).

--callgrind counts instructions per token instead, one process per
configuration; --callgrind --cache-sim adds valgrind's cache simulation: the
calling thread's first- and last-level cache misses per token over none's."""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
MAIN_CONFIGS = ["none", "floor", "floor-toplevel", "lingprobe", "profiler"]
# The configurations fixed at initialisation, one per process: name -> (lingprobe options or None, the floor
# callback to install or None, what is switched on).
CONFIGS = {
    "none": (None, None, "nothing"),
    "floor": (None, "floor", "floor"),
    "floor-toplevel": (None, "toplevel", "floor switching RecordFunction off below each top-level call"),
    "lingprobe-off": ({}, None, "lingprobe loaded and initialised, recording off"),
    "lingprobe": ({}, None, "lingprobe, SUPPRESS_NESTED=auto"),
    "lingprobe-never": ({"suppress_nested": "never"}, None, "lingprobe, SUPPRESS_NESTED=never (nested calls boxed)"),
    "lingprobe-always": ({"suppress_nested": "always"}, None, "lingprobe, SUPPRESS_NESTED=always"),
    "lingprobe-min2": ({"suppress_nested_min": "2"}, None, "lingprobe, SUPPRESS_NESTED=auto, SUPPRESS_NESTED_MIN=2"),
    "lingprobe-counts-only": ({"call_records": False}, None, "lingprobe, CALL_RECORDS=0"),
    "lingprobe-nested": ({"nested": "1"}, None, "lingprobe recording nested calls too"),
    "lingprobe-sampling-idle": ({"snapshots": "1", "profile": "1", "sample_ops": "lingprobe::nothing"}, None,
                                "lingprobe, SNAPSHOTS=1 PROFILE=1, nothing to sample"),
}
PROCESS_DEFAULT = ["none", "floor", "lingprobe-off", "lingprobe", "lingprobe-never", "lingprobe-always",
                   "lingprobe-min2", "lingprobe-nested", "lingprobe-sampling-idle"]
SCRATCH = "LPBENCH_DECODE_SCRATCH"  # the folder the parent process owns and removes: its children write below it
CALLGRIND_DEFAULT = ["none", "floor", "floor-toplevel", "lingprobe", "lingprobe-never", "lingprobe-always",
                     "lingprobe-min2", "lingprobe-counts-only", "lingprobe-nested"]


def configure(args, name, stopped=False):
    """Switches configuration `name` on in this process; the lingprobe module when it started lingprobe (`stopped`,
    and 'lingprobe-off': initialised with the configuration's options, recording off)."""
    import ctypes
    opts, floor_kind, _ = CONFIGS[name]
    if floor_kind:
        floor = ctypes.CDLL(str(args.build / "bench" / "libfloor_callback.so"))
        (floor.floor_install if floor_kind == "floor" else floor.floor_install_toplevel)()
    if opts is None:
        return None
    os.environ["LINGPROBE_LIBRARY"] = str(args.build / "liblingprobe.so")
    sys.path.insert(0, str(ROOT / "python_shim"))
    import lingprobe
    lingprobe.start(out_dir=tempfile.mkdtemp(prefix="lp-decode-", dir=os.environ.get(SCRATCH)),
                    **{"call_records": True, **opts})
    if stopped or name == "lingprobe-off":
        lingprobe.stop()
    return lingprobe


def hf_llama(device, quick):
    """transformers' Llama generate() loop; (step, new tokens per step)."""
    import torch
    import transformers
    torch.manual_seed(0)
    size = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=1024) if quick else \
        dict(hidden_size=1024, intermediate_size=2816, num_hidden_layers=12, num_attention_heads=16,
             num_key_value_heads=8, vocab_size=32000)
    cfg = transformers.LlamaConfig(**size)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    net = transformers.LlamaForCausalLM(cfg).to(device=device, dtype=dtype).eval()
    prompt = torch.randint(0, cfg.vocab_size, (1, 32), device=device)
    new = 48

    def step():
        with torch.no_grad():
            net.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, min_new_tokens=new,
                         do_sample=False, pad_token_id=0)
    return step, new


def model(device, quick, workload="own"):
    """The workload's step and the tokens one step decodes."""
    if workload == "hf-llama":
        return hf_llama(device, quick)
    return own_model(device, quick), 1


def own_model(device, quick):
    import torch
    import torch.nn.functional as F
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    dim, layers, heads, kv_heads, hidden, vocab = (256, 2, 4, 2, 688, 1024) if quick else (1024, 16, 16, 4, 2816, 32000)
    hd = dim // heads
    g = torch.Generator().manual_seed(0)
    rnd = lambda *s: (torch.randn(*s, generator=g) * 0.02).to(device=device, dtype=dtype)
    emb, head, norm = rnd(vocab, dim), rnd(vocab, dim), torch.ones(dim, device=device, dtype=dtype)
    blocks = [dict(wq=rnd(dim, dim), wk=rnd(kv_heads * hd, dim), wv=rnd(kv_heads * hd, dim), wo=rnd(dim, dim),
                   wg=rnd(hidden, dim), wu=rnd(hidden, dim), wd=rnd(dim, hidden),
                   n1=torch.ones(dim, device=device, dtype=dtype), n2=torch.ones(dim, device=device, dtype=dtype))
              for _ in range(layers)]
    inv = 1.0 / (10000 ** (torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd))

    def rms(x, w):
        v = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(v + 1e-6)).to(dtype) * w

    def rope(x, pos):
        f = torch.outer(torch.tensor([float(pos)], device=device), inv)
        cos, sin = f.cos().to(dtype), f.sin().to(dtype)
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    def attention(q, k, v):  # SDPA where torch has it (2.0+), else its math
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v)
        return torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / hd ** 0.5, dim=-1).matmul(v)

    def forward(token, pos, cache):
        x = F.embedding(token, emb)                                       # [1, 1, dim]
        for i, b in enumerate(blocks):
            h = rms(x, b["n1"])
            q = F.linear(h, b["wq"]).view(1, 1, heads, hd).transpose(1, 2)
            k = F.linear(h, b["wk"]).view(1, 1, kv_heads, hd).transpose(1, 2)
            v = F.linear(h, b["wv"]).view(1, 1, kv_heads, hd).transpose(1, 2)
            q, k = rope(q, pos), rope(k, pos)
            if cache[i] is not None:
                k, v = torch.cat([cache[i][0], k], dim=2), torch.cat([cache[i][1], v], dim=2)
            cache[i] = (k, v)
            rep = heads // kv_heads
            kk, vv = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
            a = attention(q, kk, vv).transpose(1, 2).reshape(1, 1, dim)
            x = x + F.linear(a, b["wo"])
            h = rms(x, b["n2"])
            x = x + F.linear(F.silu(F.linear(h, b["wg"])) * F.linear(h, b["wu"]), b["wd"])
        return F.linear(rms(x, norm), head)

    state = {"pos": 0, "cache": [None] * layers, "token": torch.zeros(1, 1, dtype=torch.long, device=device)}

    def step():
        """One greedy token; the cache restarts every 128 tokens (a new request)."""
        if state["pos"] == 128:
            state["pos"], state["cache"] = 0, [None] * layers
        with torch.no_grad():
            logits = forward(state["token"], state["pos"], state["cache"])
        nxt = int(logits[0, -1].argmax().item())                        # waits for the GPU, as serving does
        state["token"] = torch.tensor([[nxt]], device=device)
        state["pos"] += 1
    return step


class Toggle:
    def __init__(self, name, on=lambda: None, off=lambda: None, settle=lambda: None):
        self.name, self.on, self.off, self.settle = name, on, off, settle


def child(args):
    import ctypes
    import torch
    torch.set_num_threads(1)
    step, per_step = model(args.device, args.quick, args.workload)
    floor = ctypes.CDLL(str(args.build / "bench" / "libfloor_callback.so"))
    floor.floor_install.restype = floor.floor_install_toplevel.restype = ctypes.c_uint64
    floor.floor_remove.argtypes = [ctypes.c_uint64]
    floor.floor_toggle_ns.restype = ctypes.c_double

    def floor_toggle(name, install):
        h = []
        return Toggle(name, on=lambda: h.append(install()), off=lambda: floor.floor_remove(h.pop()))

    def timed(n):
        steps = max(1, -(-n // per_step))  # whole steps (a generate() call decodes per_step tokens)
        if args.device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - t0) / (steps * per_step) * 1e3  # ms per token

    warm_steps = -(-args.warmup // per_step)
    for _ in range(warm_steps if args.config == "main" else max(1, 8 // per_step)):  # per-process rows: below
        step()
    result = {"config": args.config}
    if args.config == "main":
        result["main_lingprobe"] = args.main_lingprobe  # what its 'lingprobe' row switched
        lingprobe = configure(args, args.main_lingprobe, stopped=True)  # initialised, switched on and off below
        current = []

        def prof_on():
            acts = [torch.profiler.ProfilerActivity.CPU]
            if args.device == "cuda":
                acts.append(torch.profiler.ProfilerActivity.CUDA)
            current.append(torch.profiler.profile(activities=acts, record_shapes=True))
            current[-1].__enter__()

        toggles = {"none": Toggle("none"), "floor": floor_toggle("floor", floor.floor_install),
                   "floor-toplevel": floor_toggle("floor-toplevel", floor.floor_install_toplevel),
                   "lingprobe": Toggle("lingprobe", on=lingprobe.start, off=lingprobe.stop, settle=lingprobe.flush),
                   "profiler": Toggle("profiler", on=prof_on, off=lambda: current.pop().__exit__(None, None, None))}
        # what one token is, to lingprobe: top-level calls, the nested calls below them, the suppressed ones
        lingprobe.start()
        s0 = lingprobe.stats()
        timed(args.tokens)
        s1 = lingprobe.stats()
        toggle_ns = floor.floor_toggle_ns(20000)  # with lingprobe's callback registered, as when it toggles
        lingprobe.stop()
        per = {k: (s1[k] - s0[k]) / args.tokens for k in ("calls_seen", "nested_seen", "nested_suppressed", "signatures")}
        result.update(per_token=per, toggle_ns=toggle_ns)
        diffs = {n: [] for n in args.main_configs}
        for _ in range(args.pairs):
            for n in args.main_configs:
                t = toggles[n]
                off = timed(args.tokens)
                t.on()
                on = timed(args.tokens)
                t.off()
                t.settle()
                diffs[n].append((off, on))
        result["paired"] = {n: {"off_ms": statistics.median(o for o, _ in d), "on_ms": statistics.median(x for _, x in d),
                                "added_ms": statistics.median(x - o for o, x in d)} for n, d in diffs.items()}
        s2 = lingprobe.stats()
        result["dropped"] = s2["dropped"]
        result["new_signatures_in_pairs"] = s2["signatures"] - s1["signatures"]  # first sightings in the timed blocks
    else:
        lp = configure(args, args.config)
        for _ in range(warm_steps):
            step()
        ms = [timed(args.tokens) for _ in range(args.pairs)]
        result["ms_per_token"] = statistics.median(ms)
        if lp is not None:
            s = lp.stats()
            result["stats"] = {k: s[k] for k in ("calls_seen", "nested_seen", "nested_suppressed", "dropped")}
    print(json.dumps(result))


def callgrind_child(args):
    """One configuration, switched on before the warm-up; then n and 2n tokens between ZERO and DUMP requests."""
    import ctypes
    import torch
    torch.set_num_threads(1)
    cg = ctypes.CDLL(str(args.build / "bench" / "libcallgrind_control.so"))
    step, _ = model(args.device, args.quick)
    lp = configure(args, args.config)
    for _ in range(args.warmup):
        step()
    if lp:
        lp.flush()
    cg.lpbench_start_instrumentation()
    n = args.tokens
    for label, k in (("1", n), ("2", 2 * n)):
        cg.lpbench_zero()
        for _ in range(k):
            step()
        if lp:
            lp.flush()  # the writer's work on these tokens' records lands in this count (all-threads run)
        cg.lpbench_dump(f"decode/{args.config}/{label}".encode())
    out = {"config": args.config}
    if lp:
        s = lp.stats()
        out["stats"] = {k: s[k] for k in ("calls_seen", "nested_seen", "nested_suppressed", "dropped")}
    print(json.dumps(out))


def callgrind_main(args):
    # the same dump reading, heap settings and valgrind probe as bench/cpu_bench.py
    from cpu_bench import HEAP_TUNABLES, callgrind_events, under_valgrind, valgrind_cannot_run_torch, valgrind_preload
    cannot = valgrind_cannot_run_torch(path=os.environ.get("PATH"), preload=valgrind_preload(args.build))
    if cannot:
        raise SystemExit(f"instruction counts: {cannot.reason}; the wall-clock figures need no valgrind "
                         "(leave out --callgrind)")
    configs = args.process_configs.split(",") if args.process_configs else CALLGRIND_DEFAULT
    rows = {}
    for config in configs:
        for separate in ("yes", "no"):  # the calling thread alone, then every thread (lingprobe's writer included)
            if separate == "no" and not config.startswith("lingprobe"):
                continue
            d = tempfile.mkdtemp(prefix="lp-decode-cg-", dir=os.environ.get(SCRATCH))
            cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-line=no",
                   f"--cache-sim={'yes' if args.cache_sim and separate == 'yes' else 'no'}",
                   f"--separate-threads={separate}", f"--callgrind-out-file={d}/cg.out", sys.executable, __file__,
                   "--callgrind-child", config, "--device", args.device, "--build", str(args.build),
                   "--tokens", str(args.tokens), "--warmup", str(args.warmup)] + (["--quick"] if args.quick else [])
            env = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k != "LD_PRELOAD"}
            env.update(OMP_NUM_THREADS="1", LINGPROBE_LOG_LEVEL="warn", GLIBC_TUNABLES=HEAP_TUNABLES)
            p = subprocess.run(cmd, capture_output=True, text=True, env=under_valgrind(env, args.build), timeout=3600)
            if p.returncode != 0:
                raise SystemExit(f"callgrind {config} failed:\n{p.stderr[-3000:]}")
            child = json.loads(p.stdout.strip().splitlines()[-1])
            events = callgrind_events(d)
            n, n2 = events[f"decode/{config}/1"], events[f"decode/{config}/2"]
            per_token = (n2["Ir"] - n["Ir"]) / args.tokens
            row = rows.setdefault(config, {"stats": child.get("stats")})
            row["calling" if separate == "yes" else "all"] = per_token
            if args.cache_sim and separate == "yes":
                row["cache"] = {e: (n2[e] - n[e]) / args.tokens for e in n if e != "Ir"}
            print(f"decode_bench callgrind: {config} ({'calling thread' if separate == 'yes' else 'all threads'}): "
                  f"{per_token:,.0f} instructions per token", flush=True)
    base = rows["none"]["calling"]
    floor_added = rows["floor"]["calling"] - base if "floor" in rows else None
    print(f"\ninstructions per token, calling thread (callgrind; torch {__import__('torch').__version__}, "
          f"{'quick model' if args.quick else '16 layers, width 1024'}, {args.device}):")
    print(f"{'configuration':24} {'per token':>12} {'added':>12} {'/ floor':>8} {'other threads':>14}")
    for c, r in rows.items():
        added = r["calling"] - base
        other = f"{r['all'] - r['calling']:+14,.0f}" if "all" in r else " " * 14
        ratio = f"{added / floor_added:8.2f}" if floor_added else "       -"
        print(f"{c:24} {r['calling']:12,.0f} {added:+12,.0f} {ratio} {other}")
    if args.cache_sim:
        print_cache_misses(rows)
    if args.json:
        args.json.write_text(json.dumps({"callgrind": rows, "tokens": args.tokens}, indent=1))


def print_cache_misses(rows):
    """Cache misses per token on the calling thread, added over `none` (valgrind's simulation of this host's first-
    level and last-level caches): whether a configuration's data and code evict more than its instructions say."""
    keys = [("I1mr", "I1 misses"), ("D1mr", "D1 read misses"), ("D1mw", "D1 write misses"),
            ("ILmr", "LL instr misses"), ("DLmr", "LL read misses"), ("DLmw", "LL write misses")]
    base = rows["none"]["cache"]
    print("\ncache misses added per token, calling thread (callgrind --cache-sim=yes):")
    print(f"{'configuration':24}" + "".join(f"{label:>17}" for _, label in keys))
    for c, r in rows.items():
        print(f"{c:24}" + "".join(f"{r['cache'][e] - base[e]:+17,.0f}" for e, _ in keys))


def run_child(args, config):
    cmd = [sys.executable, __file__, "--child", config, "--device", args.device, "--build", str(args.build),
           "--tokens", str(args.tokens), "--pairs", str(args.pairs), "--warmup", str(args.warmup),
           "--main-configs", ",".join(args.main_configs), "--main-lingprobe", args.main_lingprobe,
           "--workload", args.workload] + (["--quick"] if args.quick else [])
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINGPROBE_") and k != "LD_PRELOAD"}
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if p.returncode != 0:
        raise SystemExit(f"decode_bench child {config} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--build", type=pathlib.Path, default=ROOT / "build")
    ap.add_argument("--reps", type=int, default=3, help="processes per group")
    ap.add_argument("--tokens", type=int, default=32, help="tokens per block")
    ap.add_argument("--pairs", type=int, default=8, help="pairs of blocks per configuration (main), blocks (others)")
    ap.add_argument("--warmup", type=int, default=128, help="tokens before measuring: one request (positions 0-127), "
                    "so that every signature of the loop has been seen once (first sightings are not steady state)")
    ap.add_argument("--quick", action="store_true", help="a 2-layer model of width 256, 1 rep, few pairs")
    ap.add_argument("--workload", choices=["own", "hf-llama"], default="own",
                    help="own: the project's decoder, one token per step; hf-llama: transformers' "
                         "LlamaForCausalLM.generate(), 48 new tokens per step (needs transformers)")
    ap.add_argument("--main-configs", default=",".join(MAIN_CONFIGS))
    ap.add_argument("--main-lingprobe", default="lingprobe",
                    choices=[c for c in CONFIGS if c.startswith("lingprobe") and c != "lingprobe-off"],
                    help="the lingprobe configuration the interleaved group's 'lingprobe' row switches on and off "
                         "(its options: CONFIGS)")
    ap.add_argument("--process-configs", default="",
                    help="comma-separated, among: " + ", ".join(CONFIGS) + " (default: the mode's list)")
    ap.add_argument("--json", type=pathlib.Path)
    ap.add_argument("--child")
    ap.add_argument("--callgrind", action="store_true",
                    help="instructions per token under valgrind's callgrind, one process per configuration")
    ap.add_argument("--cache-sim", action="store_true",
                    help="with --callgrind: also valgrind's cache simulation, the added misses per token")
    ap.add_argument("--callgrind-child")
    args = ap.parse_args()
    if args.cache_sim and not args.callgrind:
        ap.error("--cache-sim simulates the caches under valgrind: give it with --callgrind")
    args.main_configs = args.main_configs.split(",")
    if args.quick:
        args.reps, args.pairs, args.tokens = 1, 3, 8
    if args.child:
        args.config = args.child
        return child(args)
    if args.callgrind_child:
        args.config = args.callgrind_child
        return callgrind_child(args)
    scratch = tempfile.TemporaryDirectory(prefix="lp-decode-")  # the children's runs and dumps, removed at exit
    os.environ[SCRATCH] = scratch.name
    if args.callgrind:
        if args.quick:
            args.warmup = 130
        return callgrind_main(args)
    procs = args.process_configs.split(",") if args.process_configs else PROCESS_DEFAULT
    runs = {"main": []} | {c: [] for c in procs}
    for rep in range(args.reps):  # the groups interleaved, so the machine's drift spreads over all of them
        for config in runs:
            runs[config].append(run_child(args, config))
            # as each process ends: a run cut short (a time limit) keeps what it measured
            print(f"decode_bench: rep {rep + 1} {config}: {json.dumps(runs[config][-1])}", flush=True)
            if args.json:
                args.json.write_text(json.dumps({"runs": runs, "partial": True}, indent=1))
    report(args, runs)


def report(args, runs):
    med = statistics.median
    main = runs["main"]
    none_ms = med(r["paired"]["none"]["off_ms"] for r in main)
    what = ("HF LlamaForCausalLM.generate(), " + ("quick model" if args.quick else "12 layers, width 1024")
            if args.workload == "hf-llama" else "quick model" if args.quick else "16 layers, width 1024")
    print(f"decode_bench: device {args.device}, {what}, "
          f"{args.reps} process(es) per group, {args.pairs} pairs of {args.tokens} tokens; the 'lingprobe' row: "
          f"{CONFIGS[args.main_lingprobe][2]}")
    per = {k: med(r["per_token"][k] for r in main) for k in main[0]["per_token"]}
    toggle_ns = med(r["toggle_ns"] for r in main)
    print(f"per token: {per['calls_seen']:.0f} top-level calls, {per['nested_seen']:.0f} nested calls reaching "
          f"lingprobe, {per['nested_suppressed']:.0f} top-level calls with nested calls switched off; "
          f"one off/on pair of at::enableRecordFunction {toggle_ns:.0f} ns; signatures first seen in the paired "
          f"blocks: {max(r.get('new_signatures_in_pairs', 0) for r in main)} (at most, per process)")
    added = {n: med(r["paired"][n]["added_ms"] for r in main) for n in args.main_configs}
    spread = {n: (min(r["paired"][n]["added_ms"] for r in main), max(r["paired"][n]["added_ms"] for r in main))
              for n in args.main_configs}
    print("\ninterleaved in one process (median of paired differences; min-max over processes):")
    print(f"{'configuration':18} {'ms/token':>9} {'added':>9} {'added %':>8} {'/ floor':>8}   min..max added")
    for n in args.main_configs:
        ratio = added[n] / added["floor"] if added.get("floor") else float("nan")
        print(f"{n:18} {none_ms + added[n]:9.3f} {added[n]:+9.3f} {100 * added[n] / none_ms:+7.1f}% {ratio:8.2f}   "
              f"{spread[n][0]:+.3f}..{spread[n][1]:+.3f}")
    toggles_ms = per["nested_suppressed"] * toggle_ns / 1e6
    breakdown = {}
    if "floor-toplevel" in added and "floor" in added:
        top_floor = added["floor-toplevel"] - per["calls_seen"] * toggle_ns / 1e6
        breakdown = {"top-level floor": top_floor, "nested floor avoided": added["floor"] - top_floor,
                     "toggles (lingprobe's suppressed calls x pair cost)": toggles_ms}
        if "lingprobe" in added:
            breakdown["lingprobe's own work (lingprobe - floor-toplevel)"] = added["lingprobe"] - added["floor-toplevel"]
        print("\nper token breakdown (ms):")
        for k, v in breakdown.items():
            print(f"  {k:52} {v:+.3f}")
    never = runs.get("lingprobe-never")
    if never:
        nested_per_top = med(r["stats"]["nested_seen"] / r["stats"]["calls_seen"] for r in never)
        print(f"without suppression (lingprobe-never): {nested_per_top:.2f} nested calls per top-level call, "
              f"{nested_per_top * per['calls_seen']:.0f} per token")
    procs = {c: [r["ms_per_token"] for r in rs] for c, rs in runs.items() if c != "main"}
    if procs:
        base = med(procs["none"]) if "none" in procs else none_ms
        floor_added = med(procs["floor"]) - base if "floor" in procs else None
        print("\none configuration per process (process-per-configuration, not paired: median ms/token over "
              "processes; min-max):")
        for c, ms in procs.items():
            a = med(ms) - base
            ratio = f"{a / floor_added:8.2f}" if floor_added else "       -"
            print(f"{c:24} {med(ms):9.3f} {a:+9.3f} {100 * a / base:+7.1f}% {ratio}   {min(ms):.3f}..{max(ms):.3f}   "
                  f"{CONFIGS[c][2]}")
    if any(r.get("dropped") for r in main):
        print("WARNING: lingprobe dropped records in a main process: the run is void")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "per_token": per, "toggle_ns": toggle_ns, "added_ms": added,
                                         "none_ms": none_ms, "breakdown": breakdown}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
