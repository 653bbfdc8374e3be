#!/usr/bin/env bash
# Metadata rate with multi-tenant quota on (64 tenants with a policy) against off, in one run,
# alternating the two modes RUNS times: granary_bench meta against a --virtual_segments node.
# Prints the medians and the ratio on/off (target >= 0.95). Env: RUNS, DURATION, BUILD_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS="${RUNS:-5}"
DURATION="${DURATION:-3}"
TENANTS="${TENANTS:-64}"
source bench/common.sh
GRANARY_BUILD_DIR="$BUILD_DIR" bash scripts/build.sh >/dev/null
POLICY="$OUT/quota_policy.yaml"
{ echo "version: 1"; echo "tenants:"
  for i in $(seq 0 $((TENANTS - 1))); do echo "  - name: bench-$i"; echo "    quota: 64GB"; done; } >"$POLICY"
: >"$OUT/quota_overhead.jsonl"

run() {  # on|off
  local mode="$1" flags=()
  [[ "$mode" == on ]] && flags=(--enable_multi_tenants --tenant_quota_connector_uri="$POLICY")
  start_cluster "quota_$mode" "${flags[@]}" -- --host_segment_size=1TB --virtual_segments
  "$BIN/granary_bench" meta --master="127.0.0.1:$RPC" --tenants="$TENANTS" --threads=2 \
    --batch=32 --block_size=4KB --duration="$DURATION" --out="$OUT/meta_$mode.json" >/dev/null
  $PY -c '
import json,sys
for r in json.load(open(sys.argv[1])):
    print(json.dumps({"quota": sys.argv[2], "mode": r["mode"], "keys_per_s": r["keys_per_s"]}))
' "$OUT/meta_$mode.json" "$mode" >>"$OUT/quota_overhead.jsonl"
  stop_cluster
}
for r in $(seq "$RUNS"); do run off; run on; done
$PY - "$OUT/quota_overhead.jsonl" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for mode in ("meta-put", "meta-get"):
    off = statistics.median(r["keys_per_s"] for r in rows if r["mode"] == mode and r["quota"] == "off")
    on = statistics.median(r["keys_per_s"] for r in rows if r["mode"] == mode and r["quota"] == "on")
    print(f"{mode}: quota off {off:,.0f} keys/s, on (64 tenants) {on:,.0f} keys/s, ratio {on/off:.3f}")
PYEOF
# The raw records README points at.
mkdir -p docs/bench
cp "$OUT/quota_overhead.jsonl" docs/bench/
