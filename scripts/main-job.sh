#!/usr/bin/env bash
# The main job: install, build, run the reference workload (the LingBot-World
# TP1SP4 stand-in, 4 ranks) under lingprobe with the seed's per-stage
# selection, audit it, and print where the reports are and the headline
# numbers. Usage: scripts/main-job.sh [RUN_DIR]  (default lingprobe-out/reference)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/lingprobe-out/reference}
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" >/dev/null
# The LingBot-World TP1SP4 stand-in at full shapes (704x1280, 4 ranks, 20 chunks) on the meta
# device: real operator signatures, no tensor data, minutes on 2 cores.
"$root/scripts/reference-run.sh" --device meta --scale full --select seed --out "$out"
# The same pipeline at a reduced width with real CPU tensors: every signature snapshotted once
# across the 4 ranks, each snapshot replayed in isolation and checked (meta tensors have no data).
cpu_out="$(dirname "$out")/$(basename "$out")-cpu"
"$root/scripts/reference-run.sh" --device cpu --scale small --select seed --out "$cpu_out"
echo
# The headline: the count line, then the first stage's operator table (the lines up to the blank one after it).
headline() { awk 'NR >= 3 { print } /^\| operator/ { table = 1 } table && /^$/ { exit }' "$1"; }
echo "reports: $out/reports/coverage_audit.json, $out/reports/summary.md"
headline "$out/reports/summary.md"
echo
echo "real-tensor run: $cpu_out/reports/summary.md (snapshots in $cpu_out/snapshots, replays in $cpu_out/replays)"
headline "$cpu_out/reports/summary.md"
grep -A2 "^## Snapshots" "$cpu_out/reports/summary.md" | tail -1
