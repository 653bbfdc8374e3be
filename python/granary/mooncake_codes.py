"""Mooncake's error numbers, the mapping from granary errors onto them, and the rate-limited log
that reports each negative result once with its cause.

The numbers are Mooncake's (mooncake-store/include/types.h); engines hard-code some of them
(vLLM backs off on exactly -200). docs/engines.md has the table in prose.

Thread-safe: the log's state sits behind one lock, held only to update a counter.
"""

import logging
import threading
import time

logger = logging.getLogger("granary.mooncake")

__all__ = ["OK", "INTERNAL_ERROR", "NO_AVAILABLE_HANDLE", "INVALID_KEY", "INVALID_PARAMS",
           "OBJECT_NOT_FOUND", "OBJECT_ALREADY_EXISTS", "OBJECT_HAS_LEASE", "LEASE_EXPIRED",
           "TRANSFER_FAIL", "CHECKSUM_MISMATCH", "RPC_FAIL", "RPC_TIMEOUT",
           "TENANT_QUOTA_EXCEEDED", "TENANT_NOT_REGISTERED", "TENANT_NOT_EMPTY", "CODE_NAMES",
           "code_of", "cause_of"]

OK = 0
INTERNAL_ERROR = -1
NO_AVAILABLE_HANDLE = -200
INVALID_KEY = -400
INVALID_PARAMS = -600
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
OBJECT_HAS_LEASE = -706
LEASE_EXPIRED = -707
TRANSFER_FAIL = -800
CHECKSUM_MISMATCH = -801
RPC_FAIL = -900
RPC_TIMEOUT = -901
TENANT_QUOTA_EXCEEDED = -1700
TENANT_NOT_REGISTERED = -1701
TENANT_NOT_EMPTY = -1702

CODE_NAMES = {
    OK: "OK",
    INTERNAL_ERROR: "INTERNAL_ERROR",
    NO_AVAILABLE_HANDLE: "NO_AVAILABLE_HANDLE",
    INVALID_KEY: "INVALID_KEY",
    INVALID_PARAMS: "INVALID_PARAMS",
    OBJECT_NOT_FOUND: "OBJECT_NOT_FOUND",
    OBJECT_ALREADY_EXISTS: "OBJECT_ALREADY_EXISTS",
    OBJECT_HAS_LEASE: "OBJECT_HAS_LEASE",
    LEASE_EXPIRED: "LEASE_EXPIRED",
    TRANSFER_FAIL: "TRANSFER_FAIL",
    CHECKSUM_MISMATCH: "CHECKSUM_MISMATCH",
    RPC_FAIL: "RPC_FAIL",
    RPC_TIMEOUT: "RPC_TIMEOUT",
    TENANT_QUOTA_EXCEEDED: "TENANT_QUOTA_EXCEEDED",
    TENANT_NOT_REGISTERED: "TENANT_NOT_REGISTERED",
    TENANT_NOT_EMPTY: "TENANT_NOT_EMPTY",
}

# granary.Error.reason (ErrorReasonName) first: it says more than the code.
_BY_REASON = {
    "QUOTA_EXCEEDED": TENANT_QUOTA_EXCEEDED,
    "TENANT_NOT_REGISTERED": TENANT_NOT_REGISTERED,
    "ADMISSION_CLOSED": TENANT_NOT_REGISTERED,  # removed from the policy: no longer admitted
    "TENANT_NOT_FOUND": TENANT_NOT_REGISTERED,
    "TENANT_NOT_EMPTY": TENANT_NOT_EMPTY,
    "HAS_LEASE": OBJECT_HAS_LEASE,
    "DEVICE_POINTER": INVALID_PARAMS,  # no GPU path yet: refused before any byte moves
    "UNAVAILABLE_IN_CURRENT_MODE": INVALID_PARAMS,
    "INVALID_TENANT_ID": INVALID_PARAMS,
    "NOT_ACTIVE": RPC_FAIL,
}

# Then granary.Error.code (the absl code name).
_BY_CODE = {
    "NOT_FOUND": OBJECT_NOT_FOUND,
    "ALREADY_EXISTS": OBJECT_ALREADY_EXISTS,
    "RESOURCE_EXHAUSTED": NO_AVAILABLE_HANDLE,  # no reason: no space left after eviction
    "INVALID_ARGUMENT": INVALID_PARAMS,
    "OUT_OF_RANGE": INVALID_PARAMS,
    "FAILED_PRECONDITION": INVALID_PARAMS,  # a closed client; a destination too small
    "UNAVAILABLE": RPC_FAIL,
    "DEADLINE_EXCEEDED": RPC_TIMEOUT,
    "ABORTED": TRANSFER_FAIL,
    "DATA_LOSS": CHECKSUM_MISMATCH,
}


def code_of(err):
    """The Mooncake number for a granary.Error (or any exception): reason, then code, else -1."""
    reason = getattr(err, "reason", None)
    if reason in _BY_REASON:
        return _BY_REASON[reason]
    return _BY_CODE.get(getattr(err, "code", None), INTERNAL_ERROR)


def cause_of(err):
    """A short text naming what failed, for the log: 'NOT_FOUND/NONE: message'."""
    code = getattr(err, "code", None)
    if code is None:
        return f"{type(err).__name__}: {err}"
    return f"{code}/{getattr(err, 'reason', 'NONE')}: {err}"


class _RateLimitedLog:
    """Logs the first occurrence of each (operation, code) and then at most one line per
    `interval_s`, saying how many were folded into it."""

    def __init__(self, interval_s=10.0):
        self._interval_s = interval_s
        self._mu = threading.Lock()
        self._state = {}  # (op, code) -> [last_logged_monotonic, suppressed_count]
        self._once = set()

    def negative(self, op, code, cause, keys=1):
        now = time.monotonic()
        with self._mu:
            st = self._state.get((op, code))
            if st is not None and now - st[0] < self._interval_s:
                st[1] += keys
                return
            folded = st[1] if st is not None else 0
            self._state[(op, code)] = [now, 0]
        quiet = code in (OBJECT_NOT_FOUND, OBJECT_ALREADY_EXISTS)
        level = logging.INFO if quiet else logging.WARNING
        more = f" (+{folded} more since the last line)" if folded else ""
        logger.log(level, "%s: %d %s for %d key(s): %s%s", op, code, CODE_NAMES.get(code, "?"),
                   keys, cause, more)

    def reset(self):
        """Forgets what was logged (tests)."""
        with self._mu:
            self._state.clear()
            self._once.clear()

    def once(self, what, level=logging.WARNING):
        """Logs `what` the first time only (ignored parameters, unsupported calls)."""
        with self._mu:
            if what in self._once:
                return
            self._once.add(what)
        logger.log(level, "%s", what)


LOG = _RateLimitedLog()
