"""Inline counters against Nsight Compute, kernel by kernel.

    lingprobe validate RUN_DIR [--top N] [--signatures H16,...] [--random N [--seed S] [--min-kernel-us US]]
                       [--runs 2] [--json OUT]
    (the same as python3 -m lingprobe.validate with the shim on PYTHONPATH)

For each chosen profiled signature of the run (profiles/{stem}/ with its
replay's replay_operator.py, from `lingprobe replay`), runs

    ncu --clock-control none --cache-control none --csv --page raw --print-units base
        --print-kernel-base mangled --nvtx --nvtx-include lingprobe_replay/ --metrics <the set>
        python3 replay_operator.py --nvtx

--runs times (ncu's own run-to-run spread), plus once with --cache-control all,
matches kernels by mangled name and launch order, and prints per kernel and
metric: inline, ncu (median of the runs), relative difference, ncu's spread,
and whether it is within the target: max(3%, 2x ncu's spread) on time and
throughput percentages, 3% on DRAM bytes, for kernels longer than 20 us.
Kernels that differ between the inline profile and the replay count as misses.
Where `lingprobe replay --profile` ran, the replay's own inline profile (the
same call replayed in isolation, measured by lingprobe) is set beside ncu as
well: it tells a difference of the measurement from one of the call's history.
--random picks N more profiles at random (seeded) among the passed ones not
chosen otherwise: signatures nobody picked; with --min-kernel-us, only among
those with a kernel at least that long (20: the target's kernels). Profiles
whose call launched no kernel are never chosen. Exit status 0 when at least 90% of
the pairs are within target, 1 otherwise, 2 on bad input."""
import argparse
import csv
import io
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys

TIME = "gpu__time_duration.sum"


def ncu_run(script, metrics, cache):
    cmd = ["ncu", "--clock-control", "none", "--cache-control", cache, "--csv", "--page", "raw", "--print-units", "base",
           "--print-kernel-base", "mangled", "--nvtx", "--nvtx-include", "lingprobe_replay/", "--metrics",
           ",".join(metrics), sys.executable, str(script), "--nvtx"]
    # The replay runs bare: no lingprobe preloaded, and not the shim's sitecustomize (`lingprobe validate` puts
    # the shim on PYTHONPATH to find this module); the rest of the user's PYTHONPATH (their torch) stays.
    shim = str(pathlib.Path(__file__).resolve().parents[1])
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    kept = [e for e in env.get("PYTHONPATH", "").split(os.pathsep) if e and os.path.realpath(e) != shim]
    env["PYTHONPATH"] = os.pathsep.join(kept)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"ncu failed ({p.returncode}): {p.stderr[-2000:]}")
    lines = p.stdout.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if start is None:
        raise RuntimeError("ncu printed no kernel table:\n" + p.stdout[-2000:])
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    head, units, data = rows[0], rows[1], rows[2:]
    out = []
    for r in data:
        rec = dict(zip(head, r))
        vals = {}
        for m in metrics:
            if m in rec and rec[m] not in ("", "n/a"):
                vals[m] = float(rec[m].replace(",", ""))
        out.append({"mangled": rec.get("Kernel Name", ""), "values": vals})
    return out, dict(zip(head, units))


def base_value(metric, kernel_metric):
    """The inline kernels.json value (seed units) back in ncu's base units."""
    v, unit = kernel_metric["value"], kernel_metric["unit"]
    return v * {"us": 1e3, "Mbyte": 1e6, "Tbyte/s": 1e12}.get(unit, 1.0)


def tolerance(metric, spread):
    if "bytes" in metric and "per_second" not in metric:
        return 0.03
    return max(0.03, 2 * spread)


def validate_profile(profile_dir, replay_dir, runs):
    kernels = json.loads((profile_dir / "kernels.json").read_text())
    identity = json.loads((profile_dir / "identity.json").read_text())
    metrics = identity.get("metrics") or [m for m in kernels[0]["metrics"] if not m.startswith("launch__")]
    script = replay_dir / "replay_operator.py"
    # `lingprobe replay --profile` measured the replayed call inline too (another process, another history)
    replay_inline = None
    rp = replay_dir / "replay_profile.json"
    rk_path = pathlib.Path(json.loads(rp.read_text())["replay_profile"]) / "kernels.json" if rp.exists() else None
    if rk_path is not None and rk_path.exists():  # read before the ncu runs: a moved run directory has none
        rk = json.loads(rk_path.read_text())
        if [k["mangled_name"] for k in rk] == [k["mangled_name"] for k in kernels]:
            replay_inline = rk
    ncu = [ncu_run(script, metrics, "none")[0] for _ in range(runs)]
    ncu_all = ncu_run(script, metrics, "all")[0]
    table, misses = [], []
    if [k["mangled_name"] for k in kernels] != [k["mangled"] for k in ncu[0]]:
        misses.append({"inline": [k["mangled_name"] for k in kernels], "ncu": [k["mangled"] for k in ncu[0]]})
    for i, k in enumerate(kernels):
        if i >= len(ncu[0]) or ncu[0][i]["mangled"] != k["mangled_name"]:
            continue
        for m in metrics:
            seen = [run[i]["values"].get(m) for run in ncu if i < len(run)]
            seen = [x for x in seen if x is not None]
            if not seen or m not in k["metrics"]:
                continue
            ref = statistics.median(seen)
            inline = base_value(m, k["metrics"][m])
            spread = (max(seen) - min(seen)) / ref if ref else 0.0
            rel = (inline - ref) / ref if ref else 0.0
            same = i < len(ncu_all) and ncu_all[i]["mangled"] == k["mangled_name"]
            all_cache = ncu_all[i]["values"].get(m) if same else None
            long = base_value(TIME, k["metrics"][TIME]) > 20e3 if TIME in k["metrics"] else True
            row = {"kernel": k["name"][:80], "mangled": k["mangled_name"], "index": i, "metric": m,
                   "inline": inline, "ncu": ref, "ncu_cache_all": all_cache, "relative": rel,
                   "ncu_spread": spread, "tolerance": tolerance(m, spread), "long_kernel": long,
                   "within": abs(rel) <= tolerance(m, spread)}
            if replay_inline is not None and m in replay_inline[i]["metrics"] and ref:
                ri = base_value(m, replay_inline[i]["metrics"][m])
                row.update(replay_inline=ri, replay_relative=(ri - ref) / ref)
                row["replay_within"] = abs(row["replay_relative"]) <= row["tolerance"]
            table.append(row)
    return {"profile": profile_dir.name, "signature": identity.get("signature_sha256", ""), "rows": table,
            "misses": misses}


def main():
    if any(a == "--against-trace" or a.startswith("--against-trace=") for a in sys.argv[1:]):
        from lingprobe import against_trace  # the real execution's kernel time instead of ncu on replays
        return against_trace.main(sys.argv[1:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir", type=pathlib.Path)
    ap.add_argument("--top", type=int, default=0, help="the N profiles with the most kernel time")
    ap.add_argument("--signatures", default="", help="comma-separated signature hash prefixes")
    ap.add_argument("--random", type=int, default=0, help="N more profiles at random among the rest")
    ap.add_argument("--seed", type=int, default=0, help="seed of --random")
    ap.add_argument("--min-kernel-us", type=float, default=0.0,
                    help="--random picks only profiles with a kernel at least this long (us)")
    ap.add_argument("--runs", type=int, default=2, help="ncu runs per profile (its own spread)")
    ap.add_argument("--json", type=pathlib.Path)
    a = ap.parse_args()
    if not a.run_dir.exists():
        from lingprobe._errors import missing_run_directory
        print(f"lingprobe validate: error: {missing_run_directory(a.run_dir)}", file=sys.stderr)
        return 2
    if not (a.run_dir / "profiles").is_dir():
        print(f"lingprobe validate: {a.run_dir} has no profiles/: no counter window ran (they need "
              f"LINGPROBE_PROFILE=1 and ops on CUDA tensors; `lingprobe audit` shows the dropped profiles' reasons)",
              file=sys.stderr)
        return 2
    profiles = sorted(p for p in (a.run_dir / "profiles").iterdir() if (p / "kernels.json").exists())
    passed, longest, unreplayed = [], {}, []
    for p in profiles:
        ident = json.loads((p / "identity.json").read_text())
        if ident.get("status") != "passed":
            continue
        times = [k["metrics"].get(TIME, {}).get("value", 0) for k in json.loads((p / "kernels.json").read_text())]
        if not (a.run_dir / "replays" / p.name / "replay_operator.py").exists():
            unreplayed.append(p.name)  # no snapshot (the budget ran out) or no replay run: nothing for ncu
            continue
        if sum(times) > 0:  # a call that launched no kernel (a view, a metadata op) has nothing to compare
            passed.append((sum(times), p, ident.get("signature_sha256", "")))
            longest[p] = max(times)
    passed.sort(key=lambda x: (-x[0], x[1].name))
    if unreplayed:
        print(f"validate: {len(unreplayed)} passed profile(s) have no replay and cannot be chosen "
              f"(run `lingprobe replay {a.run_dir}`; a snapshot refused by its budget has none)")
    chosen = []
    if a.signatures:
        for h in a.signatures.split(","):
            hits = [x for x in passed if x[2].startswith(h) and x not in chosen]
            if not hits:
                print(f"validate: --signatures {h}: no passed profile with kernels has that hash prefix", file=sys.stderr)
            chosen += hits
    if a.top:
        chosen += [x for x in passed if x not in chosen][:a.top]
    if not a.signatures and not a.top and not a.random:
        chosen = list(passed)
    if a.random:
        rest = [x for x in passed if x not in chosen and longest[x[1]] >= a.min_kernel_us]
        picked = random.Random(a.seed).sample(rest, min(a.random, len(rest)))
        chosen += sorted(picked, key=lambda x: (-x[0], x[1].name))
        among = f" among {len(rest)} with a kernel >= {a.min_kernel_us:g} us" if a.min_kernel_us else f" among {len(rest)}"
        print(f"validate: --random {a.random} --seed {a.seed} picked{among}: " + ", ".join(x[1].name for x in picked))
    chosen = [(t, p) for t, p, _ in chosen]
    results = []
    for _, p in chosen:
        replay = a.run_dir / "replays" / p.name
        if not (replay / "replay_operator.py").exists():
            print(f"{p.name}: no replay (run `lingprobe replay {a.run_dir}` first)")
            continue
        try:
            results.append(validate_profile(p, replay, a.runs))
        except Exception as e:  # one profile's failure is reported, the others still run
            results.append({"profile": p.name, "error": str(e), "rows": [], "misses": []})
        if a.json:  # after each profile: a run cut short keeps what it measured
            a.json.write_text(json.dumps(summary(results, partial=True), indent=1))
    doc = summary(results, partial=False)
    for res in results:
        print(f"== {res['profile']}" + (f": ERROR {res['error']}" if res.get("error") else ""))
        for r in res["rows"]:
            beside = (f"; replay inline {r['replay_inline']:.5g} ({100 * r['replay_relative']:+.2f}%)"
                      if "replay_inline" in r else "")
            print(f"  {'ok ' if r['within'] else 'OUT'} k{r['index']} {r['metric'][:48]:48} inline {r['inline']:.5g} "
                  f"ncu {r['ncu']:.5g} ({100 * r['relative']:+.2f}%, spread {100 * r['ncu_spread']:.2f}%){beside}"
                  f"{'' if r['long_kernel'] else ' [<20us]'}")
        for m in res["misses"]:
            print(f"  MISS kernels differ: inline {m['inline']} vs ncu {m['ncu']}")
    pairs, ok = doc["pairs"], doc["within"]
    print("validate: |relative difference| of the pairs: " + ", ".join(f"{l} {n}" for l, n in doc["histogram"].items()))
    print(f"validate: {ok}/{pairs} (kernel, metric) pairs of kernels > 20 us within target "
          f"({100 * ok / pairs if pairs else 0:.1f}%), {doc['kernel_set_misses']} kernel-set misses; "
          f"{doc['within_against_none_or_all']}/{pairs} within against ncu with --cache-control none or all")
    if doc["replay_inline_pairs"]:
        print(f"validate: the replays' own inline profiles (lingprobe replay --profile) against ncu: "
              f"{doc['replay_inline_within']}/{doc['replay_inline_pairs']} pairs within target")
    if a.json:
        a.json.write_text(json.dumps(doc, indent=1))
    return 0 if pairs and ok >= 0.9 * pairs else 1


def summary(results, partial):
    """The long kernels' pairs: how many are within target, the whole
    distribution of |inline - ncu| / ncu, and how many are within target
    against ncu's cold-cache run instead (--cache-control all): the cache
    state at a kernel's start differs between the live run and the replay."""
    rows = [r for res in results for r in res["rows"] if r["long_kernel"]]
    edges = [0.01, 0.03, 0.05, 0.10, 0.20]
    hist = [0] * (len(edges) + 1)
    for r in rows:
        hist[next((i for i, e in enumerate(edges) if abs(r["relative"]) <= e), len(edges))] += 1
    labels = [f"<={int(e * 100)}%" for e in edges] + [f">{int(edges[-1] * 100)}%"]

    def within_all(r):
        ref = r["ncu_cache_all"]
        return ref is not None and ref != 0 and abs(r["inline"] - ref) / ref <= r["tolerance"]

    replayed = [r for r in rows if "replay_within" in r]
    return {"results": results, "within": sum(r["within"] for r in rows), "pairs": len(rows),
            "replay_inline_pairs": len(replayed), "replay_inline_within": sum(r["replay_within"] for r in replayed),
            "within_against_none_or_all": sum(r["within"] or within_all(r) for r in rows),
            "kernel_set_misses": sum(len(r["misses"]) for r in results), "histogram": dict(zip(labels, hist)),
            "partial": partial}


if __name__ == "__main__":
    sys.exit(main())
