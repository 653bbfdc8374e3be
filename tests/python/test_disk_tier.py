"""The disk tier from Python: puts with tier="disk" against a real master and a node started
with --disk_path, read back byte-exact through granary.Client and through the Mooncake class,
whose replica descriptors then say disk replica (is_disk_replica) truthfully."""

import os

import granary
import pytest
from mooncake_util import store_on

# The tier in each cluster's own directory (each transport's cluster starts with an empty one).
CLUSTER_ARGS = {"node_flags": ["--disk_path={dir}", "--disk_size=64MB"]}


def test_disk_puts_read_back_and_say_they_are_on_disk(cluster, key):
    values = {f"{key}/{n}": os.urandom(n) for n in (1, 4096, 300000)}
    with granary.Client(master=cluster.master) as c:
        keys = list(values)
        assert c.batch_put(keys, [values[k] for k in keys], tier="disk") == [None] * len(keys)
        assert c.batch_get(keys) == [values[k] for k in keys]
        for k in keys:
            assert c.stat(k).replica_tiers == ["disk"], k
        # A host put beside them is a memory replica.
        c.put(f"{key}/host", b"h" * 100)
        assert c.stat(f"{key}/host").replica_tiers == ["host"]
        tiers = {s.tier for s in c.segments()}
        assert tiers == {"host", "disk"}, tiers
    big = f"{key}/300000"
    with store_on(cluster) as s:
        (d,) = s.get_replica_desc(big)
        assert d.is_disk_replica() and not d.is_memory_replica()
        assert not d.is_local_disk_replica()
        disk = d.get_disk_descriptor()
        assert disk.object_size == 300000
        assert disk.file_path.startswith("granary://127.0.0.1:")
        assert s.get(big) == values[big]
        (h,) = s.get_replica_desc(f"{key}/host")
        assert h.is_memory_replica() and not h.is_disk_replica()


def test_an_unknown_tier_names_disk_among_the_choices(cluster, key):
    with granary.Client(master=cluster.master) as c:
        with pytest.raises(ValueError, match="tier 'ssd' is not one of host, gpu, any, disk"):
            c.batch_put([key], [b"x"], tier="ssd")
