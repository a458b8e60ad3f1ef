#!/usr/bin/env bash
# Run HERE (the development machine): downloads the Debian packages the GPU
# machine lacks (nothing can be installed there) into .deps/debs, which the
# device tool carries (carry: [".deps"]) and scripts/gpu-check.sh unpacks.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$root/.deps/debs"
cd "$root/.deps/debs"
apt-get download libspdlog-dev libfmt-dev libsimdjson-dev libsimdjson14 libssl-dev libssl3 catch2 >/dev/null
ls -1 "$root/.deps/debs"
# The seeds (golden test vectors) live beside the checkout, which does not travel.
rm -rf "$root/.deps/seeds" && cp -r "$root/../shared/seeds" "$root/.deps/seeds"
