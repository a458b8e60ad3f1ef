#!/usr/bin/env bash
# lingprobe under clang-14's sanitizers (docs/RELIABILITY.md "Sanitizers"):
#   asan        the torch-free unit tier (unit_tests: format, sink, writer, record buffers, claims, config,
#               sampler, audit) under AddressSanitizer + UndefinedBehaviorSanitizer  (in build-asan-torch/)
#   tsan        the same under ThreadSanitizer: the writer thread against producers  (in build-tsan-torch/)
#   asan-torch  the torch tiers under ASan+UBSan (build-asan-torch/): torch_unit_tests, recorder_threads
#               (threads, stages, sampling, start/stop, fork, finalize under load, through the C ABI), and
#               the integration job tests/integration/sanitized_torch_job.py in Python under LD_PRELOAD
#               (the shared ASan runtime preloaded first), its run then audited by the sanitized CLI
#   tsan-torch  the recorder under TSan in a torch process: recorder_threads (build-tsan-torch/). TSan's
#               runtime cannot be preloaded into an uninstrumented Python (it crashes at start), so the
#               executable carries it and liblingprobe leaves its symbols to it
# Usage: scripts/sanitize.sh [asan|tsan|asan-torch|tsan-torch]...   (default: all four). Non-zero on any report.
# libtorch itself is not instrumented; no suppression was needed (a race TSan reported inside torch's lazy
# default generator came from the test calling at::manual_seed on several threads: it seeds once now).
# The [cupti] cases are left out: CUPTI dlopens libnvperf_host.so with
# RTLD_DEEPBIND, which the sanitizer runtimes refuse (google/sanitizers#611).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(asan tsan asan-torch tsan-torch)
cxx=$(command -v clang++-14 || command -v clang++ || true)
cc=$(command -v clang-14 || command -v clang || true)
[ -n "$cxx" ] || { echo "sanitize: clang++ not found (scripts/install-deps.sh installs clang-14)"; exit 1; }
asan_flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
tsan_flags="-fsanitize=thread -fno-omit-frame-pointer"
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

configure() {  # BUILD_DIR CFLAGS EXE_LDFLAGS SHARED_LDFLAGS CMAKE_ARGS...
  local build=$1 flags=$2 exe=$3 shared=$4
  shift 4
  mkdir -p "$build"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_C_FLAGS="$flags" -DCMAKE_EXE_LINKER_FLAGS="$exe" \
    -DCMAKE_SHARED_LINKER_FLAGS="$shared" "$@" >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
}

build() {  # BUILD_DIR TARGET...
  local dir=$1
  shift
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$dir" -j "$(nproc)" "${targets[@]}" >"$dir/build.log" 2>&1 || { tail -40 "$dir/build.log"; exit 1; }
}

# The torch tiers' trees, shared with the torch-free tiers (asan, tsan) so that the libraries both link are
# compiled once per sanitizer: each sets b (the tree); the ASan one also rt and rtpath (its shared runtime).
configure_asan_torch() {
  b=$root/build-asan-torch
  rt=$("$cc" -print-file-name=libclang_rt.asan-x86_64.so)
  [ -f "$rt" ] || { echo "sanitize: clang's shared ASan runtime not found (install-deps installs libclang-rt-14-dev)"; exit 1; }
  configure "$b" "$asan_flags" "$asan_flags -shared-libsan" "-fsanitize=address,undefined -shared-libsan"
  rtpath="LD_LIBRARY_PATH=$(dirname "$rt")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # the executables' shared runtime
}

configure_tsan_torch() {
  b=$root/build-tsan-torch
  configure "$b" "$tsan_flags" "$tsan_flags" "$tsan_flags" -DLINGPROBE_RUNTIME_FROM_EXECUTABLE=ON
}

run() {  # KIND LOG COMMAND...: fails on a non-zero exit, a sanitizer's report, or a hang (15 min)
  local kind=$1 log=$2 start=$SECONDS
  shift 2
  if ! timeout 900 "$@" >"$log" 2>&1; then
    echo "sanitize: $(basename "$log" .log) under $kind failed (exit status, or 900 s without ending):"
    { grep -E "ERROR|WARNING|runtime error|FAILED|Error" -A12 "$log" | head -60; tail -5 "$log"; } || true
    exit 1
  fi
  if grep -qE "ERROR: AddressSanitizer|runtime error:|WARNING: ThreadSanitizer" "$log"; then
    echo "sanitize: a report under $kind:"
    { grep -E "ERROR|WARNING|runtime error" -A12 "$log" | head -60; } || true
    exit 1
  fi
  echo "sanitize: $kind, $(basename "$log" .log): $(grep -v '^[[:space:]]*$' "$log" | tail -n 1 | cut -c1-150) ($((SECONDS - start)) s)"
}

for kind in "${kinds[@]}"; do
  case $kind in
    asan)  # the torch-free tier built in the torch tiers' tree: its libraries compiled once under each sanitizer
      configure_asan_torch
      build "$b" unit_tests
      run "$kind" "$b/unit_tests.log" env "$rtpath" "$b/tests/unit_tests" "~[cupti]" ;;
    tsan)
      configure_tsan_torch
      build "$b" unit_tests
      run "$kind" "$b/unit_tests.log" "$b/tests/unit_tests" "~[cupti]" ;;
    asan-torch)
      configure_asan_torch
      build "$b" torch_unit_tests recorder_threads lingprobe lingprobe_preload lingprobe_cli
      run "$kind" "$b/torch_unit_tests.log" env "$rtpath" "$b/tests/torch_unit_tests"
      rm -rf "$b/sanitized-out"
      run "$kind" "$b/recorder_threads.log" env "$rtpath" "$b/tests/recorder_threads" "$b/sanitized-out/threads" 3
      # Python leaks by design at exit: leak checking off for the interpreter.
      run "$kind" "$b/python_job.log" env LD_PRELOAD="$rt:$b/liblingprobe_preload.so" \
        ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:handle_segv=0 LINGPROBE_OUT="$b/sanitized-out/python" \
        LINGPROBE_SNAPSHOTS=1 PYTHONPATH="$root/python_shim" OMP_NUM_THREADS=1 \
        "${LINGPROBE_TEST_PYTHON:-/usr/bin/python3}" "$root/tests/integration/sanitized_torch_job.py"
      [ "$(tail -n 1 "$b/python_job.log")" = ok ] || { echo "sanitize: the Python job did not end with ok:"; tail -20 "$b/python_job.log"; exit 1; }
      for out in threads python; do
        run "$kind" "$b/audit-$out.log" env "$rtpath" "$b/lingprobe" audit "$b/sanitized-out/$out/latest"
      done ;;
    tsan-torch)
      configure_tsan_torch
      build "$b" recorder_threads
      rm -rf "$b/sanitized-out"
      run "$kind" "$b/recorder_threads.log" "$b/tests/recorder_threads" "$b/sanitized-out/threads" 4 ;;
    *) echo "sanitize: unknown kind '$kind' (asan, tsan, asan-torch, tsan-torch)"; exit 2 ;;
  esac
done
