#!/usr/bin/env bash
# Master memory per stored object: starts a master and a --virtual_segments node, stores
# OBJECTS objects (4 KiB, one replica, PutStart+PutEnd through `granary_bench meta`), and reports
# the growth of the master's resident memory divided by the objects it holds.
# Usage: bench/master_memory.sh   (env: OBJECTS (5000000), KEY_BYTES (0: about 25-byte keys;
# 128: the engines' key length), BUILD_DIR (build))
# Prints one JSON line and appends it to bench/results/master_memory.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
OBJECTS="${OBJECTS:-5000000}"
KEY_BYTES="${KEY_BYTES:-0}"
source bench/common.sh
GRANARY_BUILD_DIR="$BUILD_DIR" bash scripts/build.sh >/dev/null
rss_kb() { awk '/^VmRSS:/{print $2}' "/proc/$1/status"; }
metric() { curl -sf "http://127.0.0.1:$2/metrics" | awk -v m="$1" '$1==m{print $2}'; }

# 5M objects of 4 KiB + the 64-byte header take 20.8 GB of (virtual) segment space.
start_cluster master_memory -- --host_segment_size=1TB --virtual_segments
master=$MASTER_PID
before=$(rss_kb "$master")
threads=2
"$BIN/granary_bench" meta --master="127.0.0.1:$RPC" --threads="$threads" --batch=32 \
  --block_size=4KB --key_bytes="$KEY_BYTES" --ops=$(( OBJECTS / threads )) --out="$OUT/master_memory_meta.json" >/dev/null
# Read leases expire (default_kv_lease_ttl); measure once they are gone.
sleep 6
after=$(rss_kb "$master")
objects=$(metric granary_master_objects "$HTTP")
$PY - "$before" "$after" "$objects" "$KEY_BYTES" <<'PYEOF' | tee -a "$OUT/master_memory.jsonl"
import json, sys
before, after, objects = int(sys.argv[1]), int(sys.argv[2]), int(float(sys.argv[3]))
print(json.dumps({"objects": objects, "key_bytes": int(sys.argv[4]) or 25,
                  "rss_before_kib": before, "rss_after_kib": after,
                  "bytes_per_object": round((after - before) * 1024 / max(objects, 1), 1)}))
PYEOF
