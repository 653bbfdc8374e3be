#!/usr/bin/env bash
# Formats every C++ and CUDA source git knows of or would add (tracked, and untracked but not
# ignored: a new file is checked before its first commit) with clang-format (.clang-format:
# Google, 100 columns). With --check, changes nothing and fails, listing the files, when any
# would change.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t FILES < <(git ls-files --cached --others --exclude-standard \
  '*.h' '*.cc' '*.cpp' '*.cu' '*.cuh' | sort -u | while read -r f; do [[ -f "$f" ]] && echo "$f"; done)
if [[ "${1:-}" == "--check" ]]; then
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  if ! clang-format --dry-run --Werror "${FILES[@]}" 2>"$log"; then
    mapfile -t bad < <(sed -n 's/^\([^: ]*\):[0-9]*:[0-9]*: error:.*/\1/p' "$log" | sort -u)
    echo "format: ${#bad[@]} file(s) differ from clang-format's output (run scripts/format.sh):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
  fi
  echo "format: ${#FILES[@]} files clean"
else
  clang-format -i "${FILES[@]}"
fi
