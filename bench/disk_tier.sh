#!/usr/bin/env bash
# The disk tier against fio, side by side in one run, on one file system:
#   - granary_bench put and get with --tier=disk (batch BATCH, one client thread) against a
#     master and a node started here with --disk_path=DISK_DIR/granary, --disk_queue_depth=QD
#     and a small host segment, over a WORKING_SET of distinct keys (the node's records lie one
#     after another in its file, as the allocator hands them out);
#   - fio with ioengine=io_uring, direct=1, the same block size and iodepth=QD, sequential
#     write and read of a WORKING_SET-sized file in DISK_DIR/fio (the same pattern).
# Each figure is the median of RUNS runs (granary and fio alternate within a run). Prints a
# table (GB/s = 10^9 bytes per second, and granary / fio) and writes
# bench/results/disk_tier.json. Targets (issue 44): >= 0.8x fio at 1 MiB both ways, >= 0.6x at
# 64 KiB.
# Usage: bench/disk_tier.sh [--quick]
#   env: DISK_DIR (default /var/tmp/granary_disk_bench; not a tmpfs: O_DIRECT needs a disk),
#        DISK_SIZE (8GB), WORKING_SET (2GB), SIZES (1048576 65536), BATCH (32), QD (32),
#        DURATION (s per figure, 10), RUNS (3), BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
DISK_DIR="${DISK_DIR:-/var/tmp/granary_disk_bench}"
DISK_SIZE="${DISK_SIZE:-8GB}"
WORKING_SET="${WORKING_SET:-2GB}"
SIZES="${SIZES:-1048576 65536}"
BATCH="${BATCH:-32}"
QD="${QD:-32}"
DURATION="${DURATION:-10}"
RUNS="${RUNS:-3}"
if [[ "${1:-}" == "--quick" ]]; then RUNS=1; DURATION=3; WORKING_SET=512MB; DISK_SIZE=2GB; fi
source bench/common.sh
command -v fio >/dev/null || { echo "disk_tier: fio is not installed (apt-get install fio)" >&2; exit 2; }
GRANARY_BUILD_DIR="$BUILD_DIR" bash scripts/build.sh >/dev/null
mkdir -p "$DISK_DIR/granary" "$DISK_DIR/fio"
trap 'cleanup; rm -rf "$DISK_DIR"' EXIT
RAW="$OUT/disk_tier_raw.jsonl"
: >"$RAW"
ws_bytes=$($PY -c "import re,sys; n,u=re.fullmatch(r'(\d+)([KMGT]?B)',sys.argv[1]).groups(); print(int(n)*{'B':1,'KB':1<<10,'MB':1<<20,'GB':1<<30,'TB':1<<40}[u])" "$WORKING_SET")

start_cluster disk -- --host_segment_size=64MB --disk_path="$DISK_DIR/granary" \
  --disk_size="$DISK_SIZE" --disk_queue_depth="$QD"
grep -h "disk tier" "$OUT/disk_node.log" || true

fio_run() {  # rw size -> GB/s
  fio --name=disk_tier --filename="$DISK_DIR/fio/file" --size="$ws_bytes" --ioengine=io_uring \
    --direct=1 --bs="$2" --iodepth="$QD" --rw="$1" --time_based --runtime="$DURATION" \
    --output-format=json 2>/dev/null |
    $PY -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; d=j["read"] if j["read"]["bw_bytes"] else j["write"]; print(d["bw_bytes"]/1e9)'
}
granary_run() {  # mode size -> GB/s
  "$BIN/granary_bench" "$1" --master="127.0.0.1:$RPC" --tier=disk --threads=1 --block_size="$2" \
    --batch="$BATCH" --duration="$DURATION" --working_set="$WORKING_SET" --out="$OUT/dt.json" \
    --progress=never >/dev/null
  $PY -c 'import json,sys; r=json.load(open(sys.argv[1]))[0]; assert r["errors"]==0, r; print(r["gbps"])' "$OUT/dt.json"
}

for run in $(seq "$RUNS"); do
  for size in $SIZES; do
    # fio writes its file first (a read of an unwritten file reads zeros without I/O).
    for pair in "put write" "get read"; do
      set -- $pair
      g=$(granary_run "$1" "$size")
      f=$(fio_run "$2" "$size")
      printf '{"run":%s,"mode":"%s","block_size":%s,"granary_gbps":%s,"fio_gbps":%s}\n' \
        "$run" "$1" "$size" "$g" "$f" >>"$RAW"
      echo "run $run $1 $size: granary $g GB/s, fio $f GB/s" >&2
    done
  done
done
stop_cluster

$PY - "$RAW" "$OUT/disk_tier.json" "$QD" "$BATCH" "$WORKING_SET" "$DISK_DIR" <<'EOF'
import json, statistics, sys
raw, out, qd, batch, ws, where = sys.argv[1:]
rows = [json.loads(l) for l in open(raw)]
table = []
for mode in ("put", "get"):
    for size in sorted({r["block_size"] for r in rows}, reverse=True):
        rs = [r for r in rows if r["mode"] == mode and r["block_size"] == size]
        g = statistics.median(r["granary_gbps"] for r in rs)
        f = statistics.median(r["fio_gbps"] for r in rs)
        ratios = [r["granary_gbps"] / r["fio_gbps"] for r in rs]
        table.append({"mode": mode, "block_size": size, "granary_gbps": g, "fio_gbps": f,
                      "ratio": g / f, "ratios": ratios})
print(f"disk tier vs fio (io_uring, direct=1, iodepth={qd}; granary batch {batch}, one thread; "
      f"working set {ws} in {where})")
print(f"{'op':4} {'block':>8} {'granary GB/s':>13} {'fio GB/s':>9} {'ratio':>6}  per run")
for t in table:
    print(f"{t['mode']:4} {t['block_size']:>8} {t['granary_gbps']:>13.3f} {t['fio_gbps']:>9.3f} "
          f"{t['ratio']:>5.2f}x  " + " ".join(f"{x:.2f}" for x in t["ratios"]))
json.dump({"qd": int(qd), "batch": int(batch), "working_set": ws, "rows": table},
          open(out, "w"), indent=2)
EOF
