#!/usr/bin/env python3
"""Mixed-version clusters and a rolling upgrade on loopback (run by upgrade_test.sh).

  upgrade_cluster.py --old DIR --new DIR --work DIR [--old_name S] [--new_name S]

DIRs hold granary_master, granary_node and granary (the CLI). Three runs, each on fresh ports:

  mixed-old-node    a new master, an old node; the new and the old CLI put and read each
                    other's values;
  mixed-new-node    an old master, a new node; the same;
  rolling           an old master and two old nodes under a writer and a reader (CLI
                    processes, two replicas per value); each node, then the master, then the
                    client is replaced by its new binary, one at a time.

It fails on any wrong byte, on any operation that still fails after the retries a restart
implies (RETRIES attempts, RETRY_SEC apart), and on a lost value that no node restart explains
(only values written before some node was replaced may be gone: its memory went with it).
"""

import argparse
import hashlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

RETRIES = 60  # attempts per operation: 15 s, more than a restart takes
RETRY_SEC = 0.25
CLI_TIMEOUT = 30


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def value_of(key):
    """The bytes stored under key: 1 to 60 KB (inline and one-sided paths), derived from it."""
    seed = hashlib.sha256(key.encode()).digest()
    size = 1000 + int.from_bytes(seed[:4], "little") % 60000
    return (seed * (size // len(seed) + 1))[:size]


class Proc:
    def __init__(self, argv, log):
        self.argv = argv
        self.log = log
        self.p = subprocess.Popen(argv, stdout=open(log, "ab"), stderr=subprocess.STDOUT)

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


class Cluster:
    def __init__(self, work, name):
        self.dir = os.path.join(work, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.port = free_port()
        self.master = None
        self.nodes = []
        self.seq = 0
        self.lock = threading.Lock()

    def log(self, what):
        with self.lock:
            self.seq += 1
            return os.path.join(self.dir, "%s%d.log" % (what, self.seq))

    def start_master(self, bindir):
        self.master = Proc([os.path.join(bindir, "granary_master"),
                            "--rpc_host=127.0.0.1", "--rpc_port=%d" % self.port,
                            "--metrics_host=127.0.0.1", "--metrics_port=0", "--client_ttl=3"],
                           self.log("master"))

    def start_node(self, bindir, index=None):
        p = Proc([os.path.join(bindir, "granary_node"), "--master=127.0.0.1:%d" % self.port,
                  "--host_segment_size=64MB", "--rpc_host=127.0.0.1", "--metrics_port=0",
                  "--metrics_host=127.0.0.1", "--local_hostname=127.0.0.1"], self.log("node"))
        if index is None:
            self.nodes.append(p)
        else:
            self.nodes[index] = p

    def cli(self, bindir, *args):
        log = self.log("cli")
        try:
            r = subprocess.run([os.path.join(bindir, "granary"),
                                "--master=127.0.0.1:%d" % self.port] + list(args),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=CLI_TIMEOUT)
            out, rc = r.stdout.decode(errors="replace"), r.returncode
        except subprocess.TimeoutExpired:
            out, rc = "timed out after %d s" % CLI_TIMEOUT, 124
        with open(log, "w") as f:
            f.write(out)
        return rc, out

    def wait_segments(self, bindir, count, timeout=60):
        """Until `granary segments` lists exactly `count` host segments."""
        deadline = time.time() + timeout
        out = ""
        while time.time() < deadline:
            rc, out = self.cli(bindir, "segments")
            if rc == 0 and sum(1 for line in out.splitlines() if " host " in line) == count:
                return
            time.sleep(0.2)
        raise RuntimeError("%d segments did not appear within %d s; last: %s" %
                           (count, timeout, out))

    def stop(self):
        for p in self.nodes + ([self.master] if self.master else []):
            p.stop()

    def dump_logs(self):
        for name in sorted(os.listdir(self.dir)):
            if name.startswith(("master", "node")):
                with open(os.path.join(self.dir, name), errors="replace") as f:
                    tail = f.read()[-3000:]
                print("---- %s/%s (tail)\n%s" % (self.dir, name, tail))


class Failure(Exception):
    pass


def put(cluster, bindir, key, attempts_out=None):
    path = os.path.join(cluster.dir, "in-" + key.replace("/", "_"))
    with open(path, "wb") as f:
        f.write(value_of(key))
    out = ""
    for attempt in range(1, RETRIES + 1):
        rc, out = cluster.cli(bindir, "--replica_num=%d" % min(2, len(cluster.nodes)),
                              "put", key, path)
        if rc == 0:
            os.remove(path)
            if attempts_out is not None:
                attempts_out.append(attempt)
            return
        time.sleep(RETRY_SEC)
    raise Failure("put %s failed %d times; last: %s" % (key, RETRIES, out.strip()))


def get(cluster, bindir, key, retries=RETRIES, attempts_out=None):
    """The value's bytes, or None when it stays NOT_FOUND; Failure on wrong bytes."""
    path = os.path.join(cluster.dir, "out-" + threading.current_thread().name)
    out = ""
    for attempt in range(1, retries + 1):
        rc, out = cluster.cli(bindir, "get", key, path)
        if rc == 0:
            with open(path, "rb") as f:
                data = f.read()
            if data != value_of(key):
                raise Failure("WRONG BYTES for %s: %d bytes read, %d written" %
                              (key, len(data), len(value_of(key))))
            if attempts_out is not None:
                attempts_out.append(attempt)
            return data
        if rc == 1 and "NOT_FOUND" in out and attempt >= 8:
            return None  # not an outage: it is gone
        time.sleep(RETRY_SEC)
    if "NOT_FOUND" in out:
        return None
    raise Failure("get %s failed %d times; last: %s" % (key, retries, out.strip()))


def mixed(args, work, name, master_bin, node_bin):
    c = Cluster(work, name)
    try:
        c.start_master(master_bin)
        c.start_node(node_bin)
        c.wait_segments(args.new, 1)
        for i, (writer, reader) in enumerate([(args.new, args.old), (args.old, args.new),
                                              (args.new, args.new), (args.old, args.old)]):
            key = "%s/%d" % (name, i)
            put(c, writer, key)
            if get(c, reader, key) is None:
                raise Failure("%s: %s written by one CLI is not found by the other" % (name, key))
        print("upgrade: %s: ok (master %s, node %s)" %
              (name, label(args, master_bin), label(args, node_bin)))
    except Exception:
        c.dump_logs()
        raise
    finally:
        c.stop()


def label(args, bindir):
    return args.old_name if bindir == args.old else args.new_name


def rolling(args, work):
    c = Cluster(work, "rolling")
    state = {"client": args.old, "stop": False, "error": None}
    written = []  # (key, time acknowledged)
    replaced_nodes = []  # times at which a node was stopped
    put_attempts, get_attempts = [], []
    reads = {"ok": 0, "gone": 0}
    lock = threading.Lock()

    def writer():
        i = 0
        try:
            while not state["stop"]:
                key = "roll/%d" % i
                put(c, state["client"], key, put_attempts)
                with lock:
                    written.append((key, time.time()))
                i += 1
        except Exception as e:  # noqa: BLE001 (reported below)
            state["error"] = e

    def reader():
        try:
            while not state["stop"]:
                with lock:
                    if not written:
                        pick = None
                    else:
                        pick = random.choice(written[-50:] if random.random() < 0.7 else written)
                if pick is None:
                    time.sleep(0.1)
                    continue
                key, acked = pick
                data = get(c, state["client"], key, attempts_out=get_attempts)
                if data is not None:
                    reads["ok"] += 1
                    continue
                with lock:
                    explained = any(t > acked for t in replaced_nodes)
                    if explained:
                        written.remove(pick)
                if not explained:
                    raise Failure("%s is gone though no node was replaced after it was written"
                                  % key)
                reads["gone"] += 1
        except Exception as e:  # noqa: BLE001
            state["error"] = e

    try:
        c.start_master(args.old)
        c.start_node(args.old)
        c.start_node(args.old)
        c.wait_segments(args.old, 2)
        threads = [threading.Thread(target=writer, name="writer"),
                   threading.Thread(target=reader, name="reader")]
        for t in threads:
            t.start()

        def settle(seconds):
            end = time.time() + seconds
            while time.time() < end:
                if state["error"]:
                    raise state["error"]
                time.sleep(0.1)

        settle(3)
        for i in range(2):
            with lock:
                replaced_nodes.append(time.time())
            c.nodes[i].stop()
            c.start_node(args.new, i)
            c.wait_segments(args.new, 2)
            print("upgrade: rolling: node %d now runs %s" % (i, args.new_name))
            settle(3)
        c.master.stop()
        c.start_master(args.new)
        c.wait_segments(args.new, 2)
        print("upgrade: rolling: the master now runs %s" % args.new_name)
        settle(3)
        state["client"] = args.new
        print("upgrade: rolling: the reader and the writer now run %s" % args.new_name)
        settle(3)
        state["stop"] = True
        for t in threads:
            t.join(CLI_TIMEOUT * 2)
        if state["error"]:
            raise state["error"]
        # Everything written after the last node replacement reads back, exactly.
        last = max(replaced_nodes)
        kept = [k for k, t in written if t > last]
        for key in kept:
            if get(c, args.new, key) is None:
                raise Failure("%s, written after every node restart, is gone" % key)
        if len(written) < 10 or reads["ok"] < 10:
            raise Failure("too little traffic to judge: %d writes, %d reads" %
                          (len(written), reads["ok"]))
        print("upgrade: rolling: ok: %d values written, %d reads, %d checked at the end, %d gone "
              "with a node restart; retries: puts %d (most %d), gets %d (most %d)" %
              (len(written), reads["ok"], len(kept), reads["gone"],
               sum(put_attempts) - len(put_attempts), max(put_attempts, default=1),
               sum(get_attempts) - len(get_attempts), max(get_attempts, default=1)))
    except Exception:
        state["stop"] = True
        c.dump_logs()
        raise
    finally:
        state["stop"] = True
        c.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--old_name", default="old")
    ap.add_argument("--new_name", default="new")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    try:
        mixed(args, args.work, "mixed-old-node", args.new, args.old)
        mixed(args, args.work, "mixed-new-node", args.old, args.new)
        rolling(args, args.work)
    except Failure as e:
        print("upgrade: FAILED: %s" % e, file=sys.stderr)
        return 1
    print("upgrade: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
