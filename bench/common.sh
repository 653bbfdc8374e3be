# Shared by the bench/ scripts (sourced, from the repository root): builds into BUILD_DIR
# (default build), and defines BIN, OUT (bench/results), PY (Debian's python3), port() (a free
# TCP port on loopback), start_cluster/stop_cluster (a master and one node on loopback), and a
# `pids` array whose processes are killed on exit.
BUILD_DIR="${BUILD_DIR:-build}"
BIN="$BUILD_DIR/bin"
OUT=bench/results
mkdir -p "$OUT"
PY=/usr/bin/python3
port() { $PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
wait_health() {  # http_port
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.1; done
  echo "master on http port $1 did not come up" >&2; return 1
}
wait_segment() {  # http_port
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$1/api/v1/segments" | grep -q host0 && return 0; sleep 0.1
  done
  echo "no segment mounted at the master on http port $1" >&2; return 1
}
# start_cluster NAME [master flags...] -- [node flags...]: starts a master and one node with
# the environment in RUN_ENV (an array, e.g. (UCX_TLS=tcp)), logs to $OUT/NAME_{master,node}.log,
# and returns once the node's segment is mounted. Sets RPC, HTTP and MASTER_PID.
RUN_ENV=()
start_cluster() {
  local name="$1" mflags=() nflags=()
  shift
  while (( $# )) && [[ "$1" != -- ]]; do mflags+=("$1"); shift; done
  (( $# )) && shift
  nflags=("$@")
  RPC=$(port); HTTP=$(port)
  env "${RUN_ENV[@]}" "$BIN/granary_master" --rpc_port="$RPC" --metrics_port="$HTTP" \
    --metrics_host=127.0.0.1 --log_level=warning "${mflags[@]}" >"$OUT/${name}_master.log" 2>&1 &
  MASTER_PID=$!
  pids+=("$MASTER_PID")
  wait_health "$HTTP"
  env "${RUN_ENV[@]}" "$BIN/granary_node" --master="127.0.0.1:$RPC" --metrics_port=0 \
    --local_hostname=127.0.0.1 --log_level=warning "${nflags[@]}" >"$OUT/${name}_node.log" 2>&1 &
  pids+=($!)
  wait_segment "$HTTP"
}
pids=()
stop_cluster() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; pids=(); }
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
