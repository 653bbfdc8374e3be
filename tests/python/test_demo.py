"""scripts/demo.sh (README command 1) against this build tree, on free ports: it finishes with
status 0, shows the cold CLI figure and the warm granary_bench figures, the two tenants, the
quota refusal and `granary tenants`, and leaves no process of its own behind."""

import os
import subprocess

import pytest

from granary_cluster import bin_dir, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def installed_module_imports():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(["/usr/bin/python3", "-c", "import granary"], cwd="/", env=env,
                          capture_output=True).returncode == 0


def test_demo_shows_cold_and_warm_figures_tenants_and_a_quota_refusal():
    if not installed_module_imports():
        pytest.skip("the granary module is not installed for /usr/bin/python3 "
                    "(scripts/install_python.sh; scripts/test.sh runs it before the tests)")
    rpc, http = free_port(), free_port()
    env = dict(os.environ, GRANARY_DEMO_SKIP_BUILD="1", GRANARY_DEMO_RPC_PORT=str(rpc),
               GRANARY_DEMO_HTTP_PORT=str(http), GRANARY_DEMO_BENCH_SECONDS="1",
               GRANARY_BUILD_DIR=os.path.dirname(bin_dir()))
    r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "demo.sh")], env=env,
                       capture_output=True, text=True, timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    for needle in ("round trip byte-exact", "cold, one CLI process per transfer: put",
                   "warm get  1MB", "warm put  1MB", "warm get  4KB", "warm put  4KB",
                   "tenant-b reads demo/kv-block-0: 'tenant-b's own bytes'",
                   "QUOTA_EXCEEDED", "TENANT", "granary.Client.get_into: 67108864 bytes, "
                   "byte-exact: True", "== done"):
        assert needle in out, f"{needle!r} missing from the demo's output:\n{out}"
    warm = [line for line in out.splitlines() if line.strip().startswith("warm ")]
    assert len(warm) == 4 and all("GB/s" in w and "keys/s" in w for w in warm), warm
    table = out[out.index("== granary tenants"):]
    assert "tenant-a" in table and "tenant-b" in table, table
    # Everything the demo started is gone: nothing listens on its ports any more.
    left = subprocess.run(["pgrep", "-f", f"--rpc_port={rpc}"], capture_output=True, text=True)
    assert left.stdout.strip() == "", f"processes left behind: {left.stdout}"
