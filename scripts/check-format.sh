#!/usr/bin/env bash
# Fails when a tracked C or C++ file is not laid out as .clang-format says; prints the files and the command
# that fixes them. Run from anywhere.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
command -v clang-format >/dev/null || { echo "check-format: clang-format is not installed (scripts/install-deps.sh installs it)"; exit 2; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cpp' '*.hpp' '*.cu')
# One clang-format for every file (one per file took 30 s of CI): each misplaced line is reported as
# "FILE:LINE:COL: error: code should be clang-formatted"; the files are those names.
report=$(clang-format --dry-run --Werror "${files[@]}" 2>&1 >/dev/null)
status=$?
mapfile -t bad < <(printf '%s\n' "$report" | sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
if [ $status -ne 0 ] && [ ${#bad[@]} -eq 0 ]; then
  echo "check-format: clang-format failed: $(printf '%s\n' "$report" | head -3)"
  exit 2
fi
if [ ${#bad[@]} -gt 0 ]; then
  echo "check-format: ${#bad[@]} file(s) not laid out as .clang-format says: ${bad[*]}"
  echo "check-format: fix with: clang-format -i ${bad[*]}"
  exit 1
fi
echo "check-format: ${#files[@]} C/C++ files laid out as .clang-format says"
