"""A real master and real nodes on loopback, as processes, for the Python tests.

Cluster(...) starts `granary_master` and N `granary_node` processes from GRANARY_BIN_DIR (set
by ctest; default build/bin), waits until every node's segment is mounted, and stops them all
(SIGKILL) on close() or at the end of a `with` block. Logs go to files under a temporary
directory, removed by close() unless GRANARY_KEEP_TEST_LOGS=1; `log(name)` reads one, and a
start that fails raises with the log's tail.
"""

import os
import random
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request


def bin_dir():
    d = os.environ.get("GRANARY_BIN_DIR")
    if d:
        return d
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "..", "build", "bin")


def _port_is_free(port):
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def free_port():
    """A port free now, below the kernel's ephemeral range, as tests/free_port.h picks them:
    a port from bind(0) is an ephemeral one, which the daemons' own outgoing connections can
    take before the daemon meant to listen on it binds it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            high = int(f.read().split()[0]) - 1
    except (OSError, ValueError, IndexError):
        high = 32767
    if high - 10000 >= 1000:
        for _ in range(200):
            port = random.randint(10000, high)
            if _port_is_free(port):
                return port
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(port, path, timeout=2.0):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.read().decode()


def metric(port, sample):
    """The value of one Prometheus sample (exact name with labels), or None."""
    for line in http_get(port, "/metrics").splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    return None


class Cluster:
    def __init__(self, nodes=1, segment_size="128MB", master_flags=(), node_flags=(), env=None,
                 policy_yaml=None, client_ttl_sec=2, lease_ttl_ms=5000):
        self.dir = tempfile.mkdtemp(prefix="granary_pytest_")
        self.env = dict(os.environ)
        self.env.update(env or {})
        self.bin = bin_dir()
        self.segment_size = segment_size
        # "{dir}" in a node flag is this cluster's own directory (a disk tier's, say).
        self.node_flags = [f.replace("{dir}", self.dir) for f in node_flags]
        self.procs = {}
        flags = ["--metrics_host=127.0.0.1", f"--client_ttl={client_ttl_sec}",
                 f"--default_kv_lease_ttl={lease_ttl_ms}", "--log_level=info"]
        if policy_yaml is not None:
            self.policy_path = os.path.join(self.dir, "tenants.yaml")
            with open(self.policy_path, "w") as f:
                f.write(policy_yaml)
            flags += ["--enable_multi_tenants=true", "--tenant_quota_connector_type=file",
                      f"--tenant_quota_connector_uri={self.policy_path}"]
        flags += list(master_flags)
        try:
            self._start_master(flags)
            for i in range(nodes):
                self.start_node(i)
            self.wait_segments(nodes)
        except Exception:
            self.close()
            raise

    def _start_master(self, flags, attempts=5):
        """Starts the master on two free ports. A port picked free can be taken (by some
        connection's ephemeral port) before the master binds it; then new ports are drawn."""
        for attempt in range(attempts):
            self.rpc_port, self.http_port = free_port(), free_port()
            self._start("master", [os.path.join(self.bin, "granary_master"),
                                   f"--rpc_port={self.rpc_port}",
                                   f"--metrics_port={self.http_port}"] + flags)
            try:
                self._wait(lambda: http_get(self.http_port, "/health") is not None, "master", 10)
                return
            except RuntimeError:
                log = self.log("master")
                port_taken = "already in use" in log or "cannot bind" in log
                if attempt + 1 == attempts or not port_taken:
                    raise
                self.kill("master")

    @property
    def master(self):
        return f"127.0.0.1:{self.rpc_port}"

    def start_node(self, i, segment_size=None, extra_flags=()):
        argv = [os.path.join(self.bin, "granary_node"), f"--master={self.master}",
                f"--host_segment_size={segment_size or self.segment_size}", "--metrics_port=0",
                "--local_hostname=127.0.0.1", "--log_level=info"]
        self._start(f"node{i}", argv + self.node_flags + list(extra_flags))

    def _start(self, name, argv):
        log = open(os.path.join(self.dir, f"{name}.log"), "w")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env)
        log.close()

    def log(self, name):
        with open(os.path.join(self.dir, f"{name}.log")) as f:
            return f.read()

    def _wait(self, ready, name, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.procs.get(name)
            if p is not None and p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode}:\n{self.log(name)[-2000:]}")
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{name} not ready after {timeout} s:\n{self.log(name)[-2000:]}")

    def segment_count(self):
        return int(metric(self.http_port, "granary_master_segments") or 0)

    def wait_segments(self, count, timeout=60):  # a node pre-faults its segment: ~4 s per GB here
        self._wait(lambda: self.segment_count() >= count, "master", timeout)

    def metric(self, sample):
        return metric(self.http_port, sample)

    def kill(self, name, sig=signal.SIGKILL):
        p = self.procs.get(name)
        if p is not None and p.poll() is None:
            p.send_signal(sig)
            p.wait()

    def close(self):
        for name in list(self.procs):
            self.kill(name)
        self.procs.clear()
        if os.environ.get("GRANARY_KEEP_TEST_LOGS") != "1":
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def grep_log(cluster, name, pattern):
    return re.findall(pattern, cluster.log(name))
