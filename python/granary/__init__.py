"""Granary's Python client: a KV-cache store for LLM inference.

    import granary
    with granary.Client(master="127.0.0.1:50051", tenant_id="team-a") as c:
        c.put("my/key", b"value")
        assert c.get("my/key") == b"value"

- `Client`: put/get, zero-copy put_from/get_into on numpy arrays, torch CPU tensors, bytearray,
  memoryview or int addresses, batch forms, exists/remove/stat/list/segments, lookup_prefix.
  Thread-safe; the GIL is released while a call waits.
- `EmbeddedNode`: a storage node inside this process (Mooncake's embedded mode).
- `KvKey`: structured KV-cache keys (model, hash_scheme, prefix_hash, adapter_id).
- Errors: `Error` and its subclasses (`NotFound`, `QuotaExceeded`, ...) with `.code`,
  `.reason` and `.message`.

`granary.mooncake` holds a Mooncake-compatible `MooncakeDistributedStore` over this API.
"""

from granary._errors import (  # noqa: F401
    AlreadyExists, Closed, DeadlineExceeded, DevicePointer, Error, FailedPrecondition, HasLease,
    Internal, InvalidArgument, NotFound, NotLeader, OutOfSpace, PermissionDenied, QuotaExceeded,
    ResourceExhausted, TenantNotRegistered, Unauthenticated, Unavailable,
)
from granary._granary import (  # noqa: F401
    Client, EmbeddedNode, KvKey, ListResult, ObjectInfo, PrefixBlock, PrefixLookup, SegmentInfo,
)
# Test hooks: mark host memory as "CUDA device memory" for the device-pointer refusal.
from granary._granary import (  # noqa: F401
    _testing_add_fake_device_range, _testing_clear_fake_device_ranges,
)
# The client's device-pointer check, for the Mooncake layer's own CPU copies.
from granary._granary import _is_device_pointer  # noqa: F401
# The device backend (cuda, none or fake) and test hooks for its memory.
from granary._granary import (  # noqa: F401
    _device_backend, _testing_device_alloc, _testing_device_copy, _testing_device_free,
)
# The fake backend's engine stream, for tests of the stream contract (stream=/event= of puts).
from granary._granary import (  # noqa: F401
    _testing_engine_event, _testing_engine_stream, _testing_engine_write,
    _testing_stream_synchronize,
)

__all__ = [
    "Client", "EmbeddedNode", "KvKey", "ListResult", "ObjectInfo", "PrefixBlock", "PrefixLookup",
    "SegmentInfo",
    "Error", "InvalidArgument", "DevicePointer", "NotFound", "AlreadyExists",
    "ResourceExhausted", "OutOfSpace", "QuotaExceeded", "TenantNotRegistered",
    "FailedPrecondition", "HasLease", "Closed", "Unauthenticated", "PermissionDenied",
    "Unavailable", "NotLeader", "DeadlineExceeded", "Internal",
]
