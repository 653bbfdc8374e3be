"""Tenancy and space through the Mooncake layer: -1700 when a tenant is at quota, -1701 for an
unregistered tenant in strict mode, two tenants' same key as two objects, and -200 from a full
store (docs/engines.md section 5)."""

import uuid

import numpy as np
import pytest

from granary.mooncake import MooncakeDistributedStore, ReplicateConfig, SoftPinAction
from granary_cluster import Cluster
from mooncake_util import addr, env, setup_args, store_on

POLICY = ("version: 1\ntenants:\n"
          "  - name: tenant-a\n    quota: 2MB\n"
          "  - name: tenant-b\n    quota: 8MB\n")


@pytest.fixture(scope="module")
def strict():
    with Cluster(nodes=1, segment_size="64MB", policy_yaml=POLICY) as c:
        yield c


def test_quota_exceeded_gives_1700(strict):
    with store_on(strict, tenant_id="tenant-a") as s:
        big = np.ones(3 << 20, dtype=np.uint8)  # over the whole 2 MB quota
        assert s.put_from("too-big", addr(big), big.nbytes) == -1700
        assert s.put("too-big", big) == -1700
        assert s.batch_put_from(["too-big", "too-big-2"], [addr(big)] * 2,
                                [big.nbytes] * 2) == [-1700, -1700]
        assert s.put("fits", b"x" * 1000) == 0


def test_unregistered_tenant_in_strict_mode_gives_1701(strict):
    s = MooncakeDistributedStore()
    rc = s.setup(*setup_args(strict), tenant_id="tenant-z")
    if rc != 0:  # refused at hello
        assert rc == -1701
        return
    assert s.put("k", b"v") == -1701
    one = np.ones(10, np.uint8)
    assert s.batch_put_from(["k1", "k2"], [addr(one)] * 2, [10, 10]) == [-1701] * 2
    s.close()


def test_two_tenants_same_key_are_two_objects(strict):
    key = f"shared-{uuid.uuid4().hex}"
    with store_on(strict, tenant_id="tenant-a") as a, store_on(strict, tenant_id="tenant-b") as b:
        assert a.put(key, b"from-a") == 0
        assert b.is_exist(key) == 0
        assert b.put(key, b"from-b") == 0
        assert a.get(key) == b"from-a" and b.get(key) == b"from-b"
        assert a.remove(key) == 0
        assert b.get(key) == b"from-b"


def test_env_places_a_store_in_a_tenant(strict):
    """LMCache never passes tenant_id: GRANARY_TENANT_ID / MOONCAKE_TENANT_ID place it."""
    key = f"env-{uuid.uuid4().hex}"
    with env(GRANARY_TENANT_ID=None, MOONCAKE_TENANT_ID="tenant-b"):
        with store_on(strict) as s:
            assert s.put(key, b"v") == 0
    with store_on(strict, tenant_id="tenant-b") as b:
        assert b.get(key) == b"v"


def test_full_store_gives_200():
    with Cluster(nodes=1, segment_size="16MB") as c, store_on(c) as s:
        cfg = ReplicateConfig(with_hard_pin=True)  # hard-pinned: nothing is evictable
        value = np.full(1 << 20, 7, dtype=np.uint8)
        rcs = [s.put_from(f"full-{i}", addr(value), value.nbytes, cfg) for i in range(24)]
        assert rcs[0] == 0
        assert -200 in rcs, rcs
        assert set(rcs) <= {0, -200}
        first = rcs.index(-200)
        assert s.batch_put_from([f"more-{i}" for i in range(3)], [addr(value)] * 3,
                                [value.nbytes] * 3, cfg) == [-200] * 3
        assert s.get("full-0") == value.tobytes()
        assert first > 0


def test_soft_pinned_objects_are_accepted(strict):
    with store_on(strict, tenant_id="tenant-b") as s:
        cfg = ReplicateConfig(soft_pin_action=SoftPinAction.ENABLE)
        assert s.put("soft", b"pinned", cfg) == 0
        assert s.get("soft") == b"pinned"
