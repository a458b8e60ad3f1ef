#!/usr/bin/env python3
"""One line per lingprobe metadata file of a run directory (or of the
launches under an output root): calls counted, call records written,
signatures, signatures per stage, drops.

    scripts/metadata-summary.py RUN_DIR|OUT"""
import collections
import glob
import json
import os
import sys


def summarize(path):
    signatures, stages, records, last = 0, collections.Counter(), 0, None
    with open(path, "rb") as f:
        for line in f:
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a truncated last line
            kind = r.get("kind")
            if kind == "signature":
                signatures += 1
                stages[json.loads(r["signature_json"]).get("stage", "?")] += 1
            elif kind == "call":
                records += 1
            elif kind == "counts":
                last = r
    calls = sum(last["calls"].values()) if last else 0
    dropped = last.get("dropped", {}) if last else {}
    return (f"{os.path.basename(path)}: {calls} calls, {records} call records, {signatures} signatures "
            f"({', '.join(f'{s} {n}' for s, n in sorted(stages.items()))}), dropped {json.dumps(dropped)}, "
            f"final {bool(last and last.get('final'))}")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    files = sorted(glob.glob(os.path.join(root, "metadata", "*.jsonl")) +
                   [f for f in glob.glob(os.path.join(root, "*", "metadata", "*.jsonl"))
                    if not os.path.islink(os.path.dirname(os.path.dirname(f)))])
    if not files:
        sys.exit(f"no lingprobe metadata (*.jsonl) under {sys.argv[1]}")
    for path in files:
        print(summarize(path))


if __name__ == "__main__":
    main()
