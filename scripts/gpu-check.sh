#!/usr/bin/env bash
# Run THERE (the GPU machine, through the device tool, carrying .deps from
# scripts/fetch-gpu-deps.sh): builds lingprobe against that machine's torch,
# runs the test suite (GPU and CPU tiers) and the GPU workloads, and writes
# results under $OUT.
#   scripts/gpu-check.sh build|pythonbuild|test|pytest FILE.py...|reference N|bench N|cpubench N|validate RUN N|replayprofile RUN
#                        |decodebench N|suppresscheck N|diff RUN_A RUN_B ...
#   (steps in order; default: build test)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$root/gpu-out}
mkdir -p "$OUT"
deps=$root/.deps/root
build=$root/build-gpu
py=python3
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # the device README requires it

# The carried .deps replaces the folder on every call: unpack again each time
# (the build's RPATH points into it).
unpack_deps() {
  mkdir -p "$deps"
  for f in "$root"/.deps/debs/*.deb; do dpkg -x "$f" "$deps"; done
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

step_build() {
  local torch_prefix
  torch_prefix=$($py -c 'import torch;print(torch.utils.cmake_prefix_path)')
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    $py -c 'import torch,sys;print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
    cmake --version | head -1; nvcc --version | tail -1; } 2>&1 | tee "$OUT/machine.txt"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix;$deps/usr/lib/x86_64-linux-gnu/cmake;$deps/usr" \
    -DOPENSSL_ROOT_DIR="$deps/usr" -DOPENSSL_INCLUDE_DIR="$deps/usr/include" \
    -DLINGPROBE_SEEDS_DIR="$root/.deps/seeds" >"$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; return 1; }
  grep -E "^-- lingprobe" "$OUT/configure.log"
  local t0=$SECONDS targets=()
  # GPU_BUILD_TARGETS: only what the later steps run (the Python tiers need the libraries and tools, not the unit tests)
  for t in ${GPU_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
  cmake --build "$build" -j "$(nproc)" "${targets[@]}" >"$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -30; return 1; }
  echo "build: ok ($((SECONDS - t0)) s)"
}

# The README's build against the Python environment's torch (scripts/build-python-torch.sh), as a user runs it, with
# only the Debian packages this machine lacks (carried in .deps) added to its CMake search path; into $build, so that
# later steps test what it built.
step_pythonbuild() {
  local t0=$SECONDS
  LINGPROBE_BUILD_DIR=$build PYTHON=$py LINGPROBE_PREFIX_PATH="$deps/usr/lib/x86_64-linux-gnu/cmake;$deps/usr" \
    "$root/scripts/build-python-torch.sh" -DOPENSSL_ROOT_DIR="$deps/usr" -DOPENSSL_INCLUDE_DIR="$deps/usr/include" \
    -DLINGPROBE_SEEDS_DIR="$root/.deps/seeds" 2>&1 | tee "$OUT/build-python-torch.txt"
  local rc=${PIPESTATUS[0]}
  echo "pythonbuild: rc $rc ($((SECONDS - t0)) s)"
  return "$rc"
}

step_test() {
  (cd "$build" && ctest --output-on-failure --timeout 900) >"$OUT/ctest.log" 2>&1
  local rc=$?
  tail -15 "$OUT/ctest.log"
  return $rc
}

# Chosen Python test files (tests/python/NAME.py), with ctest's environment; PYTEST_K selects tests by keyword
# (the corpus in halves: PYTEST_K="llama or nn_transformer" ... pytest test_third_party_gpu.py; its runs across
# devices and processes: pytest test_third_party_gpu_processes.py).
step_pytest() {
  local files=() f select=()
  for f in "$@"; do files+=("$root/tests/python/$f"); done
  [ -n "${PYTEST_K:-}" ] && select=(-k "$PYTEST_K" --durations=0)
  LPTEST_BUILD_DIR=$build LPTEST_SEEDS_DIR=$root/.deps/seeds PYTHONPATH=$root/python_shim LPTEST_KEEP=$OUT \
    $py -m pytest -q -s -p no:cacheprovider "${select[@]}" "${files[@]}" 2>&1 | tee "$OUT/pytest.log" | tail -40
  return "${PIPESTATUS[0]}"
}

# Full-shape stand-in on CUDA, REFERENCE_WORLD ranks (default 4) sharing the one GPU over gloo; $1 chunks.
# REFERENCE_MODES picks among: none (no lingprobe), seed (seed selection), all. REFERENCE_SIZE: the video's H*W
# (default 704*1280); REFERENCE_TAG names the run gpu-runs/MODE-TAG (two sizes side by side, for `diff`).
# Each run is also traced (lingprobe trace: $OUT/trace-MODE[-TAG].json.gz).
step_reference() {
  local chunks=${1:-20} modes=${REFERENCE_MODES:-none seed all} world=${REFERENCE_WORLD:-4} mode size=()
  [ -n "${REFERENCE_SIZE:-}" ] && size=(--size "$REFERENCE_SIZE")
  for mode in $modes; do
    local name=$mode${REFERENCE_TAG:+-$REFERENCE_TAG}
    local out=$root/gpu-runs/$name t0=$SECONDS
    local flags=(--select seed)
    [ "$mode" = all ] && flags=(--select all)
    [ "$mode" = all-nosnap ] && flags=(--select all --no-snapshots)
    [ "$mode" = none ] && flags+=(--no-lingprobe)
    [ "$mode" = seed-nosnap ] && flags+=(--no-snapshots)
    [ "$mode" = seed-profile ] && flags+=(--profile)
    [ "$mode" = seed-profile-nosnap ] && flags+=(--profile --no-snapshots)
    [ "$mode" = all-profile ] && flags=(--select all --profile)
    [ "$mode" = all-profile-nosnap ] && flags=(--select all --profile --no-snapshots)  # every signature profiled
    LINGPROBE_CLI=$build/lingprobe LINGPROBE_PYTHON=$py MASTER_PORT=$((29600 + RANDOM % 100)) \
      "$root/scripts/reference-run.sh" --device cuda --scale full --chunks "$chunks" --world-size "$world" --out "$out" \
      "${size[@]}" "${flags[@]}" >"$OUT/reference-$name.log" 2>&1
    echo "reference $name (world $world): rc=$? $((SECONDS - t0)) s $(grep -h 'reference-run:' "$OUT/reference-$name.log" | tail -1)"
    [ -f "$out/reports/capability_report.json" ] && cp "$out/reports/capability_report.json" "$OUT/capability-$name.json"
    cat "$out"/timing.rank*.json > "$OUT/timing-$name.jsonl" 2>/dev/null
    [ -d "$out/reports" ] && cp "$out/reports/coverage_audit.json" "$OUT/audit-$name.json" && cp "$out/reports/summary.md" "$OUT/summary-$name.md"
    [ -d "$out/metadata" ] && "$build/lingprobe" trace "$out" -o "$OUT/trace-$name.json" 2>&1 | head -1 && gzip -f "$OUT/trace-$name.json"
    if [ -d "$out/replays" ]; then
      du -sb "$out/snapshots" | tee -a "$OUT/reference-$mode.log"
    fi
    # the run without its snapshots (GBs): metadata, profiles, replays, reports, for `lingprobe report` here and there
    tar czf "$OUT/run-$name.tgz" --exclude=snapshots --exclude=claims --exclude="*.pt" -C "$root/gpu-runs" "$name" 2>/dev/null
  done
}

# The DiT alone at full shapes in one process (world size 1: the whole 10,560-token
# sequence), forward wall time per configuration, interleaved $1 times: the overhead
# claim of docs/PERFORMANCE.md. BENCH_MODES picks among: none (no lingprobe), off
# (loaded, LINGPROBE_ENABLE=0), all (every top-level call, call records), nested
# (nested calls too), nvtx (every top-level call, stages from NVTX ranges through the
# injection library instead of the stage map; the summary lines show the stages),
# profidle (every top-level call with LINGPROBE_PROFILE=1 and nothing to sample:
# the counters' idle cost).
step_bench() {
  local reps=${1:-3} dir=$root/gpu-runs/bench modes=${BENCH_MODES:-none off all nested nvtx}
  rm -rf "$dir"; mkdir -p "$dir"
  for i in $(seq "$reps"); do
    for mode in $modes; do
      local run=("$build/lingprobe" run -o "$dir/$mode-$i") env=() mark=stage-map pre=()
      local stage_map=(--stage-map 'dit=WanModel;vae=WanVAE|Decoder3d;output=lingbot_standin.utils:save_video')
      case "$mode" in
        off) env=(LINGPROBE_ENABLE=0); pre=("${run[@]}" "${stage_map[@]}" --) ;;
        all) pre=("${run[@]}" "${stage_map[@]}" --) ;;
        nested) env=(LINGPROBE_NESTED=1); pre=("${run[@]}" "${stage_map[@]}" --) ;;
        nvtx) mark=nvtx; pre=("${run[@]}" --nvtx-map 'dit=^dit;vae=^vae;output=^output' --) ;;
        profidle) env=(LINGPROBE_PROFILE=1 LINGPROBE_SAMPLE_OPS=lingprobe::nothing); pre=("${run[@]}" "${stage_map[@]}" --) ;;
      esac
      env "${env[@]}" PYTHONPATH="$root/examples" "${pre[@]}" $py -m lingbot_standin.generate --device cuda \
        --chunks 2 --steps 4 --mark "$mark" --report "$dir/$mode-$i" >"$dir/$mode-$i.log" 2>&1
      echo "bench $mode rep $i: $(cat "$dir/$mode-$i.rank0.json" 2>/dev/null || tail -3 "$dir/$mode-$i.log")"
    done
  done | tee "$OUT/bench.txt"
  # Each lingprobe run's own account: calls, signatures, stages, drops.
  for run in "$dir"/*-1; do
    [ -d "$run" ] || continue
    $py "$root/scripts/metadata-summary.py" "$run" 2>&1 | sed "s|^|$(basename "$run"): |"
  done | tee -a "$OUT/bench.txt"
}

# The reference run $1's snapshots replayed again under lingprobe's own counter windows (replay --profile),
# each set beside the run's profile; `validate` then sets those beside ncu too.
step_replayprofile() {
  local t0=$SECONDS
  "$build/lingprobe" replay --quiet --profile "$root/gpu-runs/$1" >"$OUT/replay-profile-$1.txt" 2>&1
  local rc=$?
  grep -E "^profile|FAILED|replay profiles" "$OUT/replay-profile-$1.txt" | tail -60
  echo "replayprofile $1: rc=$rc $((SECONDS - t0)) s"
  return $rc
}

# Inline counters against ncu on a reference run's profiles: $1 the mode's run, $2 how many picked at
# random (seed 13) among its passed profiles: signatures nobody chose (VALIDATE_MIN_US: only among those
# with a kernel at least that long, the target's kernels).
step_validate() {
  local t0=$SECONDS min=()
  [ -n "${VALIDATE_MIN_US:-}" ] && min=(--min-kernel-us "$VALIDATE_MIN_US")
  local pick=(--random "${2:-10}" --seed 13 "${min[@]}")
  [ -n "${VALIDATE_SIGNATURES:-}" ] && pick=(--signatures "$VALIDATE_SIGNATURES")  # named: the rest of a cut run
  LINGPROBE_PYTHON=$py "$build/lingprobe" validate "$root/gpu-runs/$1" "${pick[@]}" --runs 2 \
    --json "$OUT/validate-$1.json" >"$OUT/validate-$1.txt" 2>&1
  local rc=$?
  grep -E "^validate:|OUT|MISS|ERROR" "$OUT/validate-$1.txt" | tail -60
  echo "validate $1: rc=$rc $((SECONDS - t0)) s"
  return $rc
}

# The launch-bound decode loop (issue 14), $1 processes per group: docs/PERFORMANCE.md.
# DECODE_WORKLOAD=hf-llama: transformers' Llama generate() loop (48 tokens a block; process rows
# DECODE_PROCESS_CONFIGS, default none,floor,lingprobe), into decode-bench-hf-llama.{txt,json}.
step_decodebench() {
  local extra=() name=decode-bench${DECODE_WORKLOAD:+-$DECODE_WORKLOAD}
  [ -n "${DECODE_WORKLOAD:-}" ] && extra=(--workload "$DECODE_WORKLOAD" --tokens 48 --warmup 96
                                          --process-configs "${DECODE_PROCESS_CONFIGS:-none,floor,lingprobe}")
  $py "$root/bench/decode_bench.py" --device cuda --reps "${1:-3}" --pairs "${DECODE_PAIRS:-8}" --build "$build" \
    "${extra[@]}" --json "$OUT/$name.json" 2>&1 | tee "$OUT/$name.txt"
  return "${PIPESTATUS[0]}"
}

# Nested-call suppression leaves the top-level results unchanged (issue 14): the CUDA stand-in at full shapes,
# REFERENCE_WORLD ranks, $1 chunks, every op recorded, with SUPPRESS_NESTED=never and auto; scripts/compare-runs.py.
step_suppresscheck() {
  local suppress  # not `mode`: step_reference's loop variable (bash scopes dynamically)
  for suppress in never auto; do
    LINGPROBE_SUPPRESS_NESTED=$suppress REFERENCE_MODES=all-nosnap step_reference "$1"
    rm -rf "$root/gpu-runs/all-$suppress"; mv "$root/gpu-runs/all-nosnap" "$root/gpu-runs/all-$suppress"
  done
  $py "$root/scripts/compare-runs.py" "$root/gpu-runs/all-never" "$root/gpu-runs/all-auto" | tee "$OUT/suppress-check.txt"
  return "${PIPESTATUS[0]}"
}

# Two runs under gpu-runs/ compared (lingprobe diff): $OUT/diff-A-B.md and .json.
step_diff() {
  "$build/lingprobe" diff "$root/gpu-runs/$1" "$root/gpu-runs/$2" -o "$OUT/diff-$1-$2.md" &&
    "$build/lingprobe" diff --json "$root/gpu-runs/$1" "$root/gpu-runs/$2" -o "$OUT/diff-$1-$2.json" &&
    head -14 "$OUT/diff-$1-$2.md"
}

# The CPU overhead benchmark on this machine's torch (wall clock only: no valgrind here).
step_cpubench() {
  $py "$root/bench/cpu_bench.py" --no-callgrind --reps "${1:-3}" --build "$build" --json "$OUT/cpu-bench.json" \
    2>&1 | tee "$OUT/cpu-bench.txt"
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(build test)
unpack_deps
rc=0
# A step's optional count (the next word, when it is a number), else $1: into $arg.
number_arg() {
  arg=$1
  if [ ${#steps[@]} -gt 0 ] && [[ ${steps[0]} =~ ^[0-9]+$ ]]; then arg=${steps[0]}; steps=("${steps[@]:1}"); fi
}
while [ ${#steps[@]} -gt 0 ]; do
  s=${steps[0]}; steps=("${steps[@]:1}")
  case "$s" in
    build) step_build || rc=1 ;;
    pythonbuild) step_pythonbuild || rc=1 ;;
    test) step_test || rc=1 ;;
    bench) number_arg 3; step_bench "$arg" || rc=1 ;;
    cpubench) number_arg 3; step_cpubench "$arg" || rc=1 ;;
    pytest) files=(); while [ ${#steps[@]} -gt 0 ] && [[ ${steps[0]} == *.py* ]]; do files+=("${steps[0]}"); steps=("${steps[@]:1}"); done
            step_pytest "${files[@]}" || rc=1 ;;
    validate) m=${steps[0]}; n=${steps[1]}; steps=("${steps[@]:2}"); step_validate "$m" "$n" || rc=1 ;;
    replayprofile) m=${steps[0]}; steps=("${steps[@]:1}"); step_replayprofile "$m" || rc=1 ;;
    diff) a=${steps[0]}; b=${steps[1]}; steps=("${steps[@]:2}"); step_diff "$a" "$b" || rc=1 ;;
    decodebench) number_arg 3; step_decodebench "$arg" || rc=1 ;;
    suppresscheck) number_arg 1; step_suppresscheck "$arg" || rc=1 ;;
    reference) number_arg 20; step_reference "$arg" || rc=1 ;;
    *) echo "gpu-check: unknown step $s"; rc=2 ;;
  esac
done
exit $rc
