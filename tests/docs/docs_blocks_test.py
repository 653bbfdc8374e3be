#!/usr/bin/python3
"""Runs the shell, Python and C++ blocks of README.md and docs/**/*.md (ctest docs_blocks).

Every fenced block must name its language (`text` for output). A block in sh, bash, shell,
python or cpp is run, unless the line right before its fence says why not:

    <!-- not run: REASON -->

Blocks run against a master and a node this script starts on loopback, on free ports, with
multi-tenant quota on (tenants default, tenant-a and tenant-b) and an admin token. The
documented defaults are replaced before a block runs, so the docs keep the ports a reader
uses: 50051 and 50052 (masters' RPC ports), 9003 and 9004 (their admin ports), 9103, 2379 and
2380 become free ports, `build/bin/` the build tree's binaries and `/etc/granary/` a directory
of the test's own.
The environment has GRANARY_MASTER and the binaries on PATH; Python blocks import the build
tree's module. The keys of every tenant are removed after each block.

    <!-- run: fresh -->

before a shell block means that it starts its own master and node: it gets ports nothing
listens on, and its processes are killed when it ends. A shell block runs under
`set -eo pipefail` in a fresh directory; any exit status but 0 fails it. C++ blocks are built
against the installed package (cmake --install into a temporary prefix, find_package(granary))
and run. Every relative link of those files must name a file that exists, and a heading of it
when it has an anchor.

Usage: docs_blocks_test.py --source DIR --build DIR [--list] [--only SUBSTRING]
"""

import argparse
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SHELL = {"sh", "bash", "shell", "console"}
PYTHON = {"python", "py"}
CPP = {"cpp", "c++", "cc"}
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
NOT_RUN = re.compile(r"^\s*<!-- not run: (\S.*?) -->\s*$")
RUN = re.compile(r"^\s*<!-- run: (\S+) -->\s*$")
BLOCK_TIMEOUT_S = int(os.environ.get("GRANARY_DOCS_BLOCK_TIMEOUT", "120"))


class Block:
    def __init__(self, path, line, lang, text, not_run, mode):
        self.path, self.line, self.lang, self.text = path, line, lang, text
        self.not_run, self.mode = not_run, mode

    def where(self):
        return f"{self.path}:{self.line}"


def doc_files(source):
    files = [os.path.join(source, "README.md")]
    files += sorted(glob.glob(os.path.join(source, "docs", "**", "*.md"), recursive=True))
    return files


def extract(source, path):
    """The fenced blocks of one file, and the errors of its markup."""
    rel = os.path.relpath(path, source)
    lines = open(path, encoding="utf-8").read().split("\n")
    blocks, errors = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2).lower()
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*```\s*$", lines[j]):
            j += 1
        if j == len(lines):
            errors.append(f"{rel}:{i + 1}: a fence that is never closed")
            break
        body = "\n".join(l[len(indent):] if l.startswith(indent) else l for l in lines[i + 1:j])
        prev = lines[i - 1] if i > 0 else ""
        not_run = NOT_RUN.match(prev)
        run = RUN.match(prev)
        if not lang:
            errors.append(f"{rel}:{i + 1}: a fence without a language (use `text` for output)")
        elif run and run.group(1) != "fresh":
            errors.append(f"{rel}:{i}: unknown marker {prev.strip()!r}")
        elif run and lang not in SHELL:
            errors.append(f"{rel}:{i}: `run: fresh` is for shell blocks")
        blocks.append(Block(rel, i + 1, lang, body, not_run.group(1) if not_run else None,
                            run.group(1) if run else None))
        i = j + 1
    return blocks, errors


LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading):
    """The id Python-Markdown's toc (mkdocs) gives a heading."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[`*_]", "", text)
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path):
    ids, fenced = set(), False
    for line in open(path, encoding="utf-8"):
        if re.match(r"^\s*```", line):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            ids.add(slug(line.lstrip("#").strip()))
    return ids


def check_links(source, path):
    """Relative links of one file: the file exists, and an anchor names a heading there. mkdocs
    checks the pages' links but neither anchors nor README.md, which is outside its docs."""
    rel = os.path.relpath(path, source)
    errors, fenced = [], False
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        if re.match(r"^\s*```", line):
            fenced = not fenced
            continue
        if fenced:
            continue
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
            if not os.path.exists(dest):
                errors.append(f"{rel}:{n}: a link to {target}: no such file")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                errors.append(f"{rel}:{n}: a link to {target}: no such heading")
    return errors


def free_port():
    """A free port below the ephemeral range (as tests/free_port.h picks them)."""
    import random
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            high = int(f.read().split()[0]) - 1
    except (OSError, ValueError, IndexError):
        high = 32767
    for _ in range(200):
        port = random.randint(10000, high)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port")


def wait_for(what, check, seconds=20.0):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def http(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
        return r.read().decode()


class Env:
    """The test's work directory, ports, cluster and the substitutions of the docs' defaults."""

    def __init__(self, source, build):
        self.source, self.build = source, build
        self.bin = os.path.join(build, "bin")
        self.work = tempfile.mkdtemp(prefix="granary_docs_")
        self.etc = os.path.join(self.work, "etc", "granary")
        os.makedirs(self.etc)
        self.procs = []

    def ports(self):
        return {default: free_port()
                for default in ("50051", "50052", "9003", "9004", "9103", "2379", "2380")}

    def substitute(self, text, ports, etc):
        for default, port in ports.items():
            text = re.sub(rf"(?<![0-9]){default}(?![0-9])", str(port), text)
        text = text.replace("build/bin/", self.bin + "/")
        return text.replace("/etc/granary/", etc + "/").replace("/etc/granary", etc)

    def env(self, ports):
        env = dict(os.environ)
        env["PATH"] = self.bin + os.pathsep + env.get("PATH", "")
        env["GRANARY_MASTER"] = f"127.0.0.1:{ports['50051']}"
        env["PYTHONPATH"] = os.path.join(self.build, "python")
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("GRANARY_TENANT_ID", None)
        env.pop("GRANARY_CONFIG_PATH", None)
        return env

    def start_cluster(self):
        self.cluster_ports = self.ports()
        rpc, adm = self.cluster_ports["50051"], self.cluster_ports["9003"]
        with open(os.path.join(self.etc, "tenant_quotas.yaml"), "w") as f:
            f.write("version: 1\ntenants:\n" + "".join(
                f"  - name: {t}\n    quota: 1GB\n" for t in ("default", "tenant-a", "tenant-b")))
        with open(os.path.join(self.etc, "admin_token"), "w") as f:
            f.write("docs-test-admin-token\n")
        log = open(os.path.join(self.work, "master.log"), "w")
        self.procs.append(subprocess.Popen(
            [os.path.join(self.bin, "granary_master"), f"--rpc_port={rpc}",
             f"--metrics_port={adm}", "--metrics_host=127.0.0.1", "--enable_multi_tenants",
             f"--tenant_quota_connector_uri={self.etc}/tenant_quotas.yaml",
             f"--admin_token_file={self.etc}/admin_token"], stdout=log, stderr=log))
        wait_for("the master", lambda: "ok" in http(adm, "/health"))
        log = open(os.path.join(self.work, "node.log"), "w")
        self.procs.append(subprocess.Popen(
            [os.path.join(self.bin, "granary_node"), f"--master=127.0.0.1:{rpc}",
             "--host_segment_size=256MB", "--metrics_port=0", "--local_hostname=127.0.0.1"],
            stdout=log, stderr=log))
        wait_for("the node", lambda: "host0" in http(adm, "/api/v1/segments"))

    def clean_keys(self):
        """Removes every key of the cluster's tenants, so that blocks do not meet each other's."""
        cli = [os.path.join(self.bin, "granary"), f"--master=127.0.0.1:{self.cluster_ports['50051']}"]
        for tenant in ("default", "tenant-a", "tenant-b"):
            out = subprocess.run(cli + [f"--tenant_id={tenant}", "ls"], capture_output=True,
                                 text=True, timeout=30).stdout
            # `granary ls` prints "SIZE  STATE  KEY" per object.
            keys = [line.split(None, 2)[2] for line in out.splitlines()
                    if len(line.split(None, 2)) == 3]
            for k in keys:
                subprocess.run(cli + [f"--tenant_id={tenant}", "rm", "--force", k],
                               capture_output=True, timeout=30)

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()
        if os.environ.get("GRANARY_KEEP_TEST_LOGS") != "1":
            shutil.rmtree(self.work, ignore_errors=True)


def run_process(cmd, cwd, env, timeout=None):
    """Runs cmd in a session of its own and kills the whole session when it ends. The output
    goes to a file, not a pipe: daemons a block leaves running must not hold the test up."""
    timeout = timeout or BLOCK_TIMEOUT_S
    with tempfile.TemporaryFile(mode="w+") as out:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = f"timeout after {timeout} s"
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        out.seek(0)
        return rc, out.read()


def run_shell(env, block, n):
    fresh = block.mode == "fresh"
    ports = env.ports() if fresh else env.cluster_ports
    etc = os.path.join(env.work, f"etc{n}") if fresh else env.etc
    os.makedirs(etc, exist_ok=True)
    cwd = tempfile.mkdtemp(dir=env.work, prefix=f"block{n}_")
    script = ("set -x\n" if os.environ.get("GRANARY_DOCS_TRACE") else "") + "set -eo pipefail\n" + env.substitute(block.text, ports, etc) + "\n"
    return run_process(["bash", "-c", script], cwd, env.env(ports))


def run_python(env, block, n):
    cwd = tempfile.mkdtemp(dir=env.work, prefix=f"block{n}_")
    path = os.path.join(cwd, "block.py")
    with open(path, "w") as f:
        f.write(env.substitute(block.text, env.cluster_ports, env.etc) + "\n")
    return run_process(["/usr/bin/python3", path], cwd, env.env(env.cluster_ports))


def build_cpp(env, blocks):
    """Installs the build into a prefix and builds every C++ block against it (one project)."""
    prefix = os.path.join(env.work, "prefix")
    r = subprocess.run(["cmake", "--install", env.build, "--prefix", prefix],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, "cmake --install failed:\n" + r.stdout + r.stderr
    proj = os.path.join(env.work, "cpp")
    os.makedirs(proj)
    cml = ["cmake_minimum_required(VERSION 3.22)", "project(docs_blocks LANGUAGES CXX)",
           "set(CMAKE_CXX_STANDARD 20)", "set(CMAKE_CXX_STANDARD_REQUIRED ON)",
           "find_package(granary REQUIRED)"]
    for n, b in blocks:
        with open(os.path.join(proj, f"block{n}.cc"), "w") as f:
            f.write(env.substitute(b.text, env.cluster_ports, env.etc) + "\n")
        cml += [f"add_executable(block{n} block{n}.cc)",
                f"target_link_libraries(block{n} PRIVATE granary::client)",
                f"target_compile_options(block{n} PRIVATE -Wall -Wextra -Werror)"]
    with open(os.path.join(proj, "CMakeLists.txt"), "w") as f:
        f.write("\n".join(cml) + "\n")
    out = os.path.join(proj, "build")
    for cmd in (["cmake", "-S", proj, "-B", out, f"-DCMAKE_PREFIX_PATH={prefix}"],
                ["cmake", "--build", out, "-j", os.environ.get("GRANARY_JOBS", "2")]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0 and cmd[1] == "-S":
            return None, "configure failed:\n" + r.stdout + r.stderr
        log = r.stdout + r.stderr
    return out, log


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    ap.add_argument("--list", action="store_true", help="list the blocks and exit")
    ap.add_argument("--only", help="run only the blocks whose file:line contains this")
    args = ap.parse_args()
    source, build = os.path.abspath(args.source), os.path.abspath(args.build)

    blocks, errors = [], []
    for path in doc_files(source):
        b, e = extract(source, path)
        blocks += b
        errors += e + check_links(source, path)
    runnable = [b for b in blocks if b.lang in SHELL | PYTHON | CPP]
    marked = [b for b in runnable if b.not_run]
    to_run = [b for b in runnable if not b.not_run]
    if args.list:
        for e in errors:
            print("FAIL", e)
        for b in runnable:
            print(f"{b.where():40} {b.lang:7} {'not run: ' + b.not_run if b.not_run else 'run' + (' (fresh)' if b.mode else '')}")
        print(f"{len(to_run)} to run, {len(marked)} marked not run, "
              f"{len(blocks) - len(runnable)} other blocks")
        return 1 if errors else 0
    for e in errors:
        print("FAIL", e)
    if args.only:
        to_run = [b for b in to_run if args.only in b.where()]

    failures = list(errors)
    env = Env(source, build)
    try:
        env.start_cluster()
        numbered = list(enumerate(to_run))
        cpp = [(n, b) for n, b in numbered if b.lang in CPP]
        cpp_dir, cpp_log = (build_cpp(env, cpp) if cpp else (None, ""))
        for n, b in numbered:
            start = time.time()
            if b.lang in SHELL:
                rc, out = run_shell(env, b, n)
            elif b.lang in PYTHON:
                rc, out = run_python(env, b, n)
            else:
                exe = os.path.join(cpp_dir, f"block{n}") if cpp_dir else None
                if not exe or not os.path.exists(exe):
                    rc, out = "did not build", cpp_log
                else:
                    rc, out = run_process([exe], env.work, env.env(env.cluster_ports))
            took = time.time() - start
            if rc == 0:
                print(f"ok   {b.where()} ({b.lang}, {took:.1f} s)")
            else:
                print(f"FAIL {b.where()} ({b.lang}): exit {rc}\n{out}")
                failures.append(b.where())
            env.clean_keys()
    finally:
        env.close()
    print(f"{len(to_run)} blocks run, {len(to_run) - len(failures) + len(errors)} passed; "
          f"{len(marked)} marked not run")
    for b in marked:
        print(f"     not run: {b.where()}: {b.not_run}")
    if failures:
        print("failed:", ", ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
