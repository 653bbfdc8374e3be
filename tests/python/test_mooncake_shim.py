"""The opt-in `mooncake` shim: `from mooncake.store import ...` gives Granary's classes and a
put/get works through them. ctest puts the build tree's python_shim on PYTHONPATH; run by hand,
the directory comes from GRANARY_MOONCAKE_SHIM_DIR, else the source tree."""

import os
import sys

import pytest

from granary_cluster import Cluster

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM_DIR = os.environ.get("GRANARY_MOONCAKE_SHIM_DIR") or os.path.join(
    HERE, "..", "..", "python", "mooncake_shim")


@pytest.fixture(scope="module")
def mooncake_store():
    try:
        import mooncake.store
        yield mooncake.store
        return
    except ImportError:
        pass
    sys.path.insert(0, SHIM_DIR)
    try:
        import mooncake.store
        yield mooncake.store
    finally:
        sys.path.remove(SHIM_DIR)


def test_shim_exports_granarys_classes(mooncake_store):
    import granary.mooncake as gm
    import mooncake
    from mooncake.async_store import MooncakeDistributedStoreAsync
    assert mooncake.__granary_shim__
    assert mooncake_store.MooncakeDistributedStore is gm.MooncakeDistributedStore
    assert mooncake_store.ReplicateConfig is gm.ReplicateConfig
    assert mooncake_store.MooncakeHostMemAllocator is gm.MooncakeHostMemAllocator
    assert MooncakeDistributedStoreAsync is gm.MooncakeDistributedStoreAsync


def test_shim_put_get(mooncake_store):
    from mooncake.store import MooncakeDistributedStore, ReplicateConfig
    with Cluster(nodes=1, segment_size="32MB") as c:
        store = MooncakeDistributedStore()
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", c.master) == 0
        config = ReplicateConfig()
        config.replica_num = 1
        assert store.put("shim-key", b"through the shim", config) == 0
        assert store.is_exist("shim-key") == 1
        assert store.get("shim-key") == b"through the shim"
        assert store.close() == 0
