# Shared by the bench/ scripts (sourced, from the repository root): builds into BUILD_DIR
# (default build), and defines BIN, OUT (bench/results), PY (Debian's python3), port() (a free
# TCP port on loopback), wait_up() (a master's /health, then its first host segment), and a
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
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
