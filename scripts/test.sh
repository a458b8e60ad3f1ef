#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, checks the includes against the layer table
# (lib/layers.txt) and the C/C++ layout (.clang-format), runs every tier through ctest (the C++ and C tiers, then the
# Python tier, one ctest entry per file, two files at a time), then the libFuzzer targets (regression inputs, and
# LINGPROBE_FUZZ_SECONDS, default 20, of fuzzing each), then the sanitizer tiers: the torch-free unit tier under
# ASan+UBSan and TSan, the torch tiers under ASan+UBSan and the recorder under TSan (scripts/sanitize.sh).
# A failing step does not stop the later ones (their verdicts are worth having); the script fails if any did. Each
# step's wall time is printed at the end, so that a slow step shows.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LINGPROBE_BUILD_DIR:-$root/build}

step_names=() step_seconds=() step_results=()
step() {  # step NAME COMMAND...: runs it, records its wall time and verdict
  local name=$1 t0 rc
  shift
  echo "== test.sh: $name"
  t0=$(date +%s)
  "$@"
  rc=$?
  step_names+=("$name") step_seconds+=($(( $(date +%s) - t0 ))) step_results+=("$([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)")")
  return $rc
}
report() {
  echo
  echo "== test.sh: wall time per step"
  local i total=0
  for i in "${!step_names[@]}"; do
    printf '  %-34s %6d s  %s\n' "${step_names[$i]}" "${step_seconds[$i]}" "${step_results[$i]}"
    total=$(( total + step_seconds[i] ))
  done
  printf '  %-34s %6d s\n' "total" "$total"
}
trap report EXIT

step "install dependencies" "$root/scripts/install-deps.sh" || exit 1
step "build" "$root/scripts/build.sh" || exit 1
failed=0
step "layer check (lib/layers.txt, ARCHITECTURE.md)" python3 "$root/scripts/check-includes.py" || failed=1
step "format check (.clang-format)" "$root/scripts/check-format.sh" || failed=1
step "size check (files <= 500 lines, functions <= 80)" python3 "$root/scripts/check-sizes.py" || failed=1
step "ctest: C++ and C tiers" env -C "$build" ctest --output-on-failure --no-tests=error --timeout 1500 -LE python \
  || failed=1
# Two files at a time (LINGPROBE_TEST_JOBS): most are torch processes that wait on their children; the files whose
# assertions read the clock run alone (RUN_SERIAL in tests/CMakeLists.txt).
step "ctest: Python tier" env -C "$build" ctest --output-on-failure --no-tests=error --timeout 1500 -L python \
  --parallel "${LINGPROBE_TEST_JOBS:-2}" || failed=1
step "fuzz" "$root/scripts/fuzz.sh" "${LINGPROBE_FUZZ_SECONDS:-20}" || failed=1
step "sanitizers: asan tsan" "$root/scripts/sanitize.sh" asan tsan || failed=1
step "sanitizers: asan-torch" "$root/scripts/sanitize.sh" asan-torch || failed=1
step "sanitizers: tsan-torch" "$root/scripts/sanitize.sh" tsan-torch || failed=1
exit $failed
