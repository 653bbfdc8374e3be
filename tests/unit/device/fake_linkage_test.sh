#!/bin/bash
# tests/unit/device/fake_linkage_test.sh FILE always|never [FILE always|never]...: checks that each
# binary defines the fake device backend (FakeBackend::Create, device/fake) always or never, as
# its build promises: never in libgranary.so, and in granary_node and the Python module only with
# GRANARY_DEVICE_FAKE (device/fake/CMakeLists.txt).
set -euo pipefail
(($# > 0 && $# % 2 == 0)) || { echo "usage: fake_linkage_test.sh FILE always|never..." >&2; exit 2; }
failed=0
while (($#)); do
  file=$1 want=$2
  shift 2
  [[ -f "$file" ]] || { echo "fake_linkage_test.sh: $file is not built" >&2; exit 1; }
  # Not grep -q: nm would die of SIGPIPE at the first match, and pipefail would call it a miss.
  if nm -C --defined-only "$file" | grep -E 'granary::[a-z]+::FakeBackend::Create\(' >/dev/null; then
    has=always
  else
    has=never
  fi
  case "$want" in
    always | never) ;;
    *) echo "fake_linkage_test.sh: '$want' for $file is not always or never" >&2; exit 2 ;;
  esac
  if [[ "$has" != "$want" ]]; then
    echo "FAIL: $file: the fake device backend is $([[ $has == always ]] && echo in || echo not in) it; expected $want" >&2
    failed=1
  else
    echo "ok: $file: fake $want"
  fi
done
exit "$failed"
