#!/usr/bin/env bash
# Soak (issue 19; outside CI): the chaos workload (tests/chaos/chaos_test.cc: 4 clients of two
# tenants doing random puts, gets and removes on 40 keys each, replica_num 1 and 2) for MINUTES
# minutes (default 30) on the multi-host harness: master, three nodes and the clients each a
# host of its own (network namespaces; root). Faults meanwhile: node links cut for 0.3-2.5 s
# (past client_ttl, so the master drops the node and it re-mounts with its inventory), writers
# killed mid-put, puts that run out their deadline, read leases never released; with --kills
# also kill -9 of nodes and of the master (restarted in place). Then the invariants are checked
# (no wrong bytes, the quota ledger exact, no overlapping allocations, all space free once
# everything is removed).
# Reports operations, faults, violations (must be 0), and the RSS of master and nodes once the
# run has warmed up (a tenth of it, at most a minute) and at its end. Without --kills the same
# processes live through the run: the master's RSS may grow only by what its table grew (200
# bytes per object more, README "master memory") plus 16 MiB of allocator slack, a node's by
# 16 MiB. A process restarted by --kills is reported but not compared.
# Usage: bench/soak.sh [MINUTES] [--kills] [--loopback]   (--loopback: one host, no root)
# Results: bench/results/soak.json and a summary on stdout; exit 1 when a check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/common.sh
MINUTES=30 NETNS=1 KILLS=0
for a in "$@"; do
  case "$a" in
    --loopback) NETNS=0 ;;
    --kills) KILLS=1 ;;
    *[!0-9]* | "") echo "soak.sh: '$a' is neither a number of minutes, --kills nor --loopback" >&2; exit 2 ;;
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
echo "soak: $MINUTES min of chaos, $([[ $NETNS == 1 ]] && echo "separate hosts (netns)" || echo "one host"), $([[ $KILLS == 1 ]] && echo "with" || echo "without") process kills"
# Every 20 s while the run goes: each node's socket fds and CPU seconds (a node that piles up
# connections and spins on them went before UCX 1.13's aborts; README, "soak").
SAMPLES="$OUT/soak_nodes.txt"
SOCKETS="$OUT/soak_sockets.txt"
: >"$SAMPLES"
: >"$SOCKETS"
sample_nodes() {
  local hz p host socks ticks n=0
  hz=$(getconf CLK_TCK)
  while sleep 20; do
    n=$((n + 1))
    for p in $(pgrep -f "granary_node --master" || true); do
      host=$(tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | sed -n 's/^--local_hostname=//p')
      socks=$( (ls -l "/proc/$p/fd" 2>/dev/null || true) | grep -c 'socket:' || true)
      ticks=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)
      echo "$p ${host:-?} $socks $((ticks / hz))"
      # Every minute, each node's tcp sockets with their queues (which side stops reading).
      if (( NETNS && n % 3 == 0 )); then
        { echo "== $(date +%T) node ${host:-?} pid $p"; nsenter -t "$p" -n ss -tnp 2>&1 || true; } >>"$SOCKETS"
      fi
    done
    if (( NETNS && n % 3 == 0 )); then
      for p in $(pgrep -x chaos_test || true); do
        { echo "== $(date +%T) clients pid $p"; nsenter -t "$p" -n ss -tnp 2>&1 || true; } >>"$SOCKETS"
      done
    fi
  done >>"$SAMPLES"
}
sample_nodes &
pids+=($!)
set +e
GRANARY_BIN_DIR="$BIN" GRANARY_CHAOS_SECONDS=$((MINUTES * 60)) GRANARY_CHAOS_NETNS=$NETNS \
  GRANARY_CHAOS_KILLS=$KILLS GRANARY_CHAOS_LOG_FAULTS=1 GRANARY_CHAOS_REPORT="$PWD/$REPORT" "$BUILD_DIR/tests/chaos_test" >"$OUT/soak.log" 2>&1
rc=$?
set -e
stop_cluster  # the sampler
grep -E '^\[ chaos \]|SKIPPED|FAILED' "$OUT/soak.log" || true
if [[ ! -s "$REPORT" ]]; then
  echo "soak: no report (chaos_test exit $rc); see $OUT/soak.log" >&2
  exit 1
fi
$PY - "$REPORT" "$rc" "$SAMPLES" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rc = int(sys.argv[2])
nodes = {}  # pid -> [host, most socket fds, first and last CPU seconds]
for line in open(sys.argv[3]):
    pid, host, socks, cpu = line.split()
    n = nodes.setdefault(pid, [host, 0, int(cpu), int(cpu)])
    n[1] = max(n[1], int(socks))
    n[3] = int(cpu)
s, e = r["start"], r["end"]
slack = 16 * 1024
mib = lambda k: f"{k / 1024:.1f} MiB"
print(f"operations   {r['operations']:,} in {r['seconds']} s ({r['operations'] / r['seconds']:,.0f}/s)")
print("faults       " + ", ".join(f"{k} {v}" for k, v in sorted(r["faults"].items())))
print(f"violations   {r['violations']}")
print(f"objects      {s['objects']:.0f} at the start, {e['objects']:.0f} at the end")
bad = []
if rc != 0: bad.append(f"chaos_test exited {rc}")
if r["violations"] != 0: bad.append("violations")
for c in r.get("crashes", []):
    print(f"CRASH        {c}")
if r.get("crashes"): bad.append(f"{len(r['crashes'])} crash(es): a process died without being killed (restarted in place)")
procs = [("master", s["master_pid"], e["master_pid"], s["master_rss_kib"], e["master_rss_kib"],
          s["master_rss_kib"] + slack + max(0, e["objects"] - s["objects"]) * 200 / 1024)]
for i, (sp, ep, sk, ek) in enumerate(zip(s["node_pids"], e["node_pids"], s["node_rss_kib"],
                                           e["node_rss_kib"])):
    procs.append((f"node{i}", sp, ep, sk, ek, sk + slack))
for name, sp, ep, sk, ek, allowed in procs:
    if sp != ep:
        print(f"{name:<12} RSS {mib(sk)} -> {mib(ek)} (restarted during the run: not compared)")
        continue
    verdict = "ok" if ek <= allowed else "GREW"
    print(f"{name:<12} RSS {mib(sk)} -> {mib(ek)} (allowed {mib(allowed)}): {verdict}")
    if ek > allowed: bad.append(f"{name} RSS grew")
for pid, (host, socks, cpu0, cpu1) in sorted(nodes.items(), key=lambda kv: kv[1][0]):
    print(f"node {host:<11} pid {pid}: up to {socks} socket fds, {cpu1 - cpu0} s of CPU between "
          "the first and last sample (diagnostic, no limit)")
print("soak: " + ("PASS" if not bad else "FAIL: " + "; ".join(bad)))
sys.exit(1 if bad else 0)
PY
