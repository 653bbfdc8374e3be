"""Helpers shared by the Mooncake-layer tests: a set-up store on a cluster, deterministic
payloads, and numpy/torch buffers with their addresses."""

import contextlib
import os

import numpy as np

from granary.mooncake import MooncakeDistributedStore


def payload(key, n):
    """n deterministic bytes that differ per key."""
    seed = sum(key.encode()) % 251
    return bytes((seed + i * 7) % 256 for i in range(n))


def np_buf(n, fill=0):
    a = np.empty(n, dtype=np.uint8)
    a.fill(fill)
    return a


def addr(a):
    """The address of a numpy array or torch tensor."""
    return a.data_ptr() if hasattr(a, "data_ptr") else a.ctypes.data


def setup_args(cluster, segment=0, hostname="127.0.0.1"):
    return (hostname, "P2PHANDSHAKE", segment, 16 << 20, "tcp", "", cluster.master)


@contextlib.contextmanager
def store_on(cluster, segment=0, **kw):
    s = MooncakeDistributedStore()
    rc = s.setup(*setup_args(cluster, segment), **kw)
    assert rc == 0, rc
    try:
        yield s
    finally:
        s.close()


@contextlib.contextmanager
def env(**values):
    """Sets (or, with None, unsets) environment variables for the block."""
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
