#!/usr/bin/env bash
# Configures and builds Granary into build/ (binaries in build/bin). Extra arguments go to cmake.
# Environment: GRANARY_BUILD_DIR (build), GRANARY_JOBS (nproc), GRANARY_BUILD_TARGETS (all).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${GRANARY_BUILD_DIR:-build}"
JOBS="${GRANARY_JOBS:-$(nproc)}"
# ccache (installed by setup.sh) keeps compiled objects between builds; paths under the
# checkout are hashed relative to it, so another clone of the same sources reuses them.
LAUNCHER=()
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
  LAUNCHER=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
if [[ ! -f "$BUILD_DIR/build.ninja" ]] || (( $# > 0 )); then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${LAUNCHER[@]}" "$@" \
    >/dev/null
fi
# GRANARY_BUILD_TARGETS (space-separated) builds only those, as the demo does; default: all.
read -r -a TARGETS <<<"${GRANARY_BUILD_TARGETS:-}"
if (( ${#TARGETS[@]} > 0 )); then
  cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}"
else
  cmake --build "$BUILD_DIR" -j "$JOBS"
fi
