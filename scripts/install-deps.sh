#!/usr/bin/env bash
# Installs lingprobe's build and test dependencies from Debian packages
# (SPEC section 2). Idempotent: installs only what is missing, and skips
# apt entirely when everything is present.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config ccache
  libtorch-dev python3-torch          # LibTorch 1.13 (CPU) and the torch of /usr/bin/python3
  python3-torchvision                 # third-party models built in the process under test (tests/python)
  libspdlog-dev libfmt-dev            # logging
  libsimdjson-dev                     # streaming JSON reader (the audit)
  catch2 libssl-dev                   # Catch2 v2 unit tests, libcrypto SHA-256
  python3-pytest                      # ctypes, CLI and integration tests
  valgrind                            # callgrind instruction counts (bench/cpu_bench.py, its CI test)
  clang-14 libclang-rt-14-dev         # libFuzzer, ASan and UBSan (scripts/fuzz.sh)
  clang-format                        # the C/C++ layout (.clang-format, scripts/check-format.sh)
  librsvg2-bin                        # rsvg-convert: the roofline rendered to PNG in a test
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
