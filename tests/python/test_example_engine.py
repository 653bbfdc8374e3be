"""examples/prefix_cache_engine.py against a real master and node: the second request reuses
the shared prefix's blocks through lookup_prefix and loads them byte-exact."""

import os
import subprocess
import sys

from granary_cluster import Cluster

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "prefix_cache_engine.py")


def run_example(cluster):
    p = subprocess.run([sys.executable, EXAMPLE, "--master", cluster.master, "--tenant", "example"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "loaded blocks match byte for byte" in p.stdout, p.stdout
    return p.stdout


def test_example_engine_reuses_the_shared_prefix():
    with Cluster(segment_size="64MB") as c:
        out = run_example(c)
        assert "request 1: 8 blocks, 0 loaded" in out, out
        assert "request 2: 7 blocks, 5 loaded from Granary, 2 prefilled" in out, out
        # Run again: every block of both requests is there now.
        out = run_example(c)
        assert "request 1: 8 blocks, 8 loaded" in out, out
        assert "request 2: 7 blocks, 7 loaded" in out, out
