"""The exception hierarchy of the granary module.

Every failure of a Granary call is a `granary.Error` carrying:

- `code`: the absl status code name ("NOT_FOUND", "RESOURCE_EXHAUSTED", ...),
- `reason`: the typed sub-code the master attached ("NONE", "QUOTA_EXCEEDED",
  "TENANT_NOT_REGISTERED", "HAS_LEASE", "DEVICE_POINTER", ...; granary/error_reason.h),
- `message`: the text for people (never parse it); `str(e)` is the message.

The subclass is chosen by the reason first, then by the code (`_from_status`). Batch calls
return these objects (not raised) in the slot of the key that failed.
"""


class Error(Exception):
    """A failed Granary call: `.code`, `.reason`, `.message`."""

    _code = "UNKNOWN"
    _reason = "NONE"

    def __init__(self, message="", code=None, reason=None):
        super().__init__(message)
        self.message = message
        self.code = code if code is not None else self._code
        self.reason = reason if reason is not None else self._reason

    def __str__(self):
        return self.message

    def __repr__(self):
        return (f"{type(self).__name__}(message={self.message!r}, code={self.code!r}, "
                f"reason={self.reason!r})")

    def __eq__(self, other):
        return (type(self) is type(other) and self.message == other.message
                and self.code == other.code and self.reason == other.reason)

    def __hash__(self):
        return hash((type(self), self.message, self.code, self.reason))

    def __reduce__(self):
        return (type(self), (self.message, self.code, self.reason))


class InvalidArgument(Error):
    """INVALID_ARGUMENT: bad input (a key, a size, a buffer, list lengths that differ)."""
    _code = "INVALID_ARGUMENT"


class DevicePointer(InvalidArgument):
    """A CUDA device pointer where only host memory has a path yet; nothing was touched."""
    _reason = "DEVICE_POINTER"


class NotFound(Error):
    """NOT_FOUND: no such key (for this tenant), or no complete replica."""
    _code = "NOT_FOUND"


class AlreadyExists(Error):
    """ALREADY_EXISTS: a put of a key that exists (its value is unchanged)."""
    _code = "ALREADY_EXISTS"


class ResourceExhausted(Error):
    """RESOURCE_EXHAUSTED: no room, or the tenant's admission refused the write."""
    _code = "RESOURCE_EXHAUSTED"


class OutOfSpace(ResourceExhausted):
    """RESOURCE_EXHAUSTED with no reason: no segment has room, even after eviction."""


class QuotaExceeded(ResourceExhausted):
    """The put would take the tenant past its quota (reason QUOTA_EXCEEDED)."""
    _reason = "QUOTA_EXCEEDED"


class TenantNotRegistered(ResourceExhausted):
    """Strict multi-tenant mode and the tenant has no policy (reason TENANT_NOT_REGISTERED)."""
    _reason = "TENANT_NOT_REGISTERED"


class FailedPrecondition(Error):
    """FAILED_PRECONDITION: the call does not fit the current state (a too-small destination,
    the wrong mode)."""
    _code = "FAILED_PRECONDITION"


class HasLease(FailedPrecondition):
    """A read of the key is in flight (a lease is held); remove with force=True to override."""
    _reason = "HAS_LEASE"


class Closed(FailedPrecondition):
    """A call on a client (or node) that was closed."""


class Unauthenticated(Error):
    """UNAUTHENTICATED: the tenant token is missing or wrong."""
    _code = "UNAUTHENTICATED"


class PermissionDenied(Error):
    """PERMISSION_DENIED: the tenant may not do this."""
    _code = "PERMISSION_DENIED"


class Unavailable(Error):
    """UNAVAILABLE: the master or a node cannot be reached; retrying may succeed."""
    _code = "UNAVAILABLE"


class NotLeader(Unavailable):
    """The master reached is not the active one (an HA standby, or a fenced leader); the
    message names the active master. With an etcd:// master the client follows the leader
    itself and this reaches the caller only when no leader answered within rpc_timeout_ms."""
    _reason = "NOT_LEADER"


class DeadlineExceeded(Error):
    """DEADLINE_EXCEEDED: the call's deadline passed (rpc_timeout_ms, transfer_timeout_ms)."""
    _code = "DEADLINE_EXCEEDED"


class Internal(Error):
    """INTERNAL: a broken invariant or an unexpected failure (a bug: please report it)."""
    _code = "INTERNAL"


_BY_REASON = {
    "QUOTA_EXCEEDED": QuotaExceeded,
    "TENANT_NOT_REGISTERED": TenantNotRegistered,
    "HAS_LEASE": HasLease,
    "DEVICE_POINTER": DevicePointer,
    "NOT_LEADER": NotLeader,
}

_BY_CODE = {
    "INVALID_ARGUMENT": InvalidArgument,
    "NOT_FOUND": NotFound,
    "ALREADY_EXISTS": AlreadyExists,
    "RESOURCE_EXHAUSTED": ResourceExhausted,
    "FAILED_PRECONDITION": FailedPrecondition,
    "UNAUTHENTICATED": Unauthenticated,
    "PERMISSION_DENIED": PermissionDenied,
    "UNAVAILABLE": Unavailable,
    "DEADLINE_EXCEEDED": DeadlineExceeded,
    "INTERNAL": Internal,
}


def _from_status(code, reason, message):
    """The Error instance for a status: by reason first, then by code."""
    if reason == "NONE" and code == "RESOURCE_EXHAUSTED":
        cls = OutOfSpace
    else:
        cls = _BY_REASON.get(reason) or _BY_CODE.get(code, Error)
    return cls(message, code, reason)


# The public name of every class is granary.<Name> (the package re-exports them).
for _cls in (Error, InvalidArgument, DevicePointer, NotFound, AlreadyExists, ResourceExhausted,
             OutOfSpace, QuotaExceeded, TenantNotRegistered, FailedPrecondition, HasLease,
             Closed, Unauthenticated, PermissionDenied, Unavailable, NotLeader, DeadlineExceeded,
             Internal):
    _cls.__module__ = "granary"
del _cls

__all__ = [
    "Error", "InvalidArgument", "DevicePointer", "NotFound", "AlreadyExists",
    "ResourceExhausted", "OutOfSpace", "QuotaExceeded", "TenantNotRegistered",
    "FailedPrecondition", "HasLease", "Closed", "Unauthenticated", "PermissionDenied",
    "Unavailable", "DeadlineExceeded", "Internal",
]
