"""`granary put` / `get` of a large file show a progress line (bytes, share, rate) on a
terminal, and none when stderr is a pipe; the value still round-trips byte-exact."""

import os
import pty
import subprocess

import pytest

from granary_cluster import Cluster, bin_dir

CLUSTER_ARGS = {"segment_size": "256MB"}
MIB = 1 << 20


def run_on_terminal(argv):
    """Runs argv with stdin, stdout and stderr on a pseudo-terminal; (status, output)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(argv[0], argv)
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), out.decode(errors="replace")


@pytest.fixture(scope="module")
def one_cluster():
    with Cluster(**CLUSTER_ARGS) as c:
        yield c


def test_progress_on_a_terminal_and_not_in_a_pipe(one_cluster, tmp_path):
    data = os.urandom(96 * MIB)
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(data)
    cli = [os.path.join(bin_dir(), "granary"), f"--master={one_cluster.master}"]

    rc, out = run_on_terminal(cli + ["put", "big", str(src)])
    assert rc == 0, out
    assert "\rput big: 96 MB read of 96 MB (100%)" in out.replace("\x1b[K", ""), out
    assert "GB/s" in out  # the summary line after the progress line

    rc, out = run_on_terminal(cli + ["get", "big", str(dst)])
    assert rc == 0, out
    assert "\rget big: 96 MB written of 96 MB (100%)" in out.replace("\x1b[K", ""), out
    assert dst.read_bytes() == data

    # Not a terminal: no progress line, only the summary.
    r = subprocess.run(cli + ["put", "big2", str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stderr and "read of" not in r.stderr, r.stderr
    assert "GB/s" in r.stderr
    r = subprocess.run(cli + ["get", "big2", str(dst)], capture_output=True, text=True)
    assert r.returncode == 0 and "\r" not in r.stderr, r.stderr

    # Small values stay quiet on a terminal too.
    small = tmp_path / "small.bin"
    small.write_bytes(b"x" * 4096)
    rc, out = run_on_terminal(cli + ["put", "small", str(small)])
    assert rc == 0 and "\r" not in out.replace("\r\n", "\n"), out
