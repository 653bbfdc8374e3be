#!/usr/bin/env bash
# Soak (issue 19; outside CI): the chaos workload (tests/chaos/chaos_test.cc: 4 clients of two
# tenants doing random puts, gets and removes on 40 keys each, replica_num 1 and 2, while nodes
# are killed with -9 and restarted, writers are killed mid-put, puts run out their deadline and
# read leases are never released) for MINUTES minutes (default 30) on the multi-host harness:
# master, three nodes and the clients each a host of its own (network namespaces; root). Then
# the invariants are checked (no wrong bytes, the quota ledger exact, no overlapping
# allocations, all space free once everything is removed).
# Reports operations, faults, violations (must be 0), and the RSS of master and nodes once the
# run has warmed up (a tenth of it, at most a minute) and at its end. The master's RSS may grow
# only by what its table grew: 200 bytes per object more (README, master memory), plus 16 MiB
# of allocator slack. A node's RSS at the end (a node restarted by the run counts from its own
# start) may exceed the largest at the start by the same 16 MiB.
# Usage: bench/soak.sh [MINUTES] [--loopback]   (--loopback: one host, no namespaces, no root)
# Results: bench/results/soak.json and a summary on stdout; exit 1 when a check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
MINUTES=30 NETNS=1
for a in "$@"; do
  case "$a" in
    --loopback) NETNS=0 ;;
    *[!0-9]* | "") echo "soak.sh: '$a' is neither a number of minutes nor --loopback" >&2; exit 2 ;;
    *) MINUTES="$a" ;;
  esac
done
(( MINUTES >= 1 )) || { echo "soak.sh: MINUTES $MINUTES must be at least 1" >&2; exit 2; }
if (( NETNS )) && [[ $(id -u) != 0 ]]; then
  echo "soak.sh: separate hosts need root (network namespaces); run as root or with --loopback" >&2
  exit 2
fi
cmake --build "$BUILD_DIR" --target chaos_test granary_master granary_node put_start_hang >/dev/null
REPORT="$OUT/soak.json"
rm -f "$REPORT"
echo "soak: $MINUTES min of chaos, $([[ $NETNS == 1 ]] && echo "separate hosts (netns)" || echo "one host")"
set +e
GRANARY_BIN_DIR="$BIN" GRANARY_CHAOS_SECONDS=$((MINUTES * 60)) GRANARY_CHAOS_NETNS=$NETNS \
  GRANARY_CHAOS_REPORT="$PWD/$REPORT" "$BUILD_DIR/tests/chaos_test" >"$OUT/soak.log" 2>&1
rc=$?
set -e
grep -E '^\[ chaos \]|SKIPPED|FAILED' "$OUT/soak.log" || true
if [[ ! -s "$REPORT" ]]; then
  echo "soak: no report (chaos_test exit $rc); see $OUT/soak.log" >&2
  exit 1
fi
$PY - "$REPORT" "$rc" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
s, e = r["start"], r["end"]
slack = 16 * 1024
master_allowed = s["master_rss_kib"] + slack + max(0, e["objects"] - s["objects"]) * 200 / 1024
node_allowed = max(s["node_rss_kib"]) + slack
mib = lambda k: f"{k / 1024:.1f} MiB"
print(f"operations   {r['operations']:,} in {r['seconds']} s ({r['operations'] / r['seconds']:,.0f}/s)")
print("faults       " + ", ".join(f"{k} {v}" for k, v in sorted(r["faults"].items())))
print(f"violations   {r['violations']}")
print(f"objects      {s['objects']:.0f} at the start, {e['objects']:.0f} at the end")
print(f"master RSS   {mib(s['master_rss_kib'])} -> {mib(e['master_rss_kib'])} (allowed {mib(master_allowed)})")
print(f"node RSS     {', '.join(mib(k) for k in s['node_rss_kib'])} -> "
      f"{', '.join(mib(k) for k in e['node_rss_kib'])} (allowed {mib(node_allowed)} each)")
bad = []
if rc != 0: bad.append(f"chaos_test exited {rc}")
if r["violations"] != 0: bad.append("violations")
if e["master_rss_kib"] > master_allowed: bad.append("master RSS grew beyond its table")
if max(e["node_rss_kib"]) > node_allowed: bad.append("node RSS grew")
print("soak: " + ("PASS" if not bad else "FAIL: " + "; ".join(bad)))
sys.exit(1 if bad else 0)
PY
