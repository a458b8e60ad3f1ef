#!/usr/bin/env python3
"""Whether two runs recorded the same top-level calls: the multiset of
(rank, signature sha256, calls) from each rank's last counts record, and the
signature_json bytes of every signature, compared exactly (issue 14: nested-call
suppression must leave them unchanged). Exit 0 when equal, 1 with the
differences, 2 on bad input.

    scripts/compare-runs.py RUN_A RUN_B"""
import collections
import glob
import json
import os
import sys


def load(run):
    calls, texts = collections.Counter(), {}
    files = sorted(glob.glob(os.path.join(run, "metadata", "*.jsonl")))
    if not files:
        sys.exit(f"compare-runs: {run} has no metadata/*.jsonl")
    for path in files:
        header, sigs, last = None, {}, None
        with open(path, "rb") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue  # a truncated last line
                if r.get("kind") == "header":
                    header = r
                elif r.get("kind") == "signature":
                    sigs[r["id"]] = r
                    texts[r["sha256"]] = r["signature_json"]
                elif r.get("kind") == "counts":
                    last = r
        rank = header.get("rank") if header else None
        for i, n in (last or {}).get("calls", {}).items():
            calls[(rank, sigs[int(i)]["sha256"], n)] += 1
    return calls, texts


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    (ca, ta), (cb, tb) = load(sys.argv[1]), load(sys.argv[2])
    problems = []
    for k in sorted((ca - cb) + (cb - ca), key=str):
        problems.append(f"(rank, sha256, calls) {k}: {ca[k]} in A, {cb[k]} in B")
    for sha in sorted(set(ta) | set(tb)):
        if ta.get(sha) != tb.get(sha):
            problems.append(f"signature {sha[:16]}: {'differs' if sha in ta and sha in tb else 'in one run only'}")
    ranks = sorted({r for r, _, _ in ca}, key=str)
    print(f"compare-runs: {len(ta)} vs {len(tb)} signatures, {sum(n for (_, _, n) in ca)} vs "
          f"{sum(n for (_, _, n) in cb)} calls, ranks {ranks}: " + ("identical" if not problems else
                                                                    f"{len(problems)} difference(s)"))
    for p in problems[:50]:
        print("  " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
