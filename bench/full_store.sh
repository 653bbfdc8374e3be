#!/usr/bin/env bash
# A full cache's steady state: 4 KiB puts of fresh keys into a store that is already full, so
# that every put makes room by eviction; side by side with Redis under the same memory limit
# (--maxmemory SEGMENT, allkeys-lru) taking SETs of fresh random keys (-r) with the same
# pipelining as compare.sh (-P 32, -c 2). Granary runs with one client thread and with two.
# Prints keys/s, the put latency and the master's eviction rounds (time per round, objects
# scanned); with RAW set, appends compare.sh's raw records (mode put-full) to that file.
# Usage: bench/full_store.sh   (env: SEGMENT (1GB), DURATION (3), RUNS (1), BUILD_DIR, RAW)
set -euo pipefail
cd "$(dirname "$0")/.."
SEGMENT="${SEGMENT:-1GB}"
DURATION="${DURATION:-3}"
RUNS="${RUNS:-1}"
source bench/common.sh
GRANARY_BUILD_DIR="$BUILD_DIR" bash scripts/build.sh >/dev/null
bytes=$($PY -c "
import re, sys
m = re.fullmatch(r'(\d+)([KMG]?)B?', '$SEGMENT')
print(int(m.group(1)) * {'': 1, 'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}[m.group(2)])")
fill_keys=$(( bytes / 4096 * 11 / 10 ))  # 1.1x what fits: the store ends full
record() {  # tool mode keys_per_s
  [[ -n "${RAW:-}" ]] || return 0
  printf '{"tool":"%s","mode":"%s","transport":"default","block_size":4096,"gbps":%s,"keys_per_s":%s}\n' \
    "$1" "$2" "$($PY -c "print($3*4096/1e9)")" "$3" >>"$RAW"
}

for r in $(seq "$RUNS"); do
  # Redis: fill past maxmemory, then time SETs of fresh keys (each evicts).
  p=$(port)
  redis-server --port "$p" --save "" --appendonly no --bind 127.0.0.1 --maxmemory "$bytes" \
    --maxmemory-policy allkeys-lru >/dev/null 2>&1 &
  srv=$!
  for _ in $(seq 50); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-benchmark -p "$p" -t set -d 4096 -r 1000000000 -n "$fill_keys" -c 2 -P 32 -q >/dev/null 2>&1
  set_rate=$(redis-benchmark -p "$p" -t set -d 4096 -r 1000000000 -n 600000 -c 2 -P 32 --csv 2>/dev/null |
    grep '^"SET"' | cut -d, -f2 | tr -d '"' | cut -d. -f1)
  evicted=$(redis-cli -p "$p" info stats | awk -F: '/^evicted_keys/{print $2}' | tr -d '\r')
  kill "$srv"; wait "$srv" 2>/dev/null || true
  echo "redis SET, full at maxmemory $SEGMENT: $set_rate keys/s ($evicted keys evicted in all)"
  record redis put-full "$set_rate"

  for th in 1 2; do
    start_cluster full_store --log_level=info -- --host_segment_size="$SEGMENT"
    "$BIN/granary_bench" put --master="127.0.0.1:$RPC" --block_size=4KB --batch=32 \
      --ops="$fill_keys" --working_set=$(( bytes * 11 / 10 ))B --out="$OUT/full_fill.json" >/dev/null
    # A working set larger than what the run can write: every key is fresh.
    "$BIN/granary_bench" put --master="127.0.0.1:$RPC" --block_size=4KB --batch=32 \
      --threads="$th" --duration="$DURATION" --working_set=8GB --out="$OUT/full_put.json" >/dev/null
    rate=$($PY -c "import json; print(round(json.load(open('$OUT/full_put.json'))[0]['keys_per_s']))")
    lat=$($PY -c "import json; r = json.load(open('$OUT/full_put.json'))[0]; print(f\"p50 {r['p50_us']:.0f} us, p99 {r['p99_us']:.0f} us per batch\")")
    # The master logs each eviction round: "... in 17.2 ms, 262144 object(s) scanned".
    rounds=$(grep -o 'in [0-9.]* ms, [0-9]* object(s) scanned' "$OUT/full_store_master.log" |
      awk '{print $2, $4}' | sort -n |
      awk '{ms[NR]=$1; sc+=$2} END{if (NR) printf "%d eviction rounds, median %.1f ms, %d objects scanned per round", NR, ms[int((NR+1)/2)], sc/NR}')
    stop_cluster
    echo "granary put, full at $SEGMENT, $th thread(s): $rate keys/s, $lat; $rounds"
    record granary "put-full$([[ $th == 1 ]] || echo "/threads=$th")" "$rate"
  done
done
