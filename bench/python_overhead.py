#!/usr/bin/python3
"""What the Python layer costs: batch_get_into and batch_put_from at batch 32 through
granary.mooncake.MooncakeDistributedStore, and granary_bench get/put (C++) at the same shapes,
against one master and one node started here, in the same run.

Both sides do the same work per batch: one thread, one registered buffer of batch x block
bytes, 32 keys per call; gets read a prefilled working set; puts recycle their keys (an
untimed batch_remove, then the timed batch_put_from), exactly as granary_bench put does.
Each shape gets a fresh master and node; in it the rounds alternate C++ and Python (and which
goes first), so that a slow spell of the machine hits both; the rates are the medians over the
rounds, and the ratio is the median over the rounds of each round's python / C++ keys per second
(the two runs of a round are adjacent in time).

Usage: /usr/bin/python3 bench/python_overhead.py [--sizes 4096,65536,1048576] [--duration 2]
       [--rounds 9] [--build build] [--json out.json] [--copy_threads N]
Needs the module built (PYTHONPATH=<build>/python is set here from --build).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGETS = {4096: 0.7, 65536: 0.9, 1048576: 0.9}
WARMUP = 1.0  # seconds of the same loop, untimed, on both sides before each measured run  # issue 14: python >= this x the C++ figure


EXTRA_BENCH_FLAGS = []  # --copy_threads, when given, for granary_bench as for the Python client


def cpp_rate(bench, master, mode, block, batch, duration):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([bench, mode, f"--master={master}", f"--block_size={block}B",
                        f"--batch={batch}", f"--duration={duration}", f"--warmup={WARMUP}",
                        f"--working_set={max(block * batch * 8, 64 << 20)}B", "--progress=never",
                        f"--out={out.name}"] + EXTRA_BENCH_FLAGS,
                       check=True, stdout=subprocess.DEVNULL)
        return json.load(open(out.name))[0]["keys_per_s"]


def remove_all(client, prefix):
    """Removes every key under `prefix` of the client's tenant (granary_bench leaves its
    working set in the store; the next run must not find the store fuller)."""
    while True:
        keys = [o.key for o in client.list(prefix, 10000).objects]
        if not keys:
            return
        client.batch_remove(keys, force=True)


def py_rate(store, mode, block, batch, duration, run):
    import numpy as np
    ws_keys = max(batch, max(block * batch * 8, 64 << 20) // block // batch * batch)
    buf = np.zeros(block * batch, dtype=np.uint8)
    buf[::4096] = np.arange(len(buf[::4096]), dtype=np.uint64).astype(np.uint8)
    base = buf.ctypes.data
    assert store.register_buffer(base, buf.nbytes) == 0
    ptrs = [base + j * block for j in range(batch)]
    sizes = [block] * batch
    key = lambda i: f"pyb/{run}/{mode}/{block}/{i}"
    try:
        if mode == "get":
            for i in range(0, ws_keys, batch):
                r = store.batch_put_from([key(i + j) for j in range(batch)], ptrs, sizes)
                assert all(x == 0 for x in r), r
        cursor, keys_done, busy = 0, 0, 0.0
        warm_end = time.monotonic() + WARMUP
        end = warm_end + duration
        while time.monotonic() < end:
            warm = time.monotonic() < warm_end  # the same loop, not counted
            keys = [key((cursor + j) % ws_keys) for j in range(batch)]
            cursor = (cursor + batch) % ws_keys
            if mode == "put":
                store.batch_remove(keys, force=True)  # untimed, as granary_bench's
                t0 = time.perf_counter()
                r = store.batch_put_from(keys, ptrs, sizes)
                dt = time.perf_counter() - t0
                ok = sum(1 for x in r if x == 0)
            else:
                t0 = time.perf_counter()
                r = store.batch_get_into(keys, ptrs, sizes)
                dt = time.perf_counter() - t0
                ok = sum(1 for x in r if x == block)
            if not warm:
                busy += dt
                keys_done += ok
        return keys_done / busy if busy > 0 else 0.0
    finally:  # what this run stored goes, so the next run starts from the same empty store
        for i in range(0, ws_keys, batch):
            store.batch_remove([key(i + j) for j in range(batch)], force=True)
        store.unregister_buffer(base)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4096,65536,1048576")
    ap.add_argument("--duration", type=float, default=2)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json", default="")
    ap.add_argument("--markdown", default="", help="also write the table here")
    ap.add_argument("--copy_threads", type=int, default=None,
                    help="client option copy_threads on both sides (default: the client's)")
    args = ap.parse_args()
    if args.copy_threads is not None:
        # The Python client reads its options from the environment (setup passes no config).
        os.environ["GRANARY_COPY_THREADS"] = str(args.copy_threads)
        EXTRA_BENCH_FLAGS.append(f"--copy_threads={args.copy_threads}")
    sys.path.insert(0, os.path.join(args.build, "python"))
    sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
    os.environ["GRANARY_BIN_DIR"] = os.path.join(args.build, "bin")
    from granary_cluster import Cluster
    from granary.mooncake import MooncakeDistributedStore
    import granary

    sizes = [int(s) for s in args.sizes.split(",")]
    bench = os.path.join(args.build, "bin", "granary_bench")
    rows = []
    for block in sizes:
        for mode in ("get", "put"):
            # A fresh master and node per shape, so that one shape's keys never fill the store
            # for the next; within it the tools alternate, and which goes first alternates too.
            with Cluster(segment_size="2GB") as c:
                bench_tenant = granary.Client(master=c.master, tenant_id="bench")
                store = MooncakeDistributedStore()
                rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", c.master)
                assert rc == 0, f"setup returned {rc}"
                cpp, py = [], []
                for r in range(args.rounds):
                    def run_cpp():
                        cpp.append(cpp_rate(bench, c.master, mode, block, args.batch,
                                            args.duration))
                        remove_all(bench_tenant, "bench/")
                    run_py = lambda: py.append(
                        py_rate(store, mode, block, args.batch, args.duration, r))
                    for f in ((run_cpp, run_py) if r % 2 == 0 else (run_py, run_cpp)):
                        f()
                store.close()
                bench_tenant.close()
            row = {"mode": mode, "block_size": block, "batch": args.batch,
                   "cpp_keys_per_s": statistics.median(cpp),
                   "python_keys_per_s": statistics.median(py)}
            # Each round's two runs are adjacent in time, so the ratio within a round sees one
            # state of the machine (on 2 cores the rate of either tool flips between two levels
            # some 20% apart, for seconds at a time); the figure is the median of those ratios.
            row["ratio"] = statistics.median(p / c for p, c in zip(py, cpp))
            row["round_ratios"] = [round(p / c, 3) for p, c in zip(py, cpp)]
            row["target"] = TARGETS.get(block)
            rows.append(row)
            print(f"{'batch_get_into' if mode == 'get' else 'batch_put_from':15} "
                  f"{block:>8} B  C++ {row['cpp_keys_per_s']:>10.0f} keys/s  "
                  f"Python {row['python_keys_per_s']:>10.0f} keys/s  "
                  f"ratio {row['ratio']:.2f} (target >= {row['target']})", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("| call | block | C++ keys/s | Python keys/s | ratio | target |\n"
                    "|---|---|---|---|---|---|\n")
            for r in rows:
                call = "batch_get_into" if r["mode"] == "get" else "batch_put_from"
                kib = r["block_size"] // 1024
                block = f"{kib // 1024} MiB" if kib >= 1024 else f"{kib} KiB"
                f.write(f"| {call} | {block} | {r['cpp_keys_per_s']:,.0f} | "
                        f"{r['python_keys_per_s']:,.0f} | {r['ratio']:.2f}x | "
                        f">= {r['target']}x |\n")


if __name__ == "__main__":
    main()
