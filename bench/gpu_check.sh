#!/bin/bash
# bench/gpu_check.sh OUTDIR: the device check (../shared/GPU.md section 7), run on a GPU machine
# from the folder bench/gpu_bundle.sh made (this script is copied into it). Everything it learns
# lands in OUTDIR: gpu.csv and nvidia-smi.txt (GPU, driver, PCIe link), gpu_check.json (one
# record per measure: the references, then Granary's client paths against a master and a node
# started here on loopback, with the default transports and with UCX_TLS=tcp), summary.md (the
# ratios the issue sets targets for), the logs, and gpu_tests.log (the `gpu` tests). Meant to
# finish in well under 5 minutes.
set -u
mkdir -p "${1:?usage: gpu_check.sh OUTDIR}"
out=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$here/lib/ucx" GRANARY_DEVICE_BACKEND="${GRANARY_DEVICE_BACKEND:-cuda}"
# Sizes (overridable for a trial on a smaller machine, on the fake backend).
HOST_SEG="${HOST_SEG:-8GB}" GPU_SEG="${GPU_SEG:-4GB}" VALUES="${VALUES:-64}"
PY=python3
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,memory.total \
  --format=csv > "$out/gpu.csv" 2>&1
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
{ uname -a; cat /etc/os-release 2>/dev/null | head -2; nproc; cat commit.txt 2>/dev/null; } > "$out/machine.txt"
json="$out/gpu_check.json"; : > "$json"
echo "== references"; date
timeout 150 bin/granary_gpu_check --mode=refs --json "$json" > "$out/refs.log" 2>&1
echo "refs rc=$?"

port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
http_ok() { $PY - "$1" "$2" <<'PY'
import sys, urllib.request
try:
    body = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}{sys.argv[2]}", timeout=1).read().decode()
    sys.exit(0 if ('"tier":"gpu"' in body or sys.argv[2] == "/health") else 1)
except Exception:
    sys.exit(1)
PY
}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
RPC=$(port); HTTP=$(port)
bin/granary_master --rpc_port="$RPC" --metrics_port="$HTTP" --metrics_host=127.0.0.1 \
  --log_level=warning > "$out/master.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do http_ok "$HTTP" /health && break; sleep 0.1; done
bin/granary_node --master="127.0.0.1:$RPC" --metrics_port=0 --local_hostname=127.0.0.1 \
  --host_segment_size="$HOST_SEG" --gpu_segment_size="$GPU_SEG" --gpu_device=0 --log_level=info \
  > "$out/node.log" 2>&1 &
pids+=($!)
up=0
for _ in $(seq 300); do http_ok "$HTTP" /api/v1/segments && { up=1; break; }; sleep 0.1; done
echo "cluster up=$up (master rpc $RPC, http $HTTP)"
if (( up )); then
  echo "== client, default transports"; date
  timeout 90 bin/granary_gpu_check --mode=client --master="127.0.0.1:$RPC" --label=shm \
    --values="$VALUES" --json "$json" > "$out/client_shm.log" 2>&1
  echo "client shm rc=$?"
  echo "== client, UCX_TLS=tcp (staging)"; date
  UCX_TLS=tcp timeout 120 bin/granary_gpu_check --mode=client --master="127.0.0.1:$RPC" \
    --label=tcp --values=16 --gpu_tier=false --json "$json" > "$out/client_tcp.log" 2>&1
  echo "client tcp rc=$?"
fi
kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; pids=()

echo "== gpu tests"; date
helper=$(grep -ao '/[^[:space:]"]*cuda_backend_ipc_helper' tests/cuda_backend_cuda_test | head -1)
if [[ -n "$helper" && ! -e "$helper" ]]; then
  mkdir -p "$(dirname "$helper")" && ln -sf "$here/tests/cuda_backend_ipc_helper" "$helper"
fi
: > "$out/gpu_tests.log"
while read -r line; do
  [[ -z "$line" ]] && continue
  echo "=== $line" >> "$out/gpu_tests.log"
  env GRANARY_BIN_DIR="$here/bin" $line >> "$out/gpu_tests.log" 2>&1 &
  t=$!; ( sleep 90; kill -9 $t 2>/dev/null ) & w=$!
  wait $t; rc=$?; kill $w 2>/dev/null
  echo "=== rc=$rc" >> "$out/gpu_tests.log"
  echo "$line: rc=$rc"
done < gpu_tests.txt
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$out/gpu_tests.log"

$PY - "$json" > "$out/summary.md" <<'PY'
import json, sys
r = {}
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except Exception:
        continue
    key = j["name"] + (("/" + j["label"]) if j.get("label") else "")
    r[key] = j
def g(k):
    return r.get(k, {}).get("GBps")
rows = [
    ("remote replica (staging, UCX_TLS=tcp) -> device", "client/host_tier/get_into_device/tcp", "h2d/pinned/16MiB", 0.8),
    ("same-host host segment -> device", "client/host_tier/get_into_device/shm", "h2d/pinned/16MiB", 0.9),
    ("same-host GPU segment (IPC) -> device", "client/gpu_tier/get_into_device/shm", "d2d/1GiB", 0.8),
    ("gather paged KV", "gather/paged_kv", "d2d/same_bytes_as_gather", 0.7),
    ("scatter paged KV", "scatter/paged_kv", "d2d/same_bytes_as_gather", 0.7),
]
print("| measure | GB/s | reference | GB/s | ratio | target |")
print("|---|---|---|---|---|---|")
for name, k, ref, tgt in rows:
    a, b = g(k), g(ref)
    ratio = f"{a / b:.2f}x" if a and b else "n/a"
    fa = f"{a:.1f}" if a else "n/a"
    fb = f"{b:.1f}" if b else "n/a"
    print(f"| {name} | {fa} | {ref} | {fb} | {ratio} | >= {tgt}x |")
print()
print("| all measures | GB/s |")
print("|---|---|")
for k, j in r.items():
    if "GBps" in j:
        print(f"| {k} | {j['GBps']:.1f} |")
    elif "seconds" in j:
        print(f"| {k} | {j['seconds']:.4f} s |")
    elif "byte_exact" in j:
        print(f"| {k} | byte_exact={j['byte_exact']} |")
    elif "metrics" in j:
        print(f"| {k} | {j['metrics']} |")
PY
cat "$out/summary.md"
date
