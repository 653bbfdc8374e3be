"""Fixtures of the Python tests.

`cluster` (module scope) starts a real master and one node as processes (granary_cluster.Cluster)
once per test module and transport: "default" (UCX picks: shared memory on one host) and "tcp"
(UCX_TLS=tcp). UCX reads UCX_TLS when a context is created, so the variable is set in this
process's environment too (for the clients a test creates) for as long as the cluster lives,
and restored afterwards. A module may set CLUSTER_ARGS (a dict of Cluster keyword arguments)
and TRANSPORTS (a subset of the ids) to change what it gets.

`client` is a granary.Client of that cluster (tenant "default"), closed after the test; `key`
a key no other test uses.
"""

import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import granary  # noqa: E402
from granary_cluster import Cluster  # noqa: E402

TRANSPORT_TLS = {"default": None, "tcp": "tcp"}


def pytest_generate_tests(metafunc):
    if "cluster" in metafunc.fixturenames:
        ids = getattr(metafunc.module, "TRANSPORTS", list(TRANSPORT_TLS))
        metafunc.parametrize("cluster", ids, indirect=True, scope="module")


class _Env:
    """Sets (value) or unsets (None) one environment variable until restore()."""

    def __init__(self, name, value):
        self.name, self.saved = name, os.environ.get(name)
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value

    def restore(self):
        if self.saved is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = self.saved


@pytest.fixture(scope="module")
def cluster(request):
    transport = request.param
    env = _Env("UCX_TLS", TRANSPORT_TLS[transport])
    try:
        args = dict(getattr(request.module, "CLUSTER_ARGS", {}))
        with Cluster(**args) as c:
            c.transport = transport
            yield c
    finally:
        env.restore()


@pytest.fixture
def client(cluster):
    with granary.Client(master=cluster.master) as c:
        yield c


@pytest.fixture
def key(request):
    return f"pytest/{request.node.name}/{uuid.uuid4().hex}"
