"""Prints a run directory's headline numbers from its metadata JSONL files
(until `lingprobe audit` exists): files, ranks, signatures and calls per stage."""
import collections
import json
import pathlib
import sys


def main(run_dir):
    files = sorted(pathlib.Path(run_dir, "metadata").glob("*.jsonl"))
    per_stage = collections.defaultdict(lambda: [set(), 0])
    ranks, dropped = set(), collections.Counter()
    for f in files:
        sigs, counts = {}, {}
        for line in f.read_bytes().split(b"\n"):
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r["kind"] == "header":
                ranks.add(r["rank"])
            elif r["kind"] == "signature":
                sigs[r["id"]] = (r["sha256"], json.loads(r["signature_json"]))
            elif r["kind"] == "counts":
                counts = r["calls"]
                dropped = collections.Counter({f"{w}/{k}": n for w, rs in r["dropped"].items() for k, n in rs.items()})
        for sid, n in counts.items():
            sha, sig = sigs[int(sid)]
            per_stage[sig["stage"]][0].add(sha)
            per_stage[sig["stage"]][1] += n
    print(f"{len(files)} metadata file(s) from rank(s) {sorted(ranks)} in {run_dir}/metadata")
    for stage_name in sorted(per_stage):
        shas, calls = per_stage[stage_name]
        print(f"  stage {stage_name:10s} {len(shas):4d} distinct signatures {calls:10d} calls")
    print("  dropped: " + (", ".join(f"{k}={v}" for k, v in dropped.items()) or "nothing"))
    return 0 if files else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "lingprobe-out"))
