#!/usr/bin/env bash
# Runs the reference workload (the LingBot-World TP1SP4 stand-in) as ranks
# under lingprobe, then audits the run. Leaves a complete run directory.
#
#   scripts/reference-run.sh --device {meta,cpu,cuda} --out DIR [--scale small|full] [--chunks N]
#                            [--world-size N] [--select seed|all] [--mark stage-map|nvtx|api] [--no-lingprobe]
#                            [--snapshots|--no-snapshots] [--profile] [--size H*W]
#
# On real-tensor devices (cpu, cuda) it samples by default: each input key once per launch is
# snapshotted (LINGPROBE_SNAPSHOTS=1), then `lingprobe replay` reruns every snapshot and checks it.
#
# DIR is the run directory itself: lingprobe writes under its parent with the
# launch id basename(DIR) (its layout OUT/{run_id}), replacing an earlier run there.
#
# --select seed records the seed's per-stage selection (dit: aten::linear, vae: aten::conv3d,
# output: aten::to); all records every top-level call. --scale small is a reduced width and
# resolution for real-tensor CPU runs; full is 704x1280 with the real model widths. --size H*W
# overrides the scale's video size (full: 704*1280; 480*832 is the seeds' one-rank size).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
device=meta out="" scale=full size="" chunks="" world=4 select=seed mark=stage-map with_lingprobe=1 blocks="" snapshots=auto profile=0
while [ $# -gt 0 ]; do
  case "$1" in
    --device) device=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --scale) scale=$2; shift 2 ;;
    --chunks) chunks=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --blocks) blocks=$2; shift 2 ;;
    --world-size) world=$2; shift 2 ;;
    --select) select=$2; shift 2 ;;
    --mark) mark=$2; shift 2 ;;
    --no-lingprobe) with_lingprobe=0; shift ;;
    --snapshots) snapshots=1; shift ;;
    --no-snapshots) snapshots=0; shift ;;
    --profile) profile=1; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "reference-run: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "reference-run: --out DIR is required" >&2; exit 2; }
[ "$snapshots" = auto ] && { [ "$device" = meta ] && snapshots=0 || snapshots=1; }
case "$scale" in
  full) args=(--size "${size:-704*1280}" --chunks "${chunks:-20}" --blocks "${blocks:-40}") ;;
  small) args=(--size "${size:-64*128}" --chunks "${chunks:-4}" --blocks "${blocks:-2}" --width-scale 40) ;;
  *) echo "reference-run: --scale is small or full" >&2; exit 2 ;;
esac
case "$select" in
  seed) ops='dit:aten::linear;vae:aten::conv3d;output:aten::to' ;;
  all) ops='' ;;
  *) echo "reference-run: --select is seed or all" >&2; exit 2 ;;
esac
# The Python that has torch: Debian's /usr/bin/python3 here, the PATH's python3 on the GPU machine.
py=${LINGPROBE_PYTHON:-}
if [ -z "$py" ]; then
  for candidate in /usr/bin/python3 python3; do
    if "$candidate" -c 'import torch' 2>/dev/null; then py=$candidate; break; fi
  done
fi
[ -n "$py" ] || { echo "reference-run: no python3 with torch found (set LINGPROBE_PYTHON)" >&2; exit 2; }
cli=${LINGPROBE_CLI:-$root/build/lingprobe}
mkdir -p "$out"
out=$(cd "$out" && pwd)
rm -rf "$out/metadata" "$out/reports" "$out/snapshots" "$out/profiles" "$out/replays" "$out/claims" "$out"/timing.rank*.json  # never a mix
export PYTHONPATH="$root/examples${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
[ "$mark" = nvtx ] && [ "$device" != cuda ] && export LINGPROBE_NVTX_HELPER=${LINGPROBE_NVTX_HELPER:-$root/build/tests/libnvtx_helper.so}
# torch 1.13's torchrun on Python 3.11 cannot parse its own default --redirects=0: pass 2 (stderr).
job=("$py" -m torch.distributed.run --nproc_per_node="$world" --master_port="${MASTER_PORT:-29561}" --redirects=2 --tee=2
     -m lingbot_standin.generate --device "$device" --mark "$mark" --report "$out/timing" "${args[@]}")
start=$(date +%s.%N)
if [ "$with_lingprobe" = 1 ]; then
  LINGPROBE_RUN_ID=$(basename "$out") "$cli" run -o "$(dirname "$out")" --ops "$ops" --set SNAPSHOTS="$snapshots" --set PROFILE="$profile" \
    --stage-map 'dit=WanModel;vae=WanVAE|Decoder3d;output=lingbot_standin.utils:save_video' \
    --nvtx-map 'dit=^dit;vae=^vae;output=^output' -- "${job[@]}"
else
  "${job[@]}"
fi
end=$(date +%s.%N)
echo "reference-run: device=$device scale=$scale select=$select lingprobe=$with_lingprobe wall $(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.1f", b-a}') s"
if [ "$with_lingprobe" = 1 ]; then
  if [ "$snapshots" = 1 ]; then
    "$cli" replay --quiet "$out" || echo "reference-run: replay found inexact or failed snapshots (see above)"
  fi
  "$cli" audit --quiet "$out"
  if [ "$profile" = 1 ]; then "$cli" report --quiet "$out"; fi
fi
