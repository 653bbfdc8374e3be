#!/usr/bin/env bash
# README command 2: install, build, and run the whole test suite through ctest.
# Extra arguments go to ctest (for example: -L unit, or -R store).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
GRANARY_WERROR_FLAG="-DGRANARY_WERROR=${GRANARY_WERROR:-ON}"
bash scripts/build.sh "$GRANARY_WERROR_FLAG"
BUILD_DIR="${GRANARY_BUILD_DIR:-build}"
cd "$BUILD_DIR"
ctest --output-on-failure --timeout 900 "$@"
