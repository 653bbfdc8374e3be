#!/usr/bin/env bash
# A tenant writing at its cap: 4 KiB puts of fresh keys by one tenant whose byte quota or
# max_entries is already reached, so that every put makes room among the tenant's own oldest
# objects. Prints keys/s and the put latency for each cap, and the evictions by reason.
# Usage: bench/tenant_cap.sh   (env: ENTRIES (200000), DURATION (3), BUILD_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
ENTRIES="${ENTRIES:-200000}"
DURATION="${DURATION:-3}"
source bench/common.sh
GRANARY_BUILD_DIR="$BUILD_DIR" bash scripts/build.sh >/dev/null
policy="$OUT/tenant_cap_policy.yaml"
for cap in quota max_entries; do
  # The same number of 4 KiB objects either way: a byte quota of ENTRIES x 4 KiB (their
  # allocations take a little more), or max_entries with room to spare in bytes.
  if [[ "$cap" == quota ]]; then
    printf 'version: 1\ntenants:\n  - name: bench\n    quota: %dKB\n' $(( ENTRIES * 4 )) >"$policy"
  else
    printf 'version: 1\ntenants:\n  - name: bench\n    quota: 100GB\n    max_entries: %d\n' \
      "$ENTRIES" >"$policy"
  fi
  start_cluster tenant_cap --enable_multi_tenants --tenant_quota_connector_type=file \
    --tenant_quota_connector_uri="$policy" -- \
    --host_segment_size=$(( ENTRIES * 4 * 2 / 1024 + 64 ))MB
  # Fill to the cap and past it, then time puts of fresh keys (a working set larger than what
  # the run can write).
  "$BIN/granary_bench" put --master="127.0.0.1:$RPC" --tenant_id=bench --block_size=4KB \
    --batch=32 --ops=$(( ENTRIES * 11 / 10 )) --working_set=8GB --out="$OUT/tenant_cap_fill.json" >/dev/null
  "$BIN/granary_bench" put --master="127.0.0.1:$RPC" --tenant_id=bench --block_size=4KB \
    --batch=32 --duration="$DURATION" --working_set=8GB --out="$OUT/tenant_cap_put.json" >/dev/null
  evictions=$(curl -sf "http://127.0.0.1:$HTTP/metrics" |
    awk '/^granary_tenant_evictions_total/{printf "%s %s; ", $1, $2}')
  stop_cluster
  $PY - "$OUT/tenant_cap_put.json" "$cap" "$ENTRIES" "$evictions" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))[0]
print(f"tenant at its {sys.argv[2]} ({int(sys.argv[3]):,} objects of 4 KiB): "
      f"{r['keys_per_s']:,.0f} keys/s, p50 {r['p50_us']:.0f} us, p99 {r['p99_us']:.0f} us per "
      f"batch of 32; {sys.argv[4]}")
PYEOF
done
