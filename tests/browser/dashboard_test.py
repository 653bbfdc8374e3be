"""The master's dashboard in a real browser (run by run.sh; ctest test `browser_dashboard`).

Starts two real clusters with tests/python/granary_cluster.py, each a granary_master and one
granary_node:
  - quota on: --enable_multi_tenants, a policy of tenant-a and tenant-b whose requests sum past
    the node's capacity (so effective < requested), --admin_token_file; tenant-a holds three
    objects, tenant-b four with max_entries 2 (two evicted);
  - quota off: a plain master with one object.
Objects go in through the `granary` CLI. Then dashboard.mjs drives headless Chromium against
both and checks the page (see there); the screenshot lands in GRANARY_ARTIFACT_DIR.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from granary_cluster import Cluster, bin_dir  # noqa: E402

MiB = 1024 * 1024
POLICY = """version: 1
tenants:
  - name: tenant-a
    quota: 24MB
  - name: tenant-b
    quota: 16MB
    max_entries: 2
"""


def put(cluster, tenant, key, size):
    """One object through the CLI; its bytes are the key repeated."""
    data = (key.encode() * (size // len(key) + 1))[:size]
    r = subprocess.run([os.path.join(bin_dir(), "granary"), f"--master={cluster.master}",
                        f"--tenant_id={tenant}", "put", key, "-"],
                       input=data, capture_output=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError(f"granary put {tenant}/{key}: exit {r.returncode}: {r.stderr.decode()}")


def main():
    artifacts = os.environ.get("GRANARY_ARTIFACT_DIR") or os.path.join(HERE, "..", "..", "build",
                                                                      "test-artifacts")
    os.makedirs(artifacts, exist_ok=True)
    screenshot = os.path.join(artifacts, "dashboard.png")
    work = tempfile.mkdtemp(prefix="granary_browser_")
    try:
        run(work, screenshot)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run(work, screenshot):
    token = "dashboard-test-token"
    token_file = os.path.join(work, "admin_token")
    with open(token_file, "w") as f:
        f.write(token + "\n")

    # 32 MB of capacity against 40 MB requested: both are scaled down.
    with Cluster(segment_size="32MB", policy_yaml=POLICY,
                 master_flags=[f"--admin_token_file={token_file}"]) as quota, \
            Cluster(segment_size="16MB") as plain:
        for i in range(3):
            put(quota, "tenant-a", f"a/{i}", 1 * MiB)
        for i in range(4):
            put(quota, "tenant-b", f"b/{i}", 256 * 1024)
        put(plain, "default", "k", 4096)
        config = {
            "chromium": os.environ["GRANARY_CHROMIUM"],
            "screenshot": screenshot,
            "quota": {"url": f"http://127.0.0.1:{quota.http_port}", "token": token,
                      "new_tenant": "tenant-c",
                      "requested": {"tenant-a": "24 MB", "tenant-b": "16 MB"},
                      "evicted": {"tenant-a": 0, "tenant-b": 2}},
            "plain": {"url": f"http://127.0.0.1:{plain.http_port}"},
        }
        config_path = os.path.join(work, "config.json")
        with open(config_path, "w") as f:
            json.dump(config, f)
        r = subprocess.run(["node", os.path.join(HERE, "dashboard.mjs"), config_path],
                           cwd=HERE, timeout=90)
    if r.returncode != 0:
        sys.exit(f"dashboard.mjs failed with exit status {r.returncode}")
    if not os.path.getsize(screenshot):
        sys.exit(f"empty screenshot {screenshot}")


if __name__ == "__main__":
    main()
