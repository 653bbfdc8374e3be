#!/usr/bin/env bash
# README command 1: install, build, start a master and a node on loopback, put and get a real
# value through the CLI, print what happened and the bandwidth, and stop everything.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
bash scripts/install_python.sh
BIN="${GRANARY_BUILD_DIR:-build}/bin"
WORK=$(mktemp -d /tmp/granary_demo.XXXXXX)
RPC_PORT="${GRANARY_DEMO_RPC_PORT:-50051}"
HTTP_PORT="${GRANARY_DEMO_HTTP_PORT:-9003}"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

echo "== starting granary_master on 127.0.0.1:$RPC_PORT (HTTP $HTTP_PORT)"
"$BIN/granary_master" --rpc_port="$RPC_PORT" --metrics_port="$HTTP_PORT" \
  --metrics_host=127.0.0.1 >"$WORK/master.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$HTTP_PORT/health" >/dev/null && break; sleep 0.1; done

echo "== starting granary_node with a 256 MB pinned host segment"
"$BIN/granary_node" --master="127.0.0.1:$RPC_PORT" --host_segment_size=256MB \
  --metrics_port=0 --local_hostname=127.0.0.1 >"$WORK/node.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$HTTP_PORT/api/v1/segments" | grep -q host0 && break; sleep 0.1
done

G=("$BIN/granary" --master="127.0.0.1:$RPC_PORT")
echo "== segments"
"${G[@]}" segments
echo "== writing a 64 MB random file and putting it"
head -c $((64 << 20)) /dev/urandom >"$WORK/value.bin"
"${G[@]}" put demo/kv-block-0 "$WORK/value.bin"
echo "== getting it back"
"${G[@]}" --log_level=info get demo/kv-block-0 "$WORK/value.out" 2>"$WORK/get.log" || {
  cat "$WORK/get.log" >&2; exit 1; }
grep -v "uses rma" "$WORK/get.log" || true
if cmp -s "$WORK/value.bin" "$WORK/value.out"; then
  echo "== round trip is byte-exact ($(stat -c %s "$WORK/value.out") bytes)"
else
  echo "== MISMATCH: the value read back differs" >&2
  exit 1
fi
"${G[@]}" stat demo/kv-block-0
"${G[@]}" ls demo/
echo "== transports the client's endpoints used (control to the master, data to the node):"
grep -h "uses rma" "$WORK/get.log" | sed 's/^.*client: //' || true
echo "== the same value through the installed Python module (/usr/bin/python3, no PYTHONPATH)"
(cd / && env -u PYTHONPATH /usr/bin/python3 - "127.0.0.1:$RPC_PORT" "$WORK/value.bin" <<'PY'
import sys, numpy, granary
with granary.Client(master=sys.argv[1]) as c:
    info = c.stat("demo/kv-block-0")
    buf = numpy.empty(info.size, numpy.uint8)
    n = c.get_into("demo/kv-block-0", buf)
    same = buf.tobytes() == open(sys.argv[2], "rb").read()
    print(f"granary.Client.get_into: {n} bytes, byte-exact: {same}")
    sys.exit(0 if same else 1)
PY
)
"${G[@]}" rm demo/kv-block-0
echo "== done; logs in $WORK"
