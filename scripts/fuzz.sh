#!/usr/bin/env bash
# libFuzzer targets of fuzz/ (issue 15), built with clang, ASan and UBSan into
# build-fuzz/ (or $LINGPROBE_FUZZ_BUILD_DIR), then:
#   1. every file of fuzz/regressions/<target>/ (inputs that once crashed) run once;
#   2. each target fuzzed for SECONDS (default $LINGPROBE_FUZZ_SECONDS or 20) from
#      its seed corpus fuzz/corpus/<name>/ (copied: the repository is not written).
# Exit status non-zero on any crash, leak, UBSan report or timeout; the input
# is kept in build-fuzz/artifacts/. Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LINGPROBE_FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${1:-${LINGPROBE_FUZZ_SECONDS:-20}}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(fuzz_metadata_reader fuzz_snapshot_reader fuzz_parsers)
cxx=$(command -v clang++-14 || command -v clang++ || true)
cc=$(command -v clang-14 || command -v clang || true)
[ -n "$cxx" ] || { echo "fuzz: clang++ not found (scripts/install-deps.sh installs clang-14)"; exit 1; }
flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" -DLINGPROBE_WITH_TORCH=OFF -DLINGPROBE_BUILD_TESTS=OFF \
  -DLINGPROBE_FUZZ=ON >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$build/artifacts"
status=0
# What a target leaves in /tmp (its run directories must go at its exit): listed before, compared after.
temporaries() { find /tmp -maxdepth 1 -name 'lingprobe-fuzz-*' 2>/dev/null | sort; }
for t in "${targets[@]}"; do
  before=$(temporaries)
  name=${t#fuzz_}
  if [ -d "$root/fuzz/regressions/$name" ] && [ -n "$(ls -A "$root/fuzz/regressions/$name")" ]; then
    "$build/fuzz/$t" -runs=1 "$root/fuzz/regressions/$name"/* >"$build/$t.regressions.log" 2>&1 \
      || { echo "fuzz: $t fails on a regression input:"; tail -30 "$build/$t.regressions.log"; status=1; }
  fi
  work="$build/corpus/$name"
  mkdir -p "$work"
  cp -n "$root/fuzz/corpus/$name"/* "$work/" 2>/dev/null || true
  start=$(date +%s)
  if "$build/fuzz/$t" "$work" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -artifact_prefix="$build/artifacts/$t-" -print_final_stats=1 >"$build/$t.log" 2>&1; then
    execs=$(grep -m1 "stat::number_of_executed_units" "$build/$t.log" | awk '{print $2}')
    echo "fuzz: $t: ${seconds} s, ${execs:-?} inputs, corpus $(ls "$work" | wc -l) files, no finding"
  else
    echo "fuzz: $t: FINDING after $(( $(date +%s) - start )) s (input in $build/artifacts/):"
    grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$build/$t.log" | head -10
    status=1
  fi
  left=$(comm -13 <(echo "$before") <(temporaries))
  if [ -n "$left" ]; then
    echo "fuzz: $t left temporary files behind (remove them at exit): $(echo $left)"
    status=1
  fi
done
exit $status
