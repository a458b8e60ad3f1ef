#!/usr/bin/env bash
# Configures and builds lingprobe into build/ (or $LINGPROBE_BUILD_DIR).
# Extra arguments go to cmake's configure step.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LINGPROBE_BUILD_DIR:-$root/build}
mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >"$build/configure.log" 2>&1 \
  || { cat "$build/configure.log"; exit 1; }
grep -E "^-- lingprobe" "$build/configure.log" || true
cmake --build "$build" -j "$(nproc)"
