"""The shipped deploy files start: every systemd unit's ExecStart (with its Environment=
defaults, %i = tenant-a) and every container command in deploy/k8s/ is run against the built
binaries on loopback, with only values changed (ports, sizes, file paths, the master's
address), never a flag dropped. A flag the binary does not have fails gflags' parse, so each
flag is checked by running it; the master answers /health, each node mounts its segment and
stops cleanly on SIGTERM. The etcd StatefulSet's command runs against the etcd on PATH (as one
member on loopback; skipped where etcd is not installed) and a master keeps its policy there.
systemd-analyze verify checks the units where systemd is installed."""

import glob
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time

import pytest
import yaml

from granary_cluster import bin_dir, free_port, http_get

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNITS = sorted(glob.glob(os.path.join(ROOT, "deploy", "systemd", "*.service")))
MANIFESTS = sorted(glob.glob(os.path.join(ROOT, "deploy", "k8s", "*.yaml")))
INSTANCE = "tenant-a"


GRANARY_BINARIES = {"granary_master", "granary_node"}
ETCD = shutil.which("etcd")


def unit_command(path):
    """(binary name, argv after it) of a unit's ExecStart, expanded as systemd would with the
    unit's Environment= defaults (EnvironmentFile= adds nothing: none ships)."""
    env, lines, cont = {}, [], None
    for raw in open(path):
        line = raw.rstrip("\n")
        if cont is not None:
            cont += " " + line.rstrip("\\").strip()
            if not line.endswith("\\"):
                lines.append(cont)
                cont = None
            continue
        if line.startswith("Environment="):
            k, v = line[len("Environment="):].split("=", 1)
            env[k] = v
        elif line.startswith("ExecStart="):
            cont = line[len("ExecStart="):].rstrip("\\").strip()
            if not line.endswith("\\"):
                lines.append(cont)
                cont = None
    assert len(lines) == 1, f"{path}: one ExecStart expected"
    cmd = lines[0].replace("%i", INSTANCE)
    cmd = re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), cmd)
    words = []
    for w in shlex.split(cmd):  # a bare $VAR splits into words, and vanishes when empty
        words += env.get(w[1:], "").split() if re.fullmatch(r"\$\w+", w) else [w]
    return os.path.basename(words[0]), words[1:]


def container_commands(path):
    for doc in yaml.safe_load_all(open(path)):
        spec = (doc or {}).get("spec", {}).get("template", {}).get("spec", {})
        for c in spec.get("containers", []):
            if c.get("command"):
                yield f"{os.path.basename(path)}:{c['name']}", \
                    os.path.basename(c["command"][0]), c["command"][1:] + c.get("args", [])


def all_commands():
    out = [(os.path.basename(u),) + unit_command(u) for u in UNITS]
    for m in MANIFESTS:
        out += list(container_commands(m))
    return out


def cgroups_writable():
    if os.geteuid() != 0:
        return False
    for base in ("/sys/fs/cgroup/memory", "/sys/fs/cgroup"):
        probe = os.path.join(base, f"granary-deploy-probe-{os.getpid()}")
        try:
            os.mkdir(probe)
            os.rmdir(probe)
            return os.path.exists(os.path.join(base, "memory.limit_in_bytes")) or \
                "memory" in open(os.path.join(base, "cgroup.controllers")).read()
        except OSError:
            continue
    return False


class Loopback:
    """Rewrites flag values for this machine; returns the argv to run."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.policy = os.path.join(tmp, "tenant_quotas.yaml")
        with open(self.policy, "w") as f:
            f.write("version: 1\ntenants:\n  - name: tenant-a\n    quota: 1GB\n")
        self.token = os.path.join(tmp, "admin_token")
        with open(self.token, "w") as f:
            f.write("deploy-test-token\n")
        self.master = None
        self.cgroups = cgroups_writable()

    def flags(self, binary, args):
        out = []
        for a in args:
            name, _, value = a.partition("=")
            if name in ("--rpc_port", "--metrics_port"):
                a = f"{name}={free_port()}"
            elif name == "--metrics_host":
                a = f"{name}=127.0.0.1"
            elif name == "--tenant_quota_connector_uri" and value.endswith(".yaml"):
                a = f"{name}={self.policy}"
            elif name == "--admin_token_file":
                a = f"{name}={self.token}"
            elif name == "--master":
                a = f"{name}={self.master}"
            elif name == "--host_segment_size":
                a = f"{name}=64MB"
            elif name == "--memory_limit":
                a = f"{name}=256MB"
            elif name == "--cgroup":
                a = f"{name}={value}-{os.getpid()}"
            out.append(a)
        if not self.cgroups and any(a.startswith("--cgroup=") for a in out):
            return None  # checked against --helpfull instead
        return [os.path.join(bin_dir(), binary)] + out


def flag_names(args):
    return {a.split("=", 1)[0] for a in args if a.startswith("--")}


def known_flags(binary):
    """The flags a binary lists, as "-name": gflags' --helpfull ("  -name (...)"), etcd's --help
    ("  --name 'default'")."""
    if binary == "etcd":
        text = subprocess.run([ETCD, "--help"], capture_output=True, text=True)
        return {"-" + f for f in re.findall(r"^\s+--([\w-]+)", text.stdout + text.stderr, re.M)}
    text = subprocess.run([os.path.join(bin_dir(), binary), "--helpfull"], capture_output=True,
                          text=True).stdout
    return set(re.findall(r"^\s+(-\w+)", text, re.M))


def etcd_loopback(args, tmp):
    """The etcd StatefulSet's argv as one member on loopback: every URL, the name, the cluster
    and the data dir changed, no flag dropped. Returns (argv, client port)."""
    client, peer = free_port(), free_port()
    values = {
        "--name": "deploy-test",
        "--data-dir": os.path.join(tmp, "etcd-data"),
        "--listen-client-urls": f"http://127.0.0.1:{client}",
        "--advertise-client-urls": f"http://127.0.0.1:{client}",
        "--listen-peer-urls": f"http://127.0.0.1:{peer}",
        "--initial-advertise-peer-urls": f"http://127.0.0.1:{peer}",
        "--initial-cluster": f"deploy-test=http://127.0.0.1:{peer}",
    }
    out = []
    for a in args:
        name = a.partition("=")[0]
        out.append(f"{name}={values[name]}" if name in values else a)
    return [ETCD] + out, client


def test_every_flag_in_the_deploy_files_exists():
    cmds = all_commands()
    assert {b for _, b, _ in cmds} == GRANARY_BINARIES | {"etcd"}, cmds
    binaries = sorted(GRANARY_BINARIES) + (["etcd"] if ETCD else [])
    known = {b: known_flags(b) for b in binaries}
    for where, binary, args in cmds:
        if binary not in known:
            continue  # etcd not installed here: its command is not checked
        missing = {f for f in flag_names(args) if "-" + f.lstrip("-") not in known[binary]}
        assert not missing, f"{where}: {binary} has no flag {sorted(missing)}"


@pytest.mark.skipif(ETCD is None, reason="etcd is not installed")
def test_the_etcd_statefulset_command_serves_a_masters_policy(tmp_path):
    [(where, args)] = [(w, a) for w, b, a in all_commands() if b == "etcd"]
    argv, client = etcd_loopback(args, str(tmp_path))
    procs = []
    try:
        etcd_log = open(tmp_path / "etcd.log", "w")
        etcd = subprocess.Popen(argv, stdout=etcd_log, stderr=subprocess.STDOUT)
        procs.append(etcd)
        wait(lambda: get(client, "/health") is not None or etcd.poll() is not None,
             f"{where} to answer /health")
        assert etcd.poll() is None, open(tmp_path / "etcd.log").read()
        # The master's etcd connector (master.yaml's commented lines) keeps the policy there.
        http = free_port()
        master_log = open(tmp_path / "master.log", "w")
        master = subprocess.Popen(
            [os.path.join(bin_dir(), "granary_master"), f"--rpc_port={free_port()}",
             f"--metrics_port={http}", "--metrics_host=127.0.0.1", "--enable_multi_tenants=true",
             "--tenant_quota_connector_type=etcd",
             f"--tenant_quota_connector_uri=127.0.0.1:{client}"],
            stdout=master_log, stderr=subprocess.STDOUT)
        procs.append(master)
        wait(lambda: get(http, "/health") is not None or master.poll() is not None,
             "the master on etcd to answer /health")
        assert master.poll() is None, open(tmp_path / "master.log").read()
        assert '"policy_store_ok":true' in get(http, "/health"), get(http, "/health")
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


def get(port, path):
    try:
        return http_get(port, path)
    except OSError:  # not listening yet (URLError is an OSError)
        return None


def wait(predicate, what, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def segments(port):
    body = get(port, "/api/v1/segments")
    return body.count('"segment_id"') if body else 0


def test_every_deploy_command_starts_and_mounts_on_loopback():
    tmp = tempfile.mkdtemp(prefix="granary_deploy_")
    loop = Loopback(tmp)
    procs = []
    try:
        def start(where, argv):
            log = open(os.path.join(tmp, re.sub(r"\W", "_", where) + ".log"), "w")
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            procs.append(p)
            return p, log.name

        cmds = all_commands()  # etcd's runs in its own test
        masters = [(w, a) for w, b, a in cmds if b == "granary_master"]
        nodes = [(w, a) for w, b, a in cmds if b == "granary_node"]
        assert masters and nodes
        http = None
        for where, args in masters:  # each master definition starts; the last one stays
            argv = loop.flags("granary_master", args)
            p, log = start(where, argv)
            port = int(next(a for a in argv if a.startswith("--metrics_port=")).split("=")[1])
            rpc = int(next(a for a in argv if a.startswith("--rpc_port=")).split("=")[1])
            wait(lambda: get(port, "/health") is not None or p.poll() is not None,
                 f"{where} to answer /health")
            assert p.poll() is None, f"{where} exited: {open(log).read()}"
            if http is not None:
                prev.send_signal(signal.SIGTERM)
                prev.wait(30)
            prev, http, loop.master = p, port, f"127.0.0.1:{rpc}"
        for where, args in nodes:
            argv = loop.flags("granary_node", args)
            if argv is None:
                continue  # --cgroup without writable cgroups: the flag check above covers it
            before = segments(http)
            p, log = start(where, argv)
            wait(lambda: segments(http) > before or p.poll() is not None, f"{where} to mount")
            assert p.poll() is None, f"{where} exited: {open(log).read()}"
            p.send_signal(signal.SIGTERM)
            assert p.wait(60) == 0, f"{where}: {open(log).read()}"
            wait(lambda: segments(http) == before, f"{where} to unmount")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd is not installed")
def test_systemd_analyze_verify_accepts_the_units(tmp_path):
    names = []
    for u in UNITS:
        text = open(u).read().replace("/usr/local/bin/", os.path.abspath(bin_dir()) + "/")
        name = os.path.basename(u).replace("@.service", f"@{INSTANCE}.service")
        (tmp_path / name).write_text(text)
        names.append(str(tmp_path / name))
    r = subprocess.run(["systemd-analyze", "verify"] + names, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
