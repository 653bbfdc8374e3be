"""granary.EmbeddedNode: a storage node inside the test process, mounted at a real master that
has no other node; clients store into it and read back byte-exact, over the default transports
and UCX_TLS=tcp; close() unmounts it."""

import time

import numpy as np
import pytest

import granary

CLUSTER_ARGS = {"nodes": 0}
MIB = 1 << 20


def wait_for(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_embedded_node_put_get(cluster, key):
    assert cluster.segment_count() == 0
    with granary.EmbeddedNode(cluster.master, 32 * MIB) as node:
        assert not node.closed
        host, port = node.address.rsplit(":", 1)
        assert host == "127.0.0.1" and 12300 <= int(port) <= 14300
        assert node.segment_name
        assert cluster.segment_count() == 1
        with granary.Client(master=cluster.master) as c:
            segs = c.segments()
            assert [(s.node_address, s.size) for s in segs] == [(node.address, 32 * MIB)]
            data = np.random.default_rng(7).integers(0, 256, 3 * MIB + 5, dtype=np.uint8)
            c.put_from(key, data)
            out = np.zeros_like(data)
            assert c.get_into(key, out) == data.nbytes
            assert out.tobytes() == data.tobytes()
            assert c.stat(key).replica_addresses == [node.address]
            assert c.batch_get([key, key + "/x"])[0] == data.tobytes()
            node.close()
            node.close()  # idempotent
            assert node.closed and node.address == f"{host}:{port}"
            assert wait_for(lambda: cluster.segment_count() == 0)
            with pytest.raises(granary.NotFound):
                c.get(key)
    assert "closed" in repr(node)


def test_embedded_node_bad_options(cluster):
    with pytest.raises(granary.InvalidArgument):
        granary.EmbeddedNode(cluster.master, 1000)
    with pytest.raises(TypeError):
        granary.EmbeddedNode(cluster.master, "32MB")
    with pytest.raises(granary.InvalidArgument):
        granary.EmbeddedNode("not an address", 32 * MIB)
    # An etcd:// master needs a cluster id without '/': the bad one is named.
    with pytest.raises(granary.InvalidArgument, match="cluster_id 'bad/id'"):
        granary.EmbeddedNode("etcd://127.0.0.1:1", 32 * MIB, cluster_id="bad/id")
    with pytest.raises(granary.InvalidArgument, match="etcd://nonsense:port"):
        granary.EmbeddedNode("etcd://nonsense:port", 32 * MIB)


def test_two_embedded_nodes(cluster, key):
    with granary.EmbeddedNode(cluster.master, 8 * MIB) as a, \
            granary.EmbeddedNode(cluster.master, 8 * MIB) as b:
        assert a.address != b.address
        assert wait_for(lambda: cluster.segment_count() == 2)
        with granary.Client({"master_server_address": cluster.master, "replica_num": 2}) as c:
            c.put(key, b"twice")
            assert sorted(c.stat(key).replica_addresses) == sorted([a.address, b.address])
    assert wait_for(lambda: cluster.segment_count() == 0)
