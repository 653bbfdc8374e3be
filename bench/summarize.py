#!/usr/bin/python3
"""Medians of bench/compare.sh's raw records, ratios against the references, a Markdown table,
JSON, and a gnuplot script for the bandwidth plot."""
import json
import statistics
import sys
from collections import defaultdict

raw, out = sys.argv[1], sys.argv[2]
runs = defaultdict(list)
for line in open(raw):
    r = json.loads(line)
    runs[(r["tool"], r["mode"], r["transport"], r["block_size"])].append(r)
med = {}
for k, rs in runs.items():
    med[k] = {"gbps": statistics.median(r["gbps"] for r in rs),
              "keys_per_s": statistics.median(r["keys_per_s"] for r in rs), "runs": len(rs),
              # Per round, for the rows whose target must hold in each round, not in the median.
              "by_round": {r["round"]: r["keys_per_s"] for r in rs if r.get("round")}}
    p99 = [r["p99_us"] for r in rs if r.get("p99_us") is not None]
    if p99:
        med[k]["p99_us"] = statistics.median(p99)  # granary_bench: per batch

def size_name(b):
    return f"{b // 1048576} MiB" if b >= 1048576 else f"{b // 1024} KiB"

rows = []
for (tool, mode, tls, size), m in sorted(med.items(), key=lambda kv: (kv[0][2], kv[0][3], kv[0][1])):
    if tool != "granary":
        continue
    if mode.startswith("meta-") or mode == "master-bytes-per-object" or mode.startswith("cli-"):
        continue  # the targets and cold CLI tables below
    # "get/threads=2": two client threads, compared with redis-benchmark's two connections only.
    # "get/batch=1": single operations, one thread, against redis-benchmark -c 1 -P 1 (its
    # records carry the same mode).
    base, _, threads = mode.partition("/")
    ref_mode = mode if threads.startswith("batch=") else base
    for ref in ("ucx_perftest", "memcpy", "redis"):
        if threads and ref != "redis":
            continue
        # ucx_perftest moves bytes with no metadata at all: compare bandwidth only (>= 64 KiB).
        if ref == "ucx_perftest" and size <= 4096:
            continue
        # memcpy is the same-host copy ceiling: bandwidth only, default transports only.
        if ref == "memcpy" and (size <= 4096 or tls != "default"):
            continue
        rtls = tls if ref == "ucx_perftest" else "default"  # memcpy and redis: one figure
        r = med.get((ref, ref_mode, rtls, size))
        if r is None:
            continue
        use_keys = size <= 4096
        g = m["keys_per_s"] if use_keys else m["gbps"]
        rv = r["keys_per_s"] if use_keys else r["gbps"]
        rows.append({"mode": mode, "transport": tls, "block_size": size, "reference": ref,
                     "unit": "keys/s" if use_keys else "GB/s", "granary": g, "ref": rv,
                     "ratio": g / rv if rv else None, "runs": m["runs"],
                     "p99_us": m.get("p99_us"),
                     # granary over its reference of the same round (adjacent minutes)
                     "round_ratios": [m["by_round"][k] / r["by_round"][k]
                                      for k in sorted(m["by_round"])
                                      if use_keys and r["by_round"].get(k)] or None})

# Targets of the performance issue that have no reference tool: the master alone (meta) and
# its memory per object. Ratio >= 1 means the target is met.
targets = []
for (tool, mode, tls, size), m in sorted(med.items()):
    if tool != "granary":
        continue
    if mode.startswith("meta-"):
        base, lanes = mode.split("/")
        t = med.get(("target", mode, tls, size)) or med.get(("target", base, tls, size))
        shape = ("batch 1, 2 threads (target: 3x Mooncake's master, unbatched)"
                 if lanes == "batch=1" else f"batch 32, 2 threads, {lanes}")
        if t:
            targets.append({"what": f"{base} keys/s, {shape}",
                            "granary": m["keys_per_s"], "target": t["keys_per_s"],
                            "ratio": m["keys_per_s"] / t["keys_per_s"], "runs": m["runs"]})
    elif mode == "master-bytes-per-object":
        t = med.get(("target", mode, tls, size))
        if t:
            targets.append({"what": f"master RSS bytes per object at {size:,} objects (lower is better)",
                            "granary": m["keys_per_s"], "target": t["keys_per_s"],
                            "ratio": t["keys_per_s"] / m["keys_per_s"], "runs": m["runs"]})

# The copy ceilings on one host, side by side: ucx_perftest (one cache-resident buffer), the
# same copy by memcpy (memcpy-hot), and memcpy at granary's shapes from a 128 MB working set.
ceilings = []
for (tool, mode, tls, size), m in sorted(med.items(), key=lambda kv: (kv[0][3], kv[0][1])):
    if tool != "memcpy-hot" or size <= 4096:
        continue
    p = med.get(("ucx_perftest", mode, "default", size))
    d = med.get(("memcpy", mode, "default", size))
    g = med.get(("granary", mode, "default", size))
    ceilings.append({"mode": mode, "block_size": size, "memcpy_hot": m["gbps"],
                     "ucx_perftest": p["gbps"] if p else None,
                     "memcpy_dram": d["gbps"] if d else None, "granary": g["gbps"] if g else None})

# The CLI cold, one process per operation (keys_per_s is operations per second of wall time),
# against redis-cli: ms per operation, and redis-cli's time over granary's (>= 1: granary faster).
cold_cli = []
for op in ("put", "get"):
    g = med.get(("granary", f"cli-{op}", "default", 100))
    r = med.get(("redis", f"cli-{op}", "default", 100))
    if not g or not r:
        continue
    rounds = [g["by_round"][k] / r["by_round"][k] for k in sorted(g["by_round"])
              if r["by_round"].get(k)]
    cold_cli.append({"op": op, "granary_ms": 1e3 / g["keys_per_s"],
                     "redis_cli_ms": 1e3 / r["keys_per_s"],
                     "ratio": g["keys_per_s"] / r["keys_per_s"], "runs": g["runs"],
                     "round_ratios": rounds or None})

with open(f"{out}/compare.json", "w") as f:
    json.dump({"medians": [dict(zip(("tool", "mode", "transport", "block_size"), k), **v)
                           for k, v in med.items()], "ratios": rows, "targets": targets,
               "ceilings": ceilings, "cold_cli": cold_cli},
              f, indent=2)
lines = ["| mode | transport | block | unit | granary | p99 per batch | reference | ref value | ratio "
         "| ratio per round |", "|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    fmt = "{:,.0f}" if r["unit"] == "keys/s" else "{:.2f}"
    p99 = "-" if r["p99_us"] is None else f"{r['p99_us']:,.0f} µs"
    rounds = ("-" if not r["round_ratios"] or len(r["round_ratios"]) < 2
              else " ".join(f"{x:.2f}" for x in r["round_ratios"]))
    lines.append(f"| {r['mode']} | {r['transport']} | {size_name(r['block_size'])} | {r['unit']} | "
                 f"{fmt.format(r['granary'])} | {p99} | {r['reference']} | {fmt.format(r['ref'])} | "
                 f"{r['ratio']:.2f}x | {rounds} |")
if targets:
    lines += ["", "| target | granary | target | ratio |", "|---|---|---|---|"]
    for t in targets:
        lines.append(f"| {t['what']} | {t['granary']:,.0f} | {t['target']:,.0f} | {t['ratio']:.2f}x |")
if ceilings:
    def gb(v):
        return "-" if v is None else f"{v:.2f}"
    lines += ["", "| same host | block | ucx_perftest | memcpy, one cache-resident block | "
              "memcpy, 128 MB working set | granary |", "|---|---|---|---|---|---|"]
    for c in ceilings:
        lines.append(f"| {c['mode']} | {size_name(c['block_size'])} | {gb(c['ucx_perftest'])} | "
                     f"{gb(c['memcpy_hot'])} | {gb(c['memcpy_dram'])} | {gb(c['granary'])} |")
if cold_cli:
    lines += ["", "| cold CLI, 100 B, a new process per op | granary ms/op | redis-cli ms/op | "
              "ratio (redis-cli time / granary time) | ratio per round |", "|---|---|---|---|---|"]
    for c in cold_cli:
        rounds = ("-" if not c["round_ratios"] or len(c["round_ratios"]) < 2
                  else " ".join(f"{x:.2f}" for x in c["round_ratios"]))
        lines.append(f"| {c['op']} (redis-cli {'SET' if c['op'] == 'put' else 'GET'}) | "
                     f"{c['granary_ms']:.1f} | {c['redis_cli_ms']:.1f} | {c['ratio']:.2f}x | "
                     f"{rounds} |")
table = "\n".join(lines)
open(f"{out}/compare.md", "w").write(table + "\n")
print(table)

# gnuplot: GB/s against block size, default transports.
series = [("granary", "get", "default"), ("granary", "put", "default"),
          ("ucx_perftest", "get", "default"), ("ucx_perftest", "put", "default"),
          ("redis", "get", "default"), ("redis", "put", "default"),
          ("memcpy", "get", "default"),
          ("granary", "get", "tcp"), ("ucx_perftest", "get", "tcp")]
plots = []
for tool, mode, tls in series:
    pts = sorted((k[3], v["gbps"]) for k, v in med.items() if k[:3] == (tool, mode, tls))
    if not pts:
        continue
    name = f"{out}/series_{tool}_{mode}_{tls}.dat"
    with open(name, "w") as f:
        for s, g in pts:
            f.write(f"{s} {g}\n")
    plots.append(f"'{name}' using 1:2 with linespoints title '{tool} {mode} ({tls})'")
gp = f"""set terminal pngcairo size 1000,520
set output '{out}/bandwidth.png'
set logscale xy
set xlabel 'block size (bytes)'
set ylabel 'GB/s (10^9 B/s)'
set key outside right
set termoption noenhanced
set grid
set title 'granary vs references, loopback, median of runs'
plot {', '.join(plots)}
"""
open(f"{out}/bandwidth.gp", "w").write(gp)
