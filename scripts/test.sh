#!/usr/bin/env bash
# README command 2: install, build, and run the whole test suite through ctest:
#   0. the format check: every C++ and CUDA source is as clang-format (.clang-format) writes it,
#      the docs site builds (mkdocs build --strict) and no list of it renders flat;
#   1. the normal build (warnings are errors), the Python module installed for /usr/bin/python3
#      (scripts/install_python.sh), and every test: unit, integration, install, chaos, fuzz,
#      python (pytest), browser (the dashboard in headless Chromium), gpu (skips without a
#      device), upgrade (the newest release, by tag or tests/upgrade/releases, against this tree);
#   2. the tests labelled `tsan` (master, quota ledger, transport, and integration tests with a
#      master, nodes and clients: the store, restarts, the disk tier) built with clang,
#      GRANARY_SANITIZER=thread and -Wthread-safety -Werror into build-tsan, so the lock
#      annotations are checked by the compiler as well (skip it with GRANARY_TSAN=0);
#   3. the same suite as 1, minus fuzz (which has its own sanitizers), chaos, install and
#      upgrade (which would build the release again, instrumented, to learn nothing new), built
#      with GRANARY_SANITIZER=address,undefined into build-asan (skip it with GRANARY_ASAN=0).
# The sanitizer trees build at -O1 with line tables only (-g1): half the compile time of -O2 -g,
# still with file:line in every report.
# Extra arguments go to every ctest run (for example: -L unit, or -R store).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

echo "== format check (clang-format --dry-run)"
bash scripts/format.sh --check
# The documentation site (mkdocs.yml): a broken link or a page missing from the tree fails. Fast,
# so it runs before the build (ctest runs it again as docs_site).
echo "== docs site (mkdocs build --strict)"
PYTHONWARNINGS=ignore::DeprecationWarning mkdocs build --strict --quiet -d "${GRANARY_BUILD_DIR:-build}/site"
# Nested lists at 4 spaces, as Python-Markdown wants them (ctest runs it again as docs_lists).
/usr/bin/python3 tests/docs/docs_lists_check.py .

GRANARY_WERROR_FLAG="-DGRANARY_WERROR=${GRANARY_WERROR:-ON}"
# The fake device backend (test code) in granary_node, the Python module and granary_gpu_check:
# the GPU-tier, Python and gpu_check tests start them on it (CMakeLists.txt, GRANARY_DEVICE_FAKE).
bash scripts/build.sh "$GRANARY_WERROR_FLAG" -DGRANARY_DEVICE_FAKE=ON
# The Python module, installed for /usr/bin/python3 (the python tests use the build tree's).
bash scripts/install_python.sh
BUILD_DIR="${GRANARY_BUILD_DIR:-build}"
JOBS="${GRANARY_JOBS:-$(nproc)}"
(cd "$BUILD_DIR" && ctest --output-on-failure --timeout 900 "$@")

# No Python module in the sanitizer trees: an instrumented extension cannot load into Debian's
# uninstrumented python3.
SANITIZER_CMAKE=(-G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGRANARY_WITH_CUDA=OFF -DGRANARY_BUILD_PYTHON=OFF
  -DGRANARY_DEVICE_FAKE=ON
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
if command -v ccache >/dev/null 2>&1; then
  # As in build.sh: paths relative to the checkout, so another clone reuses the objects.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
  SANITIZER_CMAKE+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# UCX's malloc and mmap hooks do not mix with the sanitizers' allocators.
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none

# The names of the tests in a configured tree that carry a label (test names are target names).
labelled_tests() {
  (cd "$1" && ctest -N -L "$2" | sed -n 's/^ *Test *#[0-9]*: *//p')
}

if [[ "${GRANARY_TSAN:-1}" == "1" ]]; then
  echo "== clang TSan build with -Wthread-safety -Werror, and the tests labelled tsan (build-tsan)"
  cmake -S . -B build-tsan "${SANITIZER_CMAKE[@]}" -DCMAKE_C_COMPILER=clang \
    -DCMAKE_CXX_COMPILER=clang++ -DGRANARY_WERROR=ON -DGRANARY_SANITIZER=thread >/dev/null
  mapfile -t TSAN_TESTS < <(labelled_tests build-tsan tsan)
  (( ${#TSAN_TESTS[@]} > 0 )) || { echo "no test is labelled tsan" >&2; exit 1; }
  # Every library and program, so that -Wthread-safety sees all of src/, and the tsan tests.
  cmake --build build-tsan -j "$JOBS" --target granary_master granary_node granary \
    granary_client_shared "${TSAN_TESTS[@]}"
  # A TSan report fails the test (exit 66).
  (cd build-tsan &&
    TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/../tests/tsan.supp" \
    ctest --output-on-failure --timeout 900 -L tsan "$@")
fi

if [[ "${GRANARY_ASAN:-1}" == "1" ]]; then
  echo "== ASan+UBSan build and suite (build-asan)"
  cmake -S . -B build-asan "${SANITIZER_CMAKE[@]}" -DGRANARY_SANITIZER=address,undefined >/dev/null
  cmake --build build-asan -j "$JOBS"
  # Leaks inside UCX's own context are not ours to report (the fuzzers run with leak detection
  # on). The install test builds an uninstrumented consumer, and the browser test checks the
  # dashboard page, not the master's memory (its C++ is in the unit tests here): both run in the
  # normal tree only.
  (cd build-asan &&
    ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure --timeout 900 -LE "fuzz|chaos|gpu|install|browser|upgrade" "$@")
fi
