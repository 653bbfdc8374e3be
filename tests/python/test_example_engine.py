"""examples/prefix_cache_engine.py against a real master and node: the second request reuses
the shared prefix's blocks through lookup_prefix and loads them byte-exact."""

import os
import subprocess
import sys

from granary_cluster import Cluster

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def test_example_engine_reuses_the_shared_prefix():
    with Cluster(segment_size="64MB") as c:
        p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "prefix_cache_engine.py"),
                            "--master", c.master, "--tenant", "example"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "request 1: 8 blocks, 0 loaded" in p.stdout, p.stdout
        assert "request 2: 7 blocks, 5 loaded from Granary, 2 prefilled" in p.stdout, p.stdout
        assert "loaded blocks match byte for byte" in p.stdout, p.stdout
        # Run again: request 1's blocks are all there now.
        p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "prefix_cache_engine.py"),
                            "--master", c.master, "--tenant", "example"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "request 1: 8 blocks, 8 loaded" in p.stdout, p.stdout
        assert "request 2: 7 blocks, 7 loaded" in p.stdout, p.stdout
