#!/usr/bin/env bash
# What the data path between hosts over tcp costs: client option tcp_data_between_hosts=messages
# (every value in the node's Read and Write messages, the default) against one_sided (every value
# through an endpoint to the node's worker address), side by side in interleaved rounds on one
# master and node. Loopback with UCX_TLS=tcp and a different GRANARY_HOST_ID for the client
# than for the master and node, so the client takes the node for another host (no shared
# memory, no mapped segments) while the kernel's loopback carries the bytes: a real second host
# adds its link's latency and bandwidth to both paths alike.
# Usage: bench/between_hosts.sh   (env: SIZES (4KB,64KB,1MB), BATCH (32), DURATION (3),
# ROUNDS (3), BUILD_DIR). Prints keys/s and GB/s per path, size and round, and the ratio
# messages / one_sided; raw records in bench/results/between_hosts.json.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES="${SIZES:-4KB,64KB,1MB}"
BATCH="${BATCH:-32}"
DURATION="${DURATION:-3}"
ROUNDS="${ROUNDS:-3}"
source bench/common.sh
cmake --build "$BUILD_DIR" --target granary_master granary_node granary_bench >/dev/null
RAW="$OUT/between_hosts.json"
: >"$RAW"
RUN_ENV=(UCX_TLS=tcp GRANARY_HOST_ID=bench-storage-host)
start_cluster between_hosts -- --host_segment_size=2GB
for r in $(seq "$ROUNDS"); do
  for mode in get put; do
    for path in messages one_sided; do
      env UCX_TLS=tcp GRANARY_HOST_ID=bench-client-host "$BIN/granary_bench" "$mode" \
        --master="127.0.0.1:$RPC" --threads=1 --block_size="$SIZES" --batch="$BATCH" \
        --duration="$DURATION" --working_set=128MB --tcp_data_between_hosts="$path" \
        --progress=never --out="$OUT/between_hosts_run.json" >/dev/null
      $PY - "$OUT/between_hosts_run.json" "$path" "$r" >>"$RAW" <<'PYEOF'
import json, sys
for rec in json.load(open(sys.argv[1])):
    print(json.dumps({"path": sys.argv[2], "round": int(sys.argv[3]), "mode": rec["mode"],
                      "block_size": rec["block_size"], "gbps": rec["gbps"],
                      "keys_per_s": rec["keys_per_s"], "p99_us": rec.get("p99_us"),
                      "errors": rec.get("errors", 0)}))
PYEOF
    done
  done
done
stop_cluster
$PY - "$RAW" <<'PYEOF'
import collections, json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(list)
for r in rows:
    by[(r["mode"], r["block_size"], r["path"])].append(r)
print("| op | size | messages keys/s | messages GB/s | one_sided keys/s | one_sided GB/s | ratio (median) | per round |")
print("|---|---|---|---|---|---|---|---|")
for mode in ("get", "put"):
    for size in sorted({r["block_size"] for r in rows}):
        m = by[(mode, size, "messages")]
        o = by[(mode, size, "one_sided")]
        if not m or not o:
            continue
        mk = statistics.median(r["keys_per_s"] for r in m)
        ok = statistics.median(r["keys_per_s"] for r in o)
        rounds = " ".join(f"{a['keys_per_s'] / b['keys_per_s']:.2f}"
                          for a, b in zip(sorted(m, key=lambda r: r["round"]),
                                          sorted(o, key=lambda r: r["round"])))
        size_s = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        print(f"| {mode} | {size_s} | {mk:,.0f} | {mk * size / 1e9:.2f} | {ok:,.0f} | "
              f"{ok * size / 1e9:.2f} | {mk / ok:.2f}x | {rounds} |")
errors = sum(r["errors"] for r in rows)
print(f"errors: {errors}")
PYEOF
