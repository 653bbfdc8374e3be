#!/bin/bash
# bench/gpu_bundle.sh [--no-build] DIR: the folder the device check (bench/gpu_check.sh) runs
# from, made on the build machine from BUILD_DIR (default build, a CUDA build): stripped
# binaries (bin/: granary_master, granary_node, granary_gpu_check; tests/: the `gpu`-labelled test
# binaries and the IPC helper), every shared library they need that is not the C library or the
# CUDA driver (lib/, UCX's transport modules in lib/ucx), the list of `gpu` tests with the
# environment and the time ctest gives each (gpu_tests.txt, from ctest itself) and a copy of
# bench/gpu_check.sh. A GPU machine then needs only its driver (libcuda.so.1): no compiler,
# package registry or toolkit. Run there: DIR/gpu_check.sh OUTDIR.
# --no-build: use the binaries BUILD_DIR already has (the ctest dry run, tests/gpu_check);
# without it, ninja builds them first.
set -euo pipefail
usage() { echo "usage: bench/gpu_bundle.sh [--no-build] DIR" >&2; exit 2; }
build_first=1 dir=""
for a in "$@"; do
  case "$a" in
    --no-build) build_first=0 ;;
    -*) echo "gpu_bundle.sh: unknown flag $a" >&2; usage ;;
    *) [[ -z "$dir" ]] || usage; dir=$a ;;
  esac
done
[[ -n "$dir" ]] || usage
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${BUILD_DIR:-build}" && pwd)
bins=(granary_master granary_node granary_gpu_check)
# The gpu-labelled tests as ctest runs them: name, timeout, binary, environment.
tests_json=$(ctest --test-dir "$build" -L '^gpu$' --show-only=json-v1)
mapfile -t test_bins < <(python3 -c '
import json, os, sys
for t in json.loads(sys.stdin.read())["tests"]:
    print(os.path.basename(t["command"][0]))' <<<"$tests_json" | sort -u)
test_bins+=(device_backend_ipc_helper)
if (( build_first )); then
  ninja -C "$build" "${bins[@]}" "${test_bins[@]}" >/dev/null
fi
for b in "${bins[@]}"; do
  [[ -x "$build/bin/$b" ]] || { echo "gpu_bundle.sh: $build/bin/$b is not built" >&2; exit 1; }
done
for t in "${test_bins[@]}"; do
  [[ -x "$build/tests/$t" ]] || { echo "gpu_bundle.sh: $build/tests/$t is not built" >&2; exit 1; }
done
rm -rf "$dir"; mkdir -p "$dir/bin" "$dir/tests" "$dir/lib/ucx"
for b in "${bins[@]}"; do strip -o "$dir/bin/$b" "$build/bin/$b"; done
for t in "${test_bins[@]}"; do strip -o "$dir/tests/$t" "$build/tests/$t"; done
# Libraries: all but the C library's own and the driver (the GPU machine brings those).
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libcuda\.so|libstdc\+\+|libgcc_s)'
ucx_mods=$(ls /usr/lib/x86_64-linux-gnu/ucx/*.so* 2>/dev/null || true)
for f in "$dir"/bin/* "$dir"/tests/* $ucx_mods; do
  ldd "$f" 2>/dev/null | awk '$3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    [[ -e "$dir/lib/$name" ]] || cp -L "$path" "$dir/lib/$name"
  done
done
for m in $ucx_mods; do cp -L "$m" "$dir/lib/ucx/"; done
# One test per line, tab-separated: name, seconds (ctest's TIMEOUT), binary (in tests/), then the
# test's environment as K=V words (GRANARY_BIN_DIR is gpu_check.sh's to set).
python3 -c '
import json, os, sys
for t in json.loads(sys.stdin.read())["tests"]:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    env = [e for e in props.get("ENVIRONMENT", []) if not e.startswith("GRANARY_BIN_DIR=")]
    if any(" " in e or "\t" in e for e in env):
        sys.exit("gpu_bundle.sh: an environment value with a space: %s" % env)
    print("\t".join([t["name"], str(int(props.get("TIMEOUT", 1500))),
                     os.path.basename(t["command"][0])] + env))' <<<"$tests_json" \
  > "$dir/gpu_tests.txt"
cp "$src/bench/gpu_check.sh" "$dir/gpu_check.sh"
git -C "$src" rev-parse --short HEAD > "$dir/commit.txt" 2>/dev/null || true
du -sh "$dir"
