#!/usr/bin/env bash
# Measures granary side by side with its reference tools, in one run, on loopback:
#   - ucx_perftest ucp_get / ucp_put_bw at the same block sizes and UCX transports,
#   - redis-server + redis-benchmark GET/SET with -d equal to the block size and -r over as
#     many distinct keys as granary's 128 MB working set,
#   - granary_bench get / put against a master and node started here, with one client thread
#     and with two (redis-benchmark runs -c 2),
#   - granary_bench memcpy: one thread copying the same shapes with no store (the copy ceiling),
#   - bench/full_store.sh: 4 KiB puts into a full store (each evicts) against Redis at maxmemory,
#   - bench/python_overhead.py: the Mooncake-compatible Python class against granary_bench,
#   - the CLI's cold put and get of a 100-byte value, a new process each (as a shell script
#     uses it), against redis-cli SET and GET.
# Each figure is the median of RUNS runs. Prints a table with ratios, writes
# bench/results/compare.json, bench/results/compare.md and bench/results/bandwidth.png.
# Usage: bench/compare.sh [--quick]   (env: RUNS, PY_ROUNDS, SIZES, DURATION, BUILD_DIR, CLI_OPS)
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-3}"
# The Python rows move by +-15% between 3-round runs (1 MiB put: 0.82x, then 1.00x and 0.98x
# with 5 rounds); 5 rounds of each side per shape.
PY_ROUNDS="${PY_ROUNDS:-9}"
SIZES="${SIZES:-4096 65536 1048576}"
DURATION="${DURATION:-2}"
BATCH="${BATCH:-32}"
CLI_OPS="${CLI_OPS:-200}"
if [[ "${1:-}" == "--quick" ]]; then RUNS=1; PY_ROUNDS=1; DURATION=1; CLI_OPS=50; fi
source bench/common.sh
RAW="$OUT/raw.jsonl"
: >"$RAW"

GRANARY_SETUP_BENCH=1 bash scripts/setup.sh
GRANARY_BUILD_DIR="$BUILD_DIR" bash scripts/build.sh >/dev/null
ROUND=0  # the round being measured (0: outside the rounds): per-round ratios pair by it
record() {  # tool mode transport size gbps keys_per_s
  printf '{"tool":"%s","mode":"%s","transport":"%s","block_size":%s,"gbps":%s,"keys_per_s":%s,"round":%s}\n' \
    "$1" "$2" "$3" "$4" "$5" "$6" "$ROUND" >>"$RAW"
}

# --- ucx_perftest: its "MB/s" is MiB/s; converted to 10^9 bytes per second.
perftest() {  # transport test size
  local tls="$1" test="$2" size="$3" p iters
  p=$(port)
  iters=$(( size >= 1048576 ? 2000 : (size >= 65536 ? 20000 : 100000) ))
  [[ "$tls" == tcp ]] && iters=$(( iters / 10 ))
  local env=()
  [[ "$tls" == tcp ]] && env=(UCX_TLS=tcp)
  env "${env[@]}" ucx_perftest -p "$p" >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  local line
  line=$(env "${env[@]}" timeout 120 ucx_perftest 127.0.0.1 -p "$p" -t "$test" -s "$size" -n "$iters" 2>/dev/null | grep Final: || true)
  wait "$srv" 2>/dev/null || true
  # Final: iters lat50 latavg latoverall bw_avg bw_overall rate_avg rate_overall
  local mibs rate
  mibs=$(awk '{print $7}' <<<"$line")
  rate=$(awk '{print $9}' <<<"$line")
  [[ -z "$mibs" ]] && { echo "ucx_perftest $test $size ($tls) failed" >&2; return; }
  local mode=get; [[ "$test" == ucp_put_bw ]] && mode=put
  record ucx_perftest "$mode" "$tls" "$size" "$($PY -c "print($mibs*1048576/1e9)")" "$rate"
}

# --- redis: GET/SET at -d size; 4 KiB also pipelined (-P BATCH) like granary's batch.
redis_bench() {  # size
  local size="$1" p n
  p=$(port)
  redis-server --port "$p" --save "" --appendonly no --bind 127.0.0.1 >/dev/null 2>&1 &
  local srv=$!
  for _ in $(seq 50); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
  n=$(( size >= 1048576 ? 3000 : (size >= 65536 ? 30000 : 300000) ))
  local pipe=1; (( size <= 4096 )) && pipe="$BATCH"
  # Like with like: granary_bench moves a 128 MB working set of distinct keys, so Redis gets
  # -r over as many distinct keys (without -r every request hits one cache-resident key). SET
  # runs first with n >= 9x the key space, so the GETs find (nearly) every key present.
  local keys=$(( (128 << 20) / size )) csv
  csv=$(redis-benchmark -p "$p" -t set,get -d "$size" -n "$n" -r "$keys" -c 2 -P "$pipe" --csv \
    2>/dev/null)
  local set get
  set=$(grep '^"SET"' <<<"$csv" | cut -d, -f2 | tr -d '"')
  get=$(grep '^"GET"' <<<"$csv" | cut -d, -f2 | tr -d '"')
  record redis put default "$size" "$($PY -c "print($set*$size/1e9)")" "$set"
  record redis get default "$size" "$($PY -c "print($get*$size/1e9)")" "$get"
  if (( size == 4096 )); then
    # Single operations: one connection, no pipelining, -r over the same keys (the rows
    # get/batch=1 and put/batch=1 of granary_bench, one thread).
    csv=$(redis-benchmark -p "$p" -t set,get -d "$size" -n 60000 -r "$keys" -c 1 -P 1 --csv \
      2>/dev/null)
    set=$(grep '^"SET"' <<<"$csv" | cut -d, -f2 | tr -d '"')
    get=$(grep '^"GET"' <<<"$csv" | cut -d, -f2 | tr -d '"')
    record redis put/batch=1 default "$size" "$($PY -c "print($set*$size/1e9)")" "$set"
    record redis get/batch=1 default "$size" "$($PY -c "print($get*$size/1e9)")" "$get"
  fi
  kill "$srv"; wait "$srv" 2>/dev/null || true
}

# granary_bench's JSON records (file) into the raw records, for `transport`, with `suffix`
# appended to each mode.
granary_records() {  # file transport suffix
  $PY - "$1" "$2" "$3" "$ROUND" >>"$RAW" <<'PYEOF'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(json.dumps({"tool": "granary", "mode": r["mode"] + sys.argv[3], "transport": sys.argv[2],
                      "block_size": r["block_size"], "gbps": r["gbps"],
                      "keys_per_s": r["keys_per_s"], "p99_us": r.get("p99_us"),
                      "round": int(sys.argv[4])}))
PYEOF
}

# --- the first minute: CLI_OPS cold `granary put` and `granary get` of a 100-byte value, each
# a new process as a shell script runs it (start, connect to the master, the call, exit),
# against as many `redis-cli SET` and `GET` of the same value to a redis-server on the same
# host. Recorded in keys/s (ops per second of wall time); the table shows ms per operation.
cli_cold() {
  local n="$CLI_OPS" value i t0 t1 t2 t3 t4 p
  value=$(printf 'v%.0s' $(seq 100))
  printf '%s' "$value" >"$OUT/cli_value"
  start_cluster cli -- --host_segment_size=256MB
  p=$(port)
  redis-server --port "$p" --save "" --appendonly no --bind 127.0.0.1 >/dev/null 2>&1 &
  pids+=($!)
  for _ in $(seq 50); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
  local g=("$BIN/granary" --master="127.0.0.1:$RPC")
  t0=$(date +%s%N)
  for i in $(seq "$n"); do "${g[@]}" put "cold$ROUND-$i" "$OUT/cli_value" 2>/dev/null; done
  t1=$(date +%s%N)
  for i in $(seq "$n"); do "${g[@]}" get "cold$ROUND-$i" >/dev/null 2>&1; done
  t2=$(date +%s%N)
  for i in $(seq "$n"); do redis-cli -p "$p" SET "cold$ROUND-$i" "$value" >/dev/null; done
  t3=$(date +%s%N)
  for i in $(seq "$n"); do redis-cli -p "$p" GET "cold$ROUND-$i" >/dev/null; done
  t4=$(date +%s%N)
  stop_cluster  # the master, the node and redis-server
  local ops=("granary cli-put $t0 $t1" "granary cli-get $t1 $t2" "redis cli-put $t2 $t3"
             "redis cli-get $t3 $t4")
  for o in "${ops[@]}"; do
    read -r tool mode a b <<<"$o"
    record "$tool" "$mode" default 100 0 "$($PY -c "print($n * 1e9 / ($b - $a))")"
  done
  printf '   cold CLI, ms per op: granary put %s get %s, redis-cli SET %s GET %s\n' \
    "$($PY -c "print(f'{($t1 - $t0) / $n / 1e6:.1f}')")" \
    "$($PY -c "print(f'{($t2 - $t1) / $n / 1e6:.1f}')")" \
    "$($PY -c "print(f'{($t3 - $t2) / $n / 1e6:.1f}')")" \
    "$($PY -c "print(f'{($t4 - $t3) / $n / 1e6:.1f}')")"
}

# --- granary: a master and a node on loopback with the given transport.
granary_bench() {  # transport [runs]
  local tls="$1" runs="${2:-$RUNS}" r
  RUN_ENV=()
  [[ "$tls" == tcp ]] && RUN_ENV=(UCX_TLS=tcp)
  # Every get prefill and put of a round (get and put with one thread and with two: 6 thread
  # runs x 3 sizes x 128 MB, 2.3 GB) stays under the 90% eviction watermark of 3 GB: no put
  # here waits for eviction (a full store is bench/full_store.sh's case).
  start_cluster "granary_$tls" -- --host_segment_size=3GB
  local sizes_csv
  sizes_csv=$(tr ' ' ',' <<<"$SIZES")
  # One client thread (the shape of ucx_perftest and of the memcpy ceiling), and two (the
  # concurrency of redis-benchmark -c 2: two connections at once), recorded as mode/threads=2.
  for mode in get put; do
    for th in 1 2; do
      for r in $(seq "$runs"); do
        env "${RUN_ENV[@]}" "$BIN/granary_bench" "$mode" --master="127.0.0.1:$RPC" \
          --threads="$th" --block_size="$sizes_csv" --batch="$BATCH" --duration="$DURATION" \
          --working_set=128MB --out="$OUT/g.json" >/dev/null
        granary_records "$OUT/g.json" "$tls" "$([[ $th == 1 ]] || echo "/threads=$th")"
      done
    done
    # Single operations, one thread, 4 KiB (against redis-benchmark -c 1 -P 1).
    if [[ $tls == default ]]; then
      for r in $(seq "$runs"); do
        "$BIN/granary_bench" "$mode" --master="127.0.0.1:$RPC" --threads=1 --block_size=4096 \
          --batch=1 --duration="$DURATION" --working_set=128MB --out="$OUT/g.json" >/dev/null
        granary_records "$OUT/g.json" "$tls" /batch=1
      done
    fi
  done
  stop_cluster
  RUN_ENV=()
}

# --- memcpy: the one-thread copy ceiling at granary's shapes (values from a 128 MB working set
# into a batch-sized buffer and back), measured here beside everything else; and the same copy
# of one cache-resident block again and again (tool memcpy-hot), which is what ucx_perftest does.
memcpy_records() {  # file tool
  $PY - "$1" "$2" >>"$RAW" <<'PYEOF'
import json, sys
for r in json.load(open(sys.argv[1])):
    print(json.dumps({"tool": sys.argv[2], "mode": r["mode"].replace("memcpy-", ""),
                      "transport": "default", "block_size": r["block_size"], "gbps": r["gbps"],
                      "keys_per_s": r["keys_per_s"]}))
PYEOF
}
memcpy_ref() {  # [runs]
  local sizes_csv runs="${1:-$RUNS}" r
  sizes_csv=$(tr ' ' ',' <<<"$SIZES")
  for r in $(seq "$runs"); do
    "$BIN/granary_bench" memcpy --block_size="$sizes_csv" --batch="$BATCH" \
      --duration="$DURATION" --working_set=128MB --out="$OUT/mc.json" >/dev/null
    memcpy_records "$OUT/mc.json" memcpy
    for s in $SIZES; do
      "$BIN/granary_bench" memcpy --block_size="$s" --batch=1 --duration="$DURATION" \
        --working_set="$s" --out="$OUT/mc.json" >/dev/null
      memcpy_records "$OUT/mc.json" memcpy-hot
    done
  done
}

# --- granary meta (the master alone): PutStart+PutEnd and Get at batch 32, 2 threads, against a
# --virtual_segments node, with 1 and META_LANES batches in flight per thread. The references
# are the performance issue's targets.
META_LANES="${META_LANES:-8}"
# Each setting starts from an empty master: every run adds about a million fresh keys, and the
# rates fall as the table grows (README, "What the figures say").
granary_meta() {
  local lanes r
  for lanes in 1 $META_LANES; do
    start_cluster meta -- --host_segment_size=1TB --virtual_segments
    for r in $(seq "$RUNS"); do
      "$BIN/granary_bench" meta --master="127.0.0.1:$RPC" --threads=2 --batch="$BATCH" \
        --lanes="$lanes" --block_size=4KB --duration="$DURATION" --out="$OUT/m.json" >/dev/null
      granary_records "$OUT/m.json" default "/lanes=$lanes"
    done
    stop_cluster
  done
  # Unbatched: batch 1, 2 threads, one in flight each; the target is 3x Mooncake's master with
  # two clients on this machine class (Put 6.6k, Get 15.1k keys/s; issue 18).
  start_cluster meta -- --host_segment_size=1TB --virtual_segments
  for r in $(seq "$RUNS"); do
    "$BIN/granary_bench" meta --master="127.0.0.1:$RPC" --threads=2 --batch=1 --lanes=1 \
      --block_size=4KB --duration="$DURATION" --out="$OUT/m.json" >/dev/null
    granary_records "$OUT/m.json" default /batch=1
  done
  stop_cluster
  record target meta-put default 4096 0 500000
  record target meta-get default 4096 0 1000000
  record target meta-put/batch=1 default 4096 0 19800
  record target meta-get/batch=1 default 4096 0 45300
}

# Rounds: each round measures every tool once, back to back, so that a slow spell of this
# shared machine hits granary and its references alike; the medians are over the rounds.
for r in $(seq "$RUNS"); do
  ROUND=$r
  echo "== round $r of $RUNS: ucx_perftest"
  for tls in default tcp; do
    for s in $SIZES; do perftest "$tls" ucp_get "$s"; perftest "$tls" ucp_put_bw "$s"; done
  done
  echo "== round $r of $RUNS: redis"
  for s in $SIZES; do redis_bench "$s"; done
  echo "== round $r of $RUNS: cold CLI against redis-cli"
  cli_cold
  echo "== round $r of $RUNS: granary"
  granary_bench default 1
  granary_bench tcp 1
  echo "== round $r of $RUNS: memcpy ceiling"
  memcpy_ref 1
done
ROUND=0
echo "== granary meta"
granary_meta
echo "== a full store: 4 KiB puts of fresh keys, each making room by eviction, and Redis at maxmemory"
RAW="$RAW" RUNS="$RUNS" BUILD_DIR="$BUILD_DIR" bash bench/full_store.sh
echo "== master memory per object"
BUILD_DIR="$BUILD_DIR" bash bench/master_memory.sh | tail -1 >"$OUT/master_memory_last.json"
$PY - "$OUT/master_memory_last.json" >>"$RAW" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps({"tool": "granary", "mode": "master-bytes-per-object", "transport": "-",
                  "block_size": r["objects"], "gbps": 0, "keys_per_s": r["bytes_per_object"]}))
print(json.dumps({"tool": "target", "mode": "master-bytes-per-object", "transport": "-",
                  "block_size": r["objects"], "gbps": 0, "keys_per_s": 200}))
PYEOF
echo "== the Python layer: batch_get_into / batch_put_from through granary.mooncake and granary_bench"
$PY bench/python_overhead.py --rounds "$PY_ROUNDS" --duration "$DURATION" --build "$BUILD_DIR" \
  --json "$OUT/python_overhead.json" --markdown "$OUT/python_overhead.md"

$PY bench/summarize.py "$RAW" "$OUT"
if command -v gnuplot >/dev/null 2>&1; then
  gnuplot "$OUT/bandwidth.gp" && echo "plot: $OUT/bandwidth.png"
fi
# The figures README shows are committed under docs/bench/.
mkdir -p docs/bench
cp "$OUT/compare.md" "$OUT/compare.json" "$OUT/python_overhead.md" "$OUT/python_overhead.json" \
  docs/bench/
[[ -f "$OUT/bandwidth.png" ]] && cp "$OUT/bandwidth.png" docs/bench/
{ echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"; echo "host: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB";
  echo "runs: $RUNS, duration: ${DURATION}s, batch: $BATCH"; ucx_info -v | head -1; redis-server --version; } >docs/bench/machine.txt
