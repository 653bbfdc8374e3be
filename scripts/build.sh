#!/usr/bin/env bash
# Configures and builds Granary into build/ (binaries in build/bin). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${GRANARY_BUILD_DIR:-build}"
JOBS="${GRANARY_JOBS:-$(nproc)}"
if [[ ! -f "$BUILD_DIR/build.ninja" ]] || (( $# > 0 )); then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
fi
cmake --build "$BUILD_DIR" -j "$JOBS"
