#!/usr/bin/env bash
# The torch-free unit tier (unit_tests: format, sink, writer, record buffers,
# claims, config, sampler) under clang-14's sanitizers:
#   asan  AddressSanitizer + UndefinedBehaviorSanitizer  (build-asan/)
#   tsan  ThreadSanitizer: the writer thread against producers, record buffers,
#         claims                                          (build-tsan/)
# Usage: scripts/sanitize.sh [asan|tsan]...   (default: both). Non-zero on any report.
# The [cupti] cases are left out: CUPTI dlopens libnvperf_host.so with
# RTLD_DEEPBIND, which the sanitizer runtimes refuse (google/sanitizers#611).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(asan tsan)
cxx=$(command -v clang++-14 || command -v clang++ || true)
cc=$(command -v clang-14 || command -v clang || true)
[ -n "$cxx" ] || { echo "sanitize: clang++ not found (scripts/install-deps.sh installs clang-14)"; exit 1; }
for kind in "${kinds[@]}"; do
  case $kind in
    asan) flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" ;;
    tsan) flags="-fsanitize=thread -fno-omit-frame-pointer" ;;
    *) echo "sanitize: unknown kind '$kind' (asan, tsan)"; exit 2 ;;
  esac
  build=$root/build-$kind
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$flags" \
    -DLINGPROBE_WITH_TORCH=OFF >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
  cmake --build "$build" -j "$(nproc)" --target unit_tests >"$build/build.log" 2>&1 || { tail -40 "$build/build.log"; exit 1; }
  start=$(date +%s)
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 "$build/tests/unit_tests" "~[cupti]" >"$build/unit_tests.log" 2>&1 \
    || { echo "sanitize: unit_tests under $kind failed:"; grep -E "ERROR|WARNING|runtime error|FAILED" -A12 "$build/unit_tests.log" | head -60; exit 1; }
  echo "sanitize: unit_tests under $kind: $(tail -n 2 "$build/unit_tests.log" | head -1) ($(( $(date +%s) - start )) s)"
done
