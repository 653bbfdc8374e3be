#!/usr/bin/env bash
# README command 2: install, build, and run the whole test suite through ctest:
#   1. the normal build (warnings are errors) and every test: unit, integration, chaos, fuzz,
#      gpu (skips without a device);
#   2. the same suite, minus fuzz (which has its own sanitizers) and chaos, built with
#      GRANARY_SANITIZER=address,undefined into build-asan (skip it with GRANARY_ASAN=0).
# Extra arguments go to both ctest runs (for example: -L unit, or -R store).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
GRANARY_WERROR_FLAG="-DGRANARY_WERROR=${GRANARY_WERROR:-ON}"
bash scripts/build.sh "$GRANARY_WERROR_FLAG"
BUILD_DIR="${GRANARY_BUILD_DIR:-build}"
JOBS="${GRANARY_JOBS:-$(nproc)}"
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 900 "$@")

if [[ "${GRANARY_ASAN:-1}" == "1" ]]; then
  echo "== ASan+UBSan build and suite (build-asan)"
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRANARY_WITH_CUDA=OFF \
    -DGRANARY_SANITIZER=address,undefined >/dev/null
  cmake --build build-asan -j "$JOBS"
  # UCX's malloc and mmap hooks do not mix with ASan's allocator; leaks inside UCX's own
  # context are not ours to report (the fuzzers run with leak detection on).
  (cd build-asan &&
    UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none \
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure --timeout 900 -LE "fuzz|chaos|gpu" "$@")
fi
