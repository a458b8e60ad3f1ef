#!/usr/bin/env bash
# The whole test suite: installs dependencies, builds, runs every tier
# (Catch2 unit tests, the C ABI test, ctypes/CLI/integration tests) via ctest,
# then the libFuzzer targets (regression inputs, and LINGPROBE_FUZZ_SECONDS,
# default 20, of fuzzing each), then the sanitizer tiers: the torch-free unit tier under ASan+UBSan and TSan,
# the torch tiers under ASan+UBSan and the recorder under TSan (scripts/sanitize.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
cd "${LINGPROBE_BUILD_DIR:-$root/build}"
ctest --output-on-failure --timeout 1500
"$root/scripts/fuzz.sh" "${LINGPROBE_FUZZ_SECONDS:-20}"
"$root/scripts/sanitize.sh" asan tsan asan-torch tsan-torch
