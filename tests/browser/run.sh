#!/usr/bin/env bash
# The dashboard browser test (ctest `browser_dashboard`, label browser): installs the pinned
# playwright-core (package-lock.json) into tests/browser/node_modules with `npm ci` when it is
# missing or stale, then runs dashboard_test.py with Debian's python3. Debian's chromium is the
# browser (scripts/setup.sh installs it); nothing else is downloaded.
# Exit 77 (ctest: skipped) only when chromium, node or npm cannot be found or the package cannot
# be installed; the reason is printed.
set -euo pipefail
cd "$(dirname "$0")"
skip() {
  echo "SKIPPED browser_dashboard: $*" >&2
  exit 77
}
CHROMIUM="${GRANARY_CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
[[ -x "$CHROMIUM" ]] ||
  skip "no chromium found ('${CHROMIUM}'; scripts/setup.sh installs Debian's chromium)"
command -v node >/dev/null || skip "no node found (scripts/setup.sh installs npm and nodejs)"
command -v npm >/dev/null || skip "no npm found (scripts/setup.sh installs npm)"

# One install at a time (two build trees may run their suites at once); the stamp holds the
# hash of the lock file that node_modules was installed from.
exec 9<package.json
flock 9
want="$(sha256sum package-lock.json | cut -d' ' -f1)"
if [[ "$(cat node_modules/.granary-lock-sha256 2>/dev/null)" != "$want" ]]; then
  if ! out="$(npm ci --ignore-scripts --no-audit --no-fund 2>&1)"; then
    skip "npm ci failed (is the npm registry reachable?):
$out"
  fi
  echo "$want" >node_modules/.granary-lock-sha256
fi
flock -u 9

export GRANARY_CHROMIUM="$CHROMIUM"
exec "${GRANARY_PYTHON:-/usr/bin/python3}" dashboard_test.py
