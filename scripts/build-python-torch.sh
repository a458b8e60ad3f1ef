#!/usr/bin/env bash
# Builds lingprobe against the torch of a Python environment (a pip-installed CUDA torch, a conda or venv one)
# instead of Debian's, into build-torch/ (or $LINGPROBE_BUILD_DIR), and says what it found:
#
#     scripts/build-python-torch.sh                 # python3 on PATH
#     PYTHON=/opt/venv/bin/python scripts/build-python-torch.sh
#
# It takes torch's CMake files from torch.utils.cmake_prefix_path, matches torch's C++ ABI
# (torch._C._GLIBCXX_USE_CXX11_ABI) for every translation unit, and finds CUPTI and NVTX through the CUDA toolkit
# (nvcc on PATH, or CUDAToolkit_ROOT / CUDA_HOME). LINGPROBE_PREFIX_PATH (';'-separated) adds CMake search
# prefixes after torch's (packages installed outside the system's paths); extra arguments go to cmake's configure step.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LINGPROBE_BUILD_DIR:-$root/build-torch}
py=${PYTHON:-python3}

fail() { echo "build-python-torch: $*" >&2; exit 1; }

probe='import sys, torch
print(sys.version.split()[0]); print(torch.__version__); print(torch.version.cuda or "none")
print(torch.utils.cmake_prefix_path); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))'
facts=$("$py" -c "$probe" 2>&1) || fail "$py cannot import torch: ${facts##*$'\n'} (set PYTHON to the environment's python)"
{ read -r py_version; read -r torch_version; read -r torch_cuda; read -r torch_prefix; read -r abi; } <<<"$facts"

cuda_root=${CUDAToolkit_ROOT:-${CUDA_HOME:-}}
if [ -z "$cuda_root" ] && command -v nvcc >/dev/null; then cuda_root=$(dirname "$(dirname "$(command -v nvcc)")"); fi
cuda_args=()
[ -n "$cuda_root" ] && cuda_args=(-DCUDAToolkit_ROOT="$cuda_root")

mkdir -p "$build"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix${LINGPROBE_PREFIX_PATH:+;$LINGPROBE_PREFIX_PATH}" \
  -DCMAKE_CXX_FLAGS="-D_GLIBCXX_USE_CXX11_ABI=$abi" "${cuda_args[@]}" "$@" >"$build/configure.log" 2>&1 \
  || { tail -30 "$build/configure.log"; fail "configure failed (whole log: $build/configure.log)"; }
line=$(grep -E "^-- lingprobe [0-9]" "$build/configure.log" || true)
cmake --build "$build" -j "$(nproc)" >"$build/build.log" 2>&1 \
  || { grep -E "error" "$build/build.log" | head -20; fail "build failed (whole log: $build/build.log)"; }

yes_no() { case "$line" in *"$1=ON"*) echo yes ;; *) echo "no ($2)" ;; esac; }
echo "lingprobe built against python $py_version, torch $torch_version (CUDA $torch_cuda), C++11 ABI $abi"
echo "  CUPTI counters: $(yes_no cupti "no CUPTI headers: install the CUDA toolkit's, or point CUDAToolkit_ROOT at one")"
echo "  NVTX3 ranges:   $(yes_no nvtx3 "no NVTX3 headers in the CUDA toolkit")"
echo "  preload:        LD_PRELOAD=$build/liblingprobe_preload.so $py your_job.py"
