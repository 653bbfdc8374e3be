#!/usr/bin/env bash
# Failover and rebuild figures of issue 16 (outside CI; README "HA on etcd"):
#   1. failover time: etcd, two masters with --enable_ha (the default 5 s lease unless TTL is
#      set), one node and a client putting 4 KiB values in a loop on etcd://; kill -9 of the
#      leader; the time from the kill to the first successful put at the new leader. ROUNDS
#      rounds (default 5; the killed master is restarted as the next standby), median and range.
#   2. rebuild rate: a master without HA and one node holding OBJECTS objects (default
#      1,000,000, of VALUE_SIZE = 64 bytes), kill -9 of the master and a restart at the same
#      address: objects restored per second (the master's own figure from its log, and
#      restored objects over the time from the restart), and the seconds from the restart until
#      a client has read every object back byte-exact.
# PART=failover or PART=rebuild runs only that part (default: both). RESTART_FLAGS: more flags
# for the restarted master of the rebuild (an A/B run of a master flag).
# Results: bench/results/failover.json and a summary on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
PART="${PART:-both}"
case "$PART" in both | failover | rebuild) ;; *) echo "PART='$PART' is not both, failover or rebuild" >&2; exit 2 ;; esac
RESTART_FLAGS="${RESTART_FLAGS:-}"
ROUNDS="${ROUNDS:-5}" OBJECTS="${OBJECTS:-1000000}" VALUE_SIZE="${VALUE_SIZE:-64}" TTL="${TTL:-5}"
cmake --build "$BUILD_DIR" --target granary_master granary_node granary_failover_probe >/dev/null
command -v etcd >/dev/null || { echo "etcd is not installed (bash scripts/setup.sh)" >&2; exit 1; }
RUN_ENV=(UCX_TLS="${UCX_TLS:-tcp,sm,self}")
now_ms() { date +%s%3N; }
metric() {  # http_port sample
  curl -sf "http://127.0.0.1:$1/metrics" | awk -v s="$2" '$1 == s { print $2; exit }'
}
role() { curl -sf "http://127.0.0.1:$1/role" | $PY -c 'import json,sys; print(json.load(sys.stdin)["role"])' 2>/dev/null || true; }

TMP=$(mktemp -d)
run_failover() {
# --- 1. failover time ---
EP=$(port); PEER=$(port)
etcd --name=failover --data-dir="$TMP/etcd" --listen-client-urls="http://127.0.0.1:$EP" \
  --advertise-client-urls="http://127.0.0.1:$EP" --listen-peer-urls="http://127.0.0.1:$PEER" \
  --initial-advertise-peer-urls="http://127.0.0.1:$PEER" \
  --initial-cluster="failover=http://127.0.0.1:$PEER" >"$OUT/failover_etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$EP/health" >/dev/null && break; sleep 0.1; done
CLUSTER="failover$$"
declare -A MPID MRPC MHTTP
start_master() {  # slot
  MRPC[$1]=$(port); MHTTP[$1]=$(port)
  env "${RUN_ENV[@]}" "$BIN/granary_master" --rpc_port="${MRPC[$1]}" --metrics_port="${MHTTP[$1]}" \
    --metrics_host=127.0.0.1 --enable_ha --etcd_endpoints="127.0.0.1:$EP" --cluster_id="$CLUSTER" \
    --ha_lease_ttl_sec="$TTL" --log_level=warning >>"$OUT/failover_master$1.log" 2>&1 &
  MPID[$1]=$!
  pids+=("${MPID[$1]}")
  wait_health "${MHTTP[$1]}"
}
start_master 0
until [[ "$(role "${MHTTP[0]}")" == active ]]; do sleep 0.1; done
start_master 1
env "${RUN_ENV[@]}" "$BIN/granary_node" --master="etcd://127.0.0.1:$EP" --cluster_id="$CLUSTER" \
  --host_segment_size=256MB --metrics_port=0 --local_hostname=127.0.0.1 --log_level=warning \
  >"$OUT/failover_node.log" 2>&1 &
pids+=($!)
for _ in $(seq 200); do
  [[ "$(curl -sf "http://127.0.0.1:${MHTTP[0]}/api/v1/segments" | grep -c node_address)" -ge 1 ]] && break
  sleep 0.1
done
env "${RUN_ENV[@]}" "$BIN/granary_failover_probe" --mode=probe --master="etcd://127.0.0.1:$EP" \
  --cluster_id="$CLUSTER" >"$TMP/probe.out" 2>"$OUT/failover_probe.log" &
PROBE=$!
pids+=("$PROBE")
sleep 2
times=()
for r in $(seq "$ROUNDS"); do
  leader=""
  for s in 0 1; do [[ "$(role "${MHTTP[$s]}")" == active ]] && leader=$s; done
  [[ -n "$leader" ]] || { echo "round $r: no active master" >&2; exit 1; }
  lines_before=$(wc -l <"$TMP/probe.out")
  killed=$(now_ms)
  kill -9 "${MPID[$leader]}"
  wait "${MPID[$leader]}" 2>/dev/null || true
  resumed=""
  for _ in $(seq 600); do
    if (( $(wc -l <"$TMP/probe.out") > lines_before )); then
      resumed=$(tail -n 1 "$TMP/probe.out" | $PY -c 'import json,sys; print(json.load(sys.stdin)["resumed_wall_ms"])')
      break
    fi
    sleep 0.1
  done
  [[ -n "$resumed" ]] || { echo "round $r: puts did not resume within 60 s" >&2; exit 1; }
  ms=$((resumed - killed))
  times+=("$ms")
  echo "round $r: kill -9 of master $leader -> first successful put after ${ms} ms"
  start_master "$leader"  # the next standby
  sleep 2  # it campaigns and watches; the probe runs on at the new leader
done
kill "$PROBE" 2>/dev/null || true
stop_cluster
FAILOVER=$(printf '%s\n' "${times[@]}" | sort -n | $PY -c 'import sys; v=[int(x) for x in sys.stdin]; print(v[len(v)//2], min(v), max(v))')
read -r F_MED F_MIN F_MAX <<<"$FAILOVER"
echo "failover (TTL ${TTL} s, ${ROUNDS} rounds): median ${F_MED} ms, range ${F_MIN}-${F_MAX} ms"

}

run_rebuild() {
# --- 2. rebuild rate ---
SEG=$(( OBJECTS * (VALUE_SIZE + 256) / 1048576 + 256 ))MB
start_cluster failover_rebuild --client_ttl=30 -- --host_segment_size="$SEG" --log_level=info
env "${RUN_ENV[@]}" "$BIN/granary_failover_probe" --mode=fill --master="127.0.0.1:$RPC" \
  --objects="$OBJECTS" --value_size="$VALUE_SIZE" | tee "$TMP/fill.out"
# Every commit record has reached the node before the kill.
until [[ "$(metric "$HTTP" granary_master_inventory_oldest_pending_ms)" == 0 ]]; do sleep 0.05; done
kill -9 "$MASTER_PID"
wait "$MASTER_PID" 2>/dev/null || true
restarted=$(now_ms)
env "${RUN_ENV[@]}" "$BIN/granary_master" --rpc_port="$RPC" --metrics_port="$HTTP" \
  --metrics_host=127.0.0.1 --client_ttl=30 --log_level=info $RESTART_FLAGS >"$OUT/failover_rebuild_master2.log" 2>&1 &
pids+=($!)
wait_health "$HTTP"
until [[ "$(metric "$HTTP" granary_master_inventory_restored_total)" == "$OBJECTS" ]]; do
  (( $(now_ms) - restarted < 120000 )) || { echo "the restart restored $(metric "$HTTP" granary_master_inventory_restored_total) of $OBJECTS objects in 120 s" >&2; exit 1; }
  sleep 0.1  # polling costs CPU (a curl each time) that the master and node share
done
restored_at=$(now_ms)
# More exact than the poll: the time of the master's own log line that ends the report.
logged=$($PY - "$OUT/failover_rebuild_master2.log" <<'PY'
import re, sys, time
t = None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"I(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+) .*inventory of node session \d+ restored", line)
    if m:
        mo, d, h, mi, s, frac = m.groups()
        t = time.mktime((time.localtime().tm_year, int(mo), int(d), int(h), int(mi), int(s), 0, 0, -1))
        t = int((t + float("0." + frac)) * 1000)
print(t if t is not None else "")
PY
)
[[ -n "$logged" ]] && restored_at=$logged
# The master's own time in the report batches (decode and restore, on its progress thread).
M_REPORT_SEC=$(metric "$HTTP" 'granary_master_request_seconds_sum{op="InventoryReport"}')
env "${RUN_ENV[@]}" "$BIN/granary_failover_probe" --mode=verify --master="127.0.0.1:$RPC" \
  --objects="$OBJECTS" --value_size="$VALUE_SIZE" | tee "$TMP/verify.out"
ready=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["ready_wall_ms"])' "$TMP/verify.out")
stop_cluster
R_SEC=$($PY -c "print(round(($restored_at - $restarted) / 1000, 2))")
R_RATE=$($PY -c "print(int($OBJECTS / max(($restored_at - $restarted) / 1000, 1e-3)))")
READY_SEC=$($PY -c "print(round(($ready - $restarted) / 1000, 2))")
echo "rebuild of $OBJECTS objects: restored ${R_SEC} s after the restart (${R_RATE} objects/s, node reconnect included); every object read back byte-exact ${READY_SEC} s after the restart"
echo "the master spent ${M_REPORT_SEC} s handling the report batches (decode and restore)"
grep -h "restored\|reported" "$OUT/failover_rebuild_master2.log" "$OUT/failover_rebuild_node.log" | tail -n 4 || true
}

F_MED=null R_SEC=null R_RATE=null READY_SEC=null M_REPORT_SEC=null times=()
[[ $PART == rebuild ]] || run_failover
[[ $PART == failover ]] || run_rebuild
cat >"$OUT/failover.json" <<JSON
{"ttl_sec": $TTL, "rounds": $ROUNDS, "failover_ms": [$(IFS=,; echo "${times[*]}")],
 "failover_median_ms": $F_MED, "objects": $OBJECTS, "value_size": $VALUE_SIZE,
 "restored_sec": $R_SEC, "master_report_handling_sec": ${M_REPORT_SEC:-null}, "restored_per_sec": $R_RATE, "all_readable_sec": $READY_SEC}
JSON
rm -rf "$TMP"
