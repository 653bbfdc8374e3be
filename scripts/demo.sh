#!/usr/bin/env bash
# README command 1: install, build what the demo runs (not the tests), start a master with
# two tenants and a node on loopback, and show what Granary does:
#   - a 64 MB value put and read back byte-exact by the CLI: the cold figure of one short-lived
#     process (start-up, connection, first mapping of the node's segment, all in one transfer);
#   - granary_bench for a few seconds: the warm bandwidth and keys/s a long-lived engine sees;
#   - two tenants: the same key is two objects, and a put over a tenant's quota is refused;
#   - `granary tenants` and `granary nodes`, the admin view;
#   - the same value through the installed Python module.
# Then it stops everything it started. Environment: GRANARY_DEMO_RPC_PORT (50051),
# GRANARY_DEMO_HTTP_PORT (9003), GRANARY_DEMO_SKIP_BUILD=1 (use the build tree as it is: the
# demo test), GRANARY_DEMO_BENCH_SECONDS (3), GRANARY_BUILD_DIR (build).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${GRANARY_BUILD_DIR:-build}"
if [[ "${GRANARY_DEMO_SKIP_BUILD:-0}" != "1" ]]; then
  bash scripts/setup.sh
  GRANARY_BUILD_TARGETS="granary_master granary_node granary granary_bench" bash scripts/build.sh
  bash scripts/install_python.sh
fi
BIN="$BUILD_DIR/bin"
WORK=$(mktemp -d /tmp/granary_demo.XXXXXX)
RPC_PORT="${GRANARY_DEMO_RPC_PORT:-50051}"
HTTP_PORT="${GRANARY_DEMO_HTTP_PORT:-9003}"
SECONDS_BENCH="${GRANARY_DEMO_BENCH_SECONDS:-3}"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

cat >"$WORK/tenants.yaml" <<'YAML'
version: 1
tenants:
  - name: tenant-a
    quota: 128MB
  - name: tenant-b
    quota: 16MB
  - name: bench
    quota: 256MB
YAML
echo "== starting granary_master on 127.0.0.1:$RPC_PORT (HTTP $HTTP_PORT), quota on, 3 tenants"
"$BIN/granary_master" --rpc_port="$RPC_PORT" --metrics_port="$HTTP_PORT" \
  --metrics_host=127.0.0.1 --enable_multi_tenants \
  --tenant_quota_connector_uri="$WORK/tenants.yaml" >"$WORK/master.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$HTTP_PORT/health" >/dev/null && break; sleep 0.1; done

echo "== starting granary_node with a 512 MB pinned host segment"
"$BIN/granary_node" --master="127.0.0.1:$RPC_PORT" --host_segment_size=512MB \
  --metrics_port=0 --local_hostname=127.0.0.1 >"$WORK/node.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do
  curl -sf "http://127.0.0.1:$HTTP_PORT/api/v1/segments" | grep -q host0 && break; sleep 0.1
done

G=("$BIN/granary" --master="127.0.0.1:$RPC_PORT" --admin="127.0.0.1:$HTTP_PORT")
A=("${G[@]}" --tenant_id=tenant-a)
echo "== nodes"
"${G[@]}" nodes
echo "== tenant-a: a 64 MB random file, put and read back by the CLI"
head -c $((64 << 20)) /dev/urandom >"$WORK/value.bin"
"${A[@]}" put demo/kv-block-0 "$WORK/value.bin" 2>"$WORK/put.log" || { cat "$WORK/put.log" >&2; exit 1; }
"${A[@]}" --log_level=info get demo/kv-block-0 "$WORK/value.out" 2>"$WORK/get.log" || {
  cat "$WORK/get.log" >&2; exit 1; }
if cmp -s "$WORK/value.bin" "$WORK/value.out"; then
  echo "   round trip byte-exact ($(stat -c %s "$WORK/value.out") bytes)"
else
  echo "== MISMATCH: the value read back differs" >&2
  exit 1
fi
cold_put=$(grep -o '([0-9.]* GB/s)' "$WORK/put.log" | tr -d '()')
cold_get=$(grep -o '([0-9.]* GB/s)' "$WORK/get.log" | tr -d '()')
echo "   cold, one CLI process per transfer: put $cold_put, get $cold_get"
echo "   (each run pays its start-up, its connection to the master and the node, and the first"
echo "    mapping of the node's segment: what a one-off command sees, not what an engine sees)"
echo "   transports of the CLI's endpoints (control to the master, data to the node):"
grep -h "uses rma" "$WORK/get.log" | sed 's/^.*client: /     /' || true
"${A[@]}" stat demo/kv-block-0

echo "== warm: granary_bench, one long-lived client, ${SECONDS_BENCH} s per shape"
for shape in "get 1MB 8" "put 1MB 8" "get 4KB 32" "put 4KB 32"; do
  read -r mode block batch <<<"$shape"
  "$BIN/granary_bench" "$mode" --master="127.0.0.1:$RPC_PORT" --tenant_id=bench \
    --block_size="$block" --batch="$batch" --duration="$SECONDS_BENCH" --warmup=0.5 \
    --working_set=64MB --progress=never --out="$WORK/bench_${mode}_${block}.json" >/dev/null
  /usr/bin/python3 - "$WORK/bench_${mode}_${block}.json" "$mode" "$block" "$batch" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))[0]
print(f"   warm {sys.argv[2]:3} {sys.argv[3]:>4} x{sys.argv[4]:<2}: {r['gbps']:6.2f} GB/s"
      f"  {r['keys_per_s']:>9,.0f} keys/s  p50 {r['p50_us']:.0f} us per batch")
PY
done

echo "== two tenants: the same key is two objects; tenant-b's quota is 16 MB"
echo "tenant-b's own bytes" >"$WORK/b.txt"
"${G[@]}" --tenant_id=tenant-b put demo/kv-block-0 "$WORK/b.txt" 2>/dev/null
echo "   tenant-b reads demo/kv-block-0: '$("${G[@]}" --tenant_id=tenant-b get demo/kv-block-0 - 2>/dev/null)'"
echo "   tenant-a's demo/kv-block-0 is still $("${A[@]}" stat demo/kv-block-0 | sed -n 's/^size: //p')"
echo "   tenant-b puts 32 MB (over its 16 MB quota):"
head -c $((32 << 20)) /dev/zero >"$WORK/big.bin"
if "${G[@]}" --tenant_id=tenant-b put demo/too-big "$WORK/big.bin" 2>"$WORK/refused.log"; then
  echo "== the put over quota was accepted" >&2
  exit 1
fi
sed 's/^/   /' "$WORK/refused.log"
echo "== granary tenants"
"${G[@]}" tenants

echo "== the same value through the installed Python module (/usr/bin/python3, no PYTHONPATH)"
(cd / && env -u PYTHONPATH /usr/bin/python3 - "127.0.0.1:$RPC_PORT" "$WORK/value.bin" <<'PY'
import sys, numpy, granary
with granary.Client(master=sys.argv[1], tenant_id="tenant-a") as c:
    info = c.stat("demo/kv-block-0")
    buf = numpy.empty(info.size, numpy.uint8)
    n = c.get_into("demo/kv-block-0", buf)
    same = buf.tobytes() == open(sys.argv[2], "rb").read()
    print(f"   granary.Client.get_into: {n} bytes, byte-exact: {same}")
    sys.exit(0 if same else 1)
PY
)
# --force: the Python step's client is closed by the interpreter's exit, which need not run its
# close, so its read lease may be left to run out; a plain rm could meet HAS_LEASE.
"${A[@]}" rm --force demo/kv-block-0
"${G[@]}" --tenant_id=tenant-b rm --force demo/kv-block-0
echo "== done; logs in $WORK"
