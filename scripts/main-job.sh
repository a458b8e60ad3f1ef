#!/usr/bin/env bash
# The main job: install, build, run a real 4-rank torch job under lingprobe
# with the seed's per-stage selection, audit it, and print where the reports
# are and the headline numbers. Usage: scripts/main-job.sh [OUT_DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/lingprobe-out}
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh" >/dev/null
rm -rf "$out"
start=$(date +%s)
OMP_NUM_THREADS=1 "$root/build/lingprobe" run -o "$out" \
  --ops 'dit:aten::linear;vae:aten::conv3d;output:aten::to' -- \
  /usr/bin/python3 -m torch.distributed.run --nproc_per_node=4 --master_port=29541 --redirects=2 --tee=2 \
  "$root/examples/mini_pipeline.py" --chunks 4
echo "main job: $(( $(date +%s) - start )) s under lingprobe"
"$root/build/lingprobe" audit --quiet "$out"
echo
echo "reports: $out/reports/coverage_audit.json, $out/reports/summary.md"
sed -n '3,8p' "$out/reports/summary.md"
