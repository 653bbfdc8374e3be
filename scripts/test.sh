#!/usr/bin/env bash
# README command 2: install, build, and run the whole test suite through ctest:
#   1. the normal build (warnings are errors) and every test: unit, integration, chaos, fuzz,
#      gpu (skips without a device);
#   2. the master, quota-ledger and transport tests, plus the store integration test with a
#      master, nodes and clients all built with GRANARY_SANITIZER=thread into build-tsan (skip it
#      with GRANARY_TSAN=0);
#   3. the same suite as 1, minus fuzz (which has its own sanitizers) and chaos, built with
#      GRANARY_SANITIZER=address,undefined into build-asan (skip it with GRANARY_ASAN=0).
# The sanitizer trees build at -O1 with line tables only (-g1): half the compile time of -O2 -g,
# still with file:line in every report.
# Extra arguments go to every ctest run (for example: -L unit, or -R store).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
GRANARY_WERROR_FLAG="-DGRANARY_WERROR=${GRANARY_WERROR:-ON}"
bash scripts/build.sh "$GRANARY_WERROR_FLAG"
BUILD_DIR="${GRANARY_BUILD_DIR:-build}"
JOBS="${GRANARY_JOBS:-$(nproc)}"
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 900 "$@")

SANITIZER_CMAKE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRANARY_WITH_CUDA=OFF
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
# UCX's malloc and mmap hooks do not mix with the sanitizers' allocators.
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none

if [[ "${GRANARY_TSAN:-1}" == "1" ]]; then
  echo "== TSan build and the master, ledger and transport tests (build-tsan)"
  TSAN_TESTS=(transport_ep_info_test transport_rpc_rma_test master_offset_allocator_test
    master_service_test master_timer_wheel_test master_eviction_test master_quota_ledger_test
    master_quota_service_test master_tenant_manager_test master_admin_api_test
    integration_store_test)
  cmake -S . -B build-tsan "${SANITIZER_CMAKE[@]}" -DGRANARY_SANITIZER=thread >/dev/null
  cmake --build build-tsan -j "$JOBS" --target granary_master granary_node "${TSAN_TESTS[@]}"
  # Every test above, by exact name; a TSan report fails the test (exit 66).
  TSAN_REGEX="^($(IFS='|'; echo "${TSAN_TESTS[*]}"))\$"
  (cd build-tsan &&
    TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/../tests/tsan.supp" \
    ctest --output-on-failure --timeout 900 -R "$TSAN_REGEX" "$@")
fi

if [[ "${GRANARY_ASAN:-1}" == "1" ]]; then
  echo "== ASan+UBSan build and suite (build-asan)"
  cmake -S . -B build-asan "${SANITIZER_CMAKE[@]}" -DGRANARY_SANITIZER=address,undefined >/dev/null
  cmake --build build-asan -j "$JOBS"
  # Leaks inside UCX's own context are not ours to report (the fuzzers run with leak detection
  # on).
  (cd build-asan &&
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure --timeout 900 -LE "fuzz|chaos|gpu" "$@")
fi
