#!/bin/bash
# tests/gpu_check/dry_run.sh BUILD_DIR: bundles BUILD_DIR's binaries as for a GPU machine and runs
# the device check there with --dry-run (fake device backend, small sizes); then checks what it
# must leave behind: a report per test binary, records timed on the stream, the refusal of an
# unknown flag, a failing step's exit status.
set -euo pipefail
build=$(cd "${1:?usage: dry_run.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/../.." && pwd)
dir="$build/gpu_check_dry_run"
rm -rf "$dir"
BUILD_DIR="$build" "$src/bench/gpu_bundle.sh" --no-build "$dir/bundle"
"$dir/bundle/gpu_check.sh" --dry-run "$dir/out"
fail() {
  echo "dry_run.sh: $*" >&2
  exit 1
}
[[ -s "$dir/bundle/gpu_tests.txt" ]] || fail "no gpu tests listed"
while IFS=$'\t' read -r name seconds _; do
  [[ -s "$dir/out/tests/$name.xml" ]] || fail "no gtest XML for $name"
  ((seconds > 0 && seconds <= 150)) || fail "$name has $seconds s: the check must fit 8 minutes"
done < "$dir/bundle/gpu_tests.txt"
grep -q '"timing":"host_functions"' "$dir/out/gpu_check.json" || fail "no stream-timed record"
grep -q '"name":"check/client/gpu_tier/get_into_device/shm"' "$dir/out/gpu_check.json" ||
  fail "the client paths did not run"
# A bad command line is refused (exit 2), and a failing step fails the check.
set +e
"$dir/bundle/gpu_check.sh" --no-such-flag "$dir/bad" 2> /dev/null
(($? == 2)) || fail "an unknown flag was not refused"
[[ ! -e "$dir/--no-such-flag" && ! -e "$dir/bad" ]] || fail "an unknown flag made a folder"
GPU_CHECK_BUDGET_S=1 "$dir/bundle/gpu_check.sh" --dry-run "$dir/out_no_time" > /dev/null 2>&1
(($? == 1)) || fail "a check that ran out of time exited 0"
echo "gpu_check dry run: ok"
