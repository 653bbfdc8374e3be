#!/usr/bin/env bash
# Installs the build tree into a temporary prefix, builds tests/install/consumer (and the
# README's C++ example) against it with find_package(granary), starts the installed
# granary_master and granary_node on loopback, and runs the consumer's put and get.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
BUILD=$1
SRC=$2
WORK=$(mktemp -d /tmp/granary_install.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
cmake --install "$BUILD" --prefix "$WORK/prefix" >"$WORK/install.log"
for f in lib/libgranary.so include/granary/client.h lib/cmake/granary/granaryConfig.cmake \
    bin/granary_master bin/granary_node bin/granary; do
  [[ -e "$WORK/prefix/$f" ]] || { echo "not installed: $f" >&2; exit 1; }
done
# Nothing private is installed: only include/granary/ is public.
if find "$WORK/prefix/include" -mindepth 1 -maxdepth 1 ! -name granary | grep -q .; then
  echo "headers outside include/granary were installed:" >&2
  find "$WORK/prefix/include" -mindepth 1 -maxdepth 1 >&2
  exit 1
fi
# The README's C++ example (its first ```cpp block) is built with the consumer, warnings as
# errors: a call whose [[nodiscard]] Status it drops fails the build.
awk '/^```cpp$/ {on = 1; next} on && /^```$/ {exit} on' "$SRC/README.md" >"$WORK/readme_example.cc"
[[ -s "$WORK/readme_example.cc" ]] || { echo "README.md has no \`\`\`cpp example" >&2; exit 1; }
cmake -S "$SRC/tests/install/consumer" -B "$WORK/consumer" -DCMAKE_PREFIX_PATH="$WORK/prefix" \
  -DGRANARY_README_EXAMPLE="$WORK/readme_example.cc" \
  >"$WORK/configure.log" || { cat "$WORK/configure.log" >&2; exit 1; }
cmake --build "$WORK/consumer" >"$WORK/build.log" 2>&1 || { cat "$WORK/build.log" >&2; exit 1; }
# The consumer links the installed library, not the build tree's.
# (ldd's output is read whole first: `ldd | grep -q` under pipefail fails at random when grep
# exits at its first match and ldd dies of SIGPIPE.)
LDD=$(ldd "$WORK/consumer/consumer")
grep -q "$WORK/prefix/lib/libgranary.so" <<<"$LDD" ||
  { echo "consumer does not load the installed libgranary.so:" >&2; echo "$LDD" >&2; exit 1; }

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RPC=$(port)
HTTP=$(port)
BIN="$WORK/prefix/bin"
"$BIN/granary_master" --rpc_port="$RPC" --metrics_port="$HTTP" --metrics_host=127.0.0.1 \
  >"$WORK/master.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -sf "http://127.0.0.1:$HTTP/health" >/dev/null && break; sleep 0.1; done
"$BIN/granary_node" --master="127.0.0.1:$RPC" --host_segment_size=64MB --metrics_port=0 \
  --local_hostname=127.0.0.1 >"$WORK/node.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$HTTP/api/v1/segments" | grep -q host0 && break; sleep 0.1
done
"$WORK/consumer/consumer" "127.0.0.1:$RPC" || {
  echo "--- master log" >&2; tail -20 "$WORK/master.log" >&2
  echo "--- node log" >&2; tail -20 "$WORK/node.log" >&2
  exit 1
}
