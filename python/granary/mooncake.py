"""Mooncake's `MooncakeDistributedStore`, over Granary: the class vLLM, SGLang and LMCache call.

    from granary.mooncake import MooncakeDistributedStore, ReplicateConfig
    store = MooncakeDistributedStore()
    store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", "127.0.0.1:50051")
    store.put("k", b"v"); store.get("k")  # b"v"

The contract is Mooncake's own API (docs/engines.md for users): Mooncake's names,
argument order, defaults and positional-only parameters; status methods return 0 or a negative
Mooncake code, size methods a byte count or a negative code, batch methods exactly len(keys)
entries. Only wrong argument types raise (TypeError), plus put_parts' RuntimeError for parts
that are not 1-D bytes. Every negative result is logged (rate-limited) with its cause on the
`granary.mooncake` logger.

Thread-safe: every method may be called from any thread; the core client releases the GIL in
each call that waits. close() may race with calls in flight: they then answer -600.
"""

import asyncio
import functools

from . import mooncake_codes as codes
from .mooncake_codes import *  # noqa: F401,F403  (the error-code constants)
from .mooncake_codes import LOG, code_of  # noqa: F401  (code_of is exported)
from .mooncake_types import (BufferDescriptor, BufferHandle, MemoryDescriptor,  # noqa: F401
                             MooncakeHostMemAllocator, ObjectDataType, ReplicaDescriptor,
                             ReplicaStatus, ReplicateConfig, SoftPinAction)

from .mooncake_base import _StoreBase
from .mooncake_get import _GetMixin
from .mooncake_put import _PutMixin


class MooncakeDistributedStore(_PutMixin, _GetMixin, _StoreBase):
    """One Granary client (and, with global_segment_size > 0, one in-process node) behind
    Mooncake's store surface. Lives from setup() to close() (also run from __del__).

    Assembled from its jobs: setup, close and the shared plumbing (mooncake_base.py), the put
    calls (mooncake_put.py), the get, exist, size and remove calls (mooncake_get.py)."""


# Bound in Mooncake but unused by the three engines: same names; -600 (or one per key),
# logged once as unsupported.
def _unsupported(name, result):
    def method(self, *a, **kw):
        LOG.once(f"{name}: not supported by Granary yet; answers {result.__doc__}")
        return result(a)
    method.__name__ = name
    method.__doc__ = f"Not supported by Granary yet: logged once, answers {result.__doc__}."
    return method


def _code(a):
    """-600"""
    return codes.INVALID_PARAMS


def _codes(a):
    """-600 per key"""
    keys = a[0] if a and isinstance(a[0], (list, tuple)) else []
    return [codes.INVALID_PARAMS] * len(keys)


def _none(a):
    """None"""
    return None


def _nones(a):
    """None per key"""
    keys = a[0] if a and isinstance(a[0], (list, tuple)) else []
    return [None] * len(keys)


def _task(a):
    """(None, -600)"""
    return (None, codes.INVALID_PARAMS)


for _name, _result in (
        ("get_into_ranges", _code), ("batch_get_session_start", _codes),
        ("batch_get_session_end", _codes), ("batch_get_into_multi_buffer_ranges", _codes),
        ("batch_put_session_start", _codes), ("batch_put_session_end", _codes),
        ("batch_put_session_revoke", _codes), ("batch_put_from_multi_buffer_ranges", _codes),
        ("upsert", _code), ("upsert_from", _code), ("upsert_parts", _code),
        ("upsert_batch", _code), ("batch_upsert_from", _codes),
        ("create_copy_task", _task), ("create_move_task", _task), ("query_task", _task),
        ("get_tensor", _none), ("get_tensor_into", _none), ("get_tensor_with_tp", _none),
        ("get_tensor_with_tp_into", _none), ("batch_get_tensor", _nones),
        ("batch_get_tensor_into", _nones), ("batch_get_tensor_with_tp", _nones),
        ("batch_get_tensor_with_tp_into", _nones), ("put_tensor", _code),
        ("put_tensor_with_tp", _code), ("pub_tensor", _code), ("pub_tensor_with_tp", _code),
        ("batch_put_tensor", _codes), ("batch_put_tensor_with_tp", _codes),
        ("batch_pub_tensor", _codes), ("batch_pub_tensor_with_tp", _codes),
        ("mount_segment", _code), ("unmount_segment", _code)):
    setattr(MooncakeDistributedStore, _name, _unsupported(_name, _result))


class MooncakeDistributedStoreAsync(MooncakeDistributedStore):
    """`await store.async_<name>(...)` runs `<name>` on the loop's default executor."""

    def __getattr__(self, name):
        if not name.startswith("async_"):
            raise AttributeError(name)
        fn = getattr(self, name[len("async_"):])

        async def call(*a, **kw):
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, functools.partial(fn, *a, **kw))

        call.__name__ = name
        return call


__all__ = ["MooncakeDistributedStore", "MooncakeDistributedStoreAsync", "ReplicateConfig",
           "ReplicaStatus", "SoftPinAction", "ObjectDataType", "MooncakeHostMemAllocator",
           "BufferHandle", "ReplicaDescriptor", "code_of"] + [
               n for n in codes.CODE_NAMES.values()]
