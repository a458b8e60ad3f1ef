"""Where an instrumentation's instructions go: the per-function difference,
per call, between two callgrind dumps kept by `cpu_bench.py --keep-dumps DIR`
(self cost, calling thread).

    /usr/bin/python3 bench/callgrind_diff.py DIR [BASE_LABEL] [LABEL] [--min N]

Defaults compare the floor with lingprobe on torch.add ('add/floor/on/a' and
'add/lingprobe/on/a', the dumps of 2n calls minus those of n calls)."""
import argparse
import glob
import re
import subprocess


def dump_for(directory, label):
    for path in glob.glob(f"{directory}/main.thread.cg.out.*"):
        with open(path) as f:
            head = f.read(4096)
        if f"Client Request: {label}\n" in head:
            return path
    raise SystemExit(f"no dump labelled {label} in {directory}")


def self_costs(path):
    out = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", "--auto=no", path],
                         capture_output=True, text=True, check=True).stdout
    costs = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)", line)
        if m and "PROGRAM TOTALS" not in line:
            costs[m.group(2)] = costs.get(m.group(2), 0) + int(m.group(1).replace(",", ""))
    return costs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir")
    ap.add_argument("base", nargs="?", default="add/floor/on/a")
    ap.add_argument("label", nargs="?", default="add/lingprobe/on/a")
    ap.add_argument("--calls", type=int, default=3000, help="n of the benchmark (2n - n calls differ by n)")
    ap.add_argument("--min", type=float, default=2.0, help="hide functions below this many instructions per call")
    args = ap.parse_args()
    per_call = {}
    for sign, label in ((-1, args.base), (1, args.label)):
        small, large = (self_costs(dump_for(args.dir, f"{label}/{k}")) for k in ("1", "2"))
        for fn in set(small) | set(large):
            per_call[fn] = per_call.get(fn, 0) + sign * (large.get(fn, 0) - small.get(fn, 0)) / args.calls
    total = sum(per_call.values())
    print(f"{args.label} minus {args.base}: {total:+.0f} instructions per call (calling thread)")
    for fn, v in sorted(per_call.items(), key=lambda kv: -abs(kv[1])):
        if abs(v) >= args.min:
            print(f"{v:+8.0f}  {fn[:160]}")


if __name__ == "__main__":
    main()
