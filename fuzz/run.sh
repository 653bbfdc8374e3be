#!/usr/bin/env bash
# Runs one Granary libFuzzer target for a while.
#
#   fuzz/run.sh TARGET SECONDS        TARGET: frame, policy, size, admin_body, kv_key or handshake
#
# Builds the standalone fuzz project (fuzz/CMakeLists.txt) into ${GRANARY_FUZZ_BUILD_DIR:-build-fuzz}
# (relative to the repository root; configured once, then built incrementally), copies the seed
# corpus to a temporary directory and runs fuzz_TARGET on it for SECONDS seconds. The seeds are
# the build's corpus/TARGET when the build generates one (frame: from proto/message_table.h, see
# fuzz/CMakeLists.txt), else the committed fuzz/corpus/TARGET, which is never modified. Exits
# non-zero on any crash, leak, timeout or sanitizer report; crash inputs are kept under the build
# dir's artifacts/TARGET/.
# Exits 77 (ctest: skipped) when clang++ or the libFuzzer runtime is not installed.
set -euo pipefail

usage() { echo "usage: $0 {frame|policy|size|admin_body|kv_key|handshake} SECONDS" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
target=$1
seconds=$2
case "$target" in frame|policy|size|admin_body|kv_key|handshake) ;; *) usage ;; esac
[[ "$seconds" =~ ^[0-9]+$ ]] || usage

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${GRANARY_FUZZ_BUILD_DIR:-build-fuzz}
[[ "$build" = /* ]] || build="$root/$build"
cxx=${GRANARY_FUZZ_CXX:-clang++}

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz: $cxx not found; install clang and libclang-rt-14-dev (scripts/setup.sh). Skipping." >&2
  exit 77
fi
# The libFuzzer runtime ships separately from the compiler on Debian (libclang-rt-*-dev).
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
    "$cxx" -x c++ -fsanitize=fuzzer,address,undefined - -o /dev/null >/dev/null 2>&1; then
  echo "fuzz: $cxx cannot link -fsanitize=fuzzer,address,undefined (libFuzzer runtime missing;" \
       "install libclang-rt-14-dev). Skipping." >&2
  exit 77
fi

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "fuzz: configuring $build"
  cmake -S "$root/fuzz" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE= >/dev/null
fi
echo "fuzz: building fuzz_$target"
cmake --build "$build" --target "fuzz_$target" -j "${GRANARY_FUZZ_JOBS:-1}"

work=$(mktemp -d "${TMPDIR:-/tmp}/granary-fuzz-$target.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus"
if [[ -d "$build/corpus/$target" ]]; then
  cp -R "$build/corpus/$target/." "$work/corpus/"
  rm -f "$work/corpus/.stamp"
elif [[ -d "$root/fuzz/corpus/$target" ]]; then
  cp -R "$root/fuzz/corpus/$target/." "$work/corpus/"
fi
artifacts="$build/artifacts/$target"
mkdir -p "$artifacts"

echo "fuzz: running fuzz_$target for ${seconds}s"
set +e
(cd "$work" && "$build/fuzz_$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
   -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 -artifact_prefix="$artifacts/" "$work/corpus") 2>&1 | tee "$work/log"
rc=${PIPESTATUS[0]}
set -e
if [[ $rc -ne 0 ]] || grep -qE '^==[0-9]+==ERROR|runtime error:|^SUMMARY: ' "$work/log"; then
  echo "fuzz: fuzz_$target FAILED (exit $rc); reproducer(s) in $artifacts/:" >&2
  ls -1 "$artifacts" >&2 || true
  # Never report a finding as 77, which ctest reads as "skipped".
  if [[ $rc -eq 0 || $rc -eq 77 ]]; then rc=1; fi
  exit "$rc"
fi
echo "fuzz: fuzz_$target passed ($seconds s, no findings)"
