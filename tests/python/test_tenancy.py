"""Tenancy through Python: a master in strict multi-tenant mode with a small-quota tenant.
A put past the quota raises QuotaExceeded (reason QUOTA_EXCEEDED), an unregistered tenant's put
raises TenantNotRegistered, and the same key under two tenants is two objects."""

import numpy as np
import pytest

import granary

TRANSPORTS = ["default"]
CLUSTER_ARGS = {"policy_yaml": """version: 1
tenants:
  - name: small
    quota: 64KB
  - name: team-a
    quota: 32MB
  - name: team-b
    quota: 32MB
"""}


def connect(cluster, tenant):
    return granary.Client(master=cluster.master, tenant_id=tenant)


def test_quota_exceeded(cluster, key):
    with connect(cluster, "small") as c:
        c.put(key + "/fits", b"x" * 1000)
        with pytest.raises(granary.QuotaExceeded) as e:
            c.put(key + "/big", b"x" * (1 << 20))
        err = e.value
        assert isinstance(err, granary.ResourceExhausted)
        assert (err.code, err.reason) == ("RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED")
        assert err.message and str(err) == err.message
        assert not c.exists(key + "/big")
        buf = np.zeros(1 << 20, np.uint8)
        with pytest.raises(granary.QuotaExceeded):
            c.put_from(key + "/big2", buf)
        res = c.batch_put([key + "/b1", key + "/b2"], [b"y" * 100, b"y" * (1 << 20)])
        assert res[0] is None
        assert isinstance(res[1], granary.QuotaExceeded) and res[1].reason == "QUOTA_EXCEEDED"
        assert c.get(key + "/fits") == b"x" * 1000


def test_tenant_not_registered(cluster, key):
    with connect(cluster, "nobody") as c:
        with pytest.raises(granary.TenantNotRegistered) as e:
            c.put(key, b"x")
        assert (e.value.code, e.value.reason) == ("RESOURCE_EXHAUSTED", "TENANT_NOT_REGISTERED")
        res = c.batch_put_from([key], [bytearray(10)])
        assert isinstance(res[0], granary.TenantNotRegistered)


def test_two_tenants_same_key_two_objects(cluster, key):
    with connect(cluster, "team-a") as a, connect(cluster, "team-b") as b:
        a.put(key, b"value of a")
        assert not b.exists(key)
        with pytest.raises(granary.NotFound):
            b.get(key)
        b.put(key, b"value of b!")
        assert a.get(key) == b"value of a" and b.get(key) == b"value of b!"
        assert a.stat(key).size == 10 and b.stat(key).size == 11
        assert [o.key for o in a.list(key).objects] == [key]
        b.remove(key)
        assert a.get(key) == b"value of a"
        assert (a.tenant_id, b.tenant_id) == ("team-a", "team-b")
