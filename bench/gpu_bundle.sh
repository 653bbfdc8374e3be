#!/bin/bash
# bench/gpu_bundle.sh DIR: the folder the device check runs from (../shared/GPU.md section 7), made
# on the build machine from BUILD_DIR (default build, a CUDA build): stripped binaries (bin/:
# granary_master, granary_node, granary_gpu_check; tests/: the `gpu`-labelled test binaries and
# the IPC helper), every shared library they need that is not the C library or the CUDA driver
# (lib/, UCX's transport modules in lib/ucx), the list of test commands (gpu_tests.txt) and a copy
# of bench/gpu_check.sh. A GPU machine then needs only its driver (libcuda.so.1): no compiler,
# package registry or toolkit. Run there: DIR/gpu_check.sh OUTDIR.
set -euo pipefail
dir="${1:?usage: bench/gpu_bundle.sh DIR}"
build="${BUILD_DIR:-build}"
grep -q 'GRANARY_HAVE_CUDA' "$build/CMakeCache.txt" 2>/dev/null || true
ninja -C "$build" granary_master granary_node granary_gpu_check integration_gpu_tier_test \
  cuda_backend_cuda_test cuda_kv_layout_test cuda_backend_ipc_helper >/dev/null
rm -rf "$dir"; mkdir -p "$dir/bin" "$dir/tests" "$dir/lib/ucx"
for b in granary_master granary_node granary_gpu_check; do
  strip -o "$dir/bin/$b" "$build/bin/$b"
done
for t in integration_gpu_tier_test cuda_backend_cuda_test cuda_kv_layout_test \
  cuda_backend_ipc_helper; do
  strip -o "$dir/tests/$t" "$build/tests/$t"
done
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
cat > "$dir/gpu_tests.txt" <<'LIST'
tests/cuda_kv_layout_test
tests/cuda_backend_cuda_test
GRANARY_TEST_DEVICE_BACKEND=cuda tests/integration_gpu_tier_test
LIST
cp bench/gpu_check.sh "$dir/gpu_check.sh"
git rev-parse --short HEAD > "$dir/commit.txt" 2>/dev/null || true
du -sh "$dir"
