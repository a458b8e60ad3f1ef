#!/usr/bin/env bash
# Fails when a tracked C or C++ file is not laid out as .clang-format says; prints the files and the command
# that fixes them. Run from anywhere.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
command -v clang-format >/dev/null || { echo "check-format: clang-format is not installed (scripts/install-deps.sh installs it)"; exit 2; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' '*.cu')
bad=()
for f in "${files[@]}"; do
  clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} file(s) not laid out as .clang-format says: ${bad[*]}"
  echo "check-format: fix with: clang-format -i ${bad[*]}"
  exit 1
fi
echo "check-format: ${#files[@]} C/C++ files laid out as .clang-format says"
