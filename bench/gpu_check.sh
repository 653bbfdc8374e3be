#!/bin/bash
# bench/gpu_check.sh [--dry-run] OUTDIR: the device check (the references of a GPU machine and
# Granary's device paths against them), run on a GPU machine from the folder bench/gpu_bundle.sh made (this script is copied into it).
# Everything it learns lands in OUTDIR: gpu.csv and nvidia-smi.txt (GPU, driver, PCIe link),
# machine.txt, gpu_check.json (one record per measure: the references, timed with CUDA events,
# then Granary's client paths against a master and a node started here on loopback, with the
# default transports and with UCX_TLS=tcp), the `gpu` tests (tests/NAME.xml, gtest's report per
# binary, and tests/NAME.log), summary.md, and steps.txt (each step's exit status).
#
# The whole run stays within GPU_CHECK_BUDGET_S seconds (default 450, under the 8 minutes a lent
# machine gives): each test gets the time ctest gives it (gpu_tests.txt), and a step is cut short
# (or skipped) when the budget would run out; steps.txt says which. Exits 0 when every step
# passed, 1 when one failed, 2 for a bad command line.
#
# --dry-run: everything but the device, on the fake device backend (CI, tests/gpu_check): the
# bundle's paths and libraries, the test list, the per-test XML, the timing harness and the
# client paths at small sizes. The gpu tests skip there without a device.
set -u
usage() {
  echo "usage: gpu_check.sh [--dry-run] OUTDIR" >&2
  exit 2
}
dry=0 outarg=""
while (($#)); do
  case "$1" in
    --dry-run) dry=1 ;;
    -h | --help)
      sed -n '2,18p' "$0"
      exit 0
      ;;
    -*)
      echo "gpu_check.sh: unknown flag $1" >&2
      usage
      ;;
    *)
      [[ -z "$outarg" ]] || usage
      outarg=$1
      ;;
  esac
  shift
done
[[ -n "$outarg" ]] || usage
mkdir -p "$outarg/tests" || exit 2
out=$(cd "$outarg" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
cd "$here" || exit 2
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export UCX_MODULE_DIR="$here/lib/ucx"
# The IPC tests' second process: the bundle's copy (never a path dug out of a binary).
export GRANARY_BACKEND_IPC_HELPER="$here/tests/device_backend_ipc_helper"
budget=${GPU_CHECK_BUDGET_S:-450}
PY=python3
if ((dry)); then
  export GRANARY_DEVICE_BACKEND=fake
  HOST_SEG=64MB GPU_SEG=32MB VALUES=4 VALUE_BYTES=$((1 << 20)) SCALE=small
else
  export GRANARY_DEVICE_BACKEND="${GRANARY_DEVICE_BACKEND:-cuda}"
  # Sizes (overridable for a trial on a smaller machine).
  HOST_SEG="${HOST_SEG:-8GB}" GPU_SEG="${GPU_SEG:-4GB}" VALUES="${VALUES:-64}"
  VALUE_BYTES="${VALUE_BYTES:-$((16 << 20))}" SCALE=full
fi

failed=0
: > "$out/steps.txt"
# step NAME SECONDS LOG CMD...: runs CMD (output to LOG) for at most SECONDS, fewer when the
# budget has less left (10 s kept for the summary); records the outcome in steps.txt.
step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local left=$((budget - SECONDS - 10))
  ((left < limit)) && limit=$left
  if ((limit < 5)); then
    echo "$name: skipped, the ${budget} s budget is spent" | tee -a "$out/steps.txt"
    failed=1
    return 1
  fi
  timeout -k 5 "$limit" "$@" > "$log" 2>&1
  local rc=$?
  local what="rc=$rc"
  ((rc == 124 || rc == 137)) && what="killed after $limit s (rc=$rc)"
  echo "$name: $what" | tee -a "$out/steps.txt"
  ((rc == 0)) || failed=1
  return "$rc"
}

echo "== machine"
if ((dry)); then
  echo "dry run: no device" > "$out/gpu.csv"
  echo "dry run: no device" > "$out/nvidia-smi.txt"
else
  nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max,memory.total \
    --format=csv > "$out/gpu.csv" 2>&1
  nvidia-smi > "$out/nvidia-smi.txt" 2>&1
fi
{ uname -a; head -2 /etc/os-release 2>/dev/null; nproc; ulimit -l; df -h /dev/shm; cat commit.txt 2>/dev/null; } \
  > "$out/machine.txt" 2>&1
json="$out/gpu_check.json"
: > "$json"

echo "== references"
step refs 90 "$out/refs.log" bin/granary_gpu_check --mode=refs --scale="$SCALE" --json "$json"

echo "== gpu tests"
# gpu_tests.txt: name, seconds, binary, then K=V words (gpu_bundle.sh, from ctest).
while IFS=$'\t' read -r name seconds binary envs; do
  [[ -z "$name" ]] && continue
  read -r -a env_words <<< "${envs:-}"
  step "test $name" "$seconds" "$out/tests/$name.log" \
    env GRANARY_BIN_DIR="$here/bin" "${env_words[@]}" "tests/$binary" \
    --gtest_output="xml:$out/tests/$name.xml"
done < gpu_tests.txt

port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
http_ok() {
  $PY - "$1" "$2" << 'PY'
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
# The client paths, against a master and a node started here (skipped without time for them).
clients() {
  local rpc http up=0
  rpc=$(port)
  http=$(port)
  bin/granary_master --rpc_port="$rpc" --metrics_port="$http" --metrics_host=127.0.0.1 \
    --log_level=warning > "$out/master.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do http_ok "$http" /health && break; sleep 0.1; done
  bin/granary_node --master="127.0.0.1:$rpc" --metrics_port=0 --local_hostname=127.0.0.1 \
    --host_segment_size="$HOST_SEG" --gpu_segment_size="$GPU_SEG" --gpu_device=0 \
    --log_level=info > "$out/node.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 300); do http_ok "$http" /api/v1/segments && { up=1; break; }; sleep 0.1; done
  echo "cluster: up=$up (master rpc $rpc, http $http)" | tee -a "$out/steps.txt"
  ((up)) || return 1
  echo "== client, default transports"
  step "client shm" 60 "$out/client_shm.log" bin/granary_gpu_check --mode=client \
    --master="127.0.0.1:$rpc" --label=shm --values="$VALUES" --value_bytes="$VALUE_BYTES" \
    --json "$json"
  echo "== client, UCX_TLS=tcp (staging)"
  step "client tcp" 60 "$out/client_tcp.log" env UCX_TLS=tcp bin/granary_gpu_check \
    --mode=client --master="127.0.0.1:$rpc" --label=tcp --values=$((VALUES < 16 ? VALUES : 16)) \
    --value_bytes="$VALUE_BYTES" --gpu_tier=false --json "$json"
}
if ((budget - SECONDS >= 60)); then
  clients || failed=1
else
  echo "clients: skipped, the ${budget} s budget is spent" | tee -a "$out/steps.txt"
  failed=1
fi
kill "${pids[@]}" 2>/dev/null
wait 2>/dev/null
pids=()

$PY - "$json" "$out/tests" > "$out/summary.md" << 'PY'
import glob, json, os, sys
import xml.etree.ElementTree as ET
r = {}
for line in open(sys.argv[1]):
    try:
        j = json.loads(line)
    except Exception:
        continue
    r[j["name"] + (("/" + j["label"]) if j.get("label") else "")] = j
def g(k):
    return r.get(k, {}).get("GBps")
rows = [
    ("remote replica (staging, UCX_TLS=tcp) -> device", "client/host_tier/get_into_device/tcp", "h2d/pinned/16MiB", 0.8),
    ("same-host host segment -> device", "client/host_tier/get_into_device/shm", "h2d/pinned/16MiB", 0.9),
    ("same-host GPU segment (IPC) -> device", "client/gpu_tier/get_into_device/shm", "d2d/1GiB", 0.8),
    ("staged pipeline, best slots", "pipeline/h2d/best", "h2d/pinned/16MiB", 0.85),
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
print("| all measures | value | timed by |")
print("|---|---|---|")
for k, j in r.items():
    how = j.get("timing", "")
    if "GBps" in j:
        print(f"| {k} | {j['GBps']:.1f} GB/s | {how} |")
    elif "seconds" in j:
        print(f"| {k} | {j['seconds']:.6f} s | {how} |")
    elif "byte_exact" in j:
        print(f"| {k} | byte_exact={j['byte_exact']} | |")
    elif "metrics" in j:
        print(f"| {k} | {j['metrics']} | |")
print()
print("| gpu test binary | tests | failures | skipped | report |")
print("|---|---|---|---|---|")
for log in sorted(glob.glob(os.path.join(sys.argv[2], "*.log"))):
    name = os.path.basename(log)[:-4]
    xml = log[:-4] + ".xml"
    if os.path.exists(xml):
        root = ET.parse(xml).getroot()
        cases = root.iter("testcase")
        n = f = s = 0
        for c in cases:
            n += 1
            f += c.find("failure") is not None
            s += c.find("skipped") is not None
        print(f"| {name} | {n} | {f} | {s} | xml |")
    else:  # killed: what its log shows ran
        text = open(log, errors="replace").read()
        print(f"| {name} | {text.count('[       OK ]')} ok before the kill | "
              f"{text.count('[  FAILED  ]')} | - | log only |")
PY
cat "$out/summary.md"
cat "$out/steps.txt"
echo "gpu_check: $( ((failed)) && echo "a step FAILED" || echo "every step passed") in ${SECONDS} s"
exit "$failed"
