"""The get half of granary.mooncake's MooncakeDistributedStore (get, get_into and their batch
and multi-buffer forms, existence, sizes, removal, replica descriptors). Assembled with the
others in mooncake.py."""

import re

import granary as _core

from . import mooncake_args as args
from . import mooncake_codes as codes
from .mooncake_codes import LOG, cause_of, code_of
from .mooncake_types import BufferHandle, ReplicaDescriptor



class _GetMixin:
    """Mooncake's get, exist, size, remove and replica-descriptor calls."""

    # ------------------------------------------------------------------ gets

    def get(self, arg0, /):
        args.check_key(arg0, "get")
        c = self._live("get")
        if c is None or args.key_code(arg0):
            return b""
        try:
            return c.get(arg0)
        except _core.Error as e:
            LOG.negative("get", code_of(e), cause_of(e))
            return b""

    def get_batch(self, arg0, /):
        keys = args.check_keys(arg0, "get_batch")
        c = self._live("get_batch", len(keys))
        if c is None:
            return [b""] * len(keys)
        if not keys:
            return []
        try:
            res = c.batch_get(keys)
        except _core.Error as e:
            LOG.negative("get_batch", code_of(e), cause_of(e), len(keys))
            return [b""] * len(keys)
        out, codes_, causes = [], [], {}
        for i, r in enumerate(res):
            if isinstance(r, _core.Error):
                out.append(b"")
                codes_.append(code_of(r))
                causes[i] = cause_of(r)
            else:
                out.append(r)
                codes_.append(0)
        self._log_batch("get_batch", codes_, causes)
        return out

    def get_buffer(self, arg0, /):
        args.check_key(arg0, "get_buffer")
        if self._live("get_buffer") is None:
            return None
        data = self.get(arg0)
        return BufferHandle(data) if data else None

    def batch_get_buffer(self, arg0, /):
        keys = args.check_keys(arg0, "batch_get_buffer")
        if self._live("batch_get_buffer", len(keys)) is None:
            return [None] * len(keys)
        return [BufferHandle(d) if d else None for d in self.get_batch(keys)]

    def get_into(self, key, buffer_ptr, size):
        args.check_key(key, "get_into")
        buffer_ptr = args.check_uint(buffer_ptr, "get_into", "buffer_ptr")
        size = args.check_uint(size, "get_into", "size")
        c = self._live("get_into")
        if c is None:
            return codes.INVALID_PARAMS
        if args.key_code(key):
            return self._fail("get_into", codes.INVALID_KEY, "empty key or key over 16 KiB")
        return self._get_into_many("get_into", c, [key], [buffer_ptr], [size])[0]

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        w = "batch_get_into"
        c = self._client
        if c is not None and args.plain_batch(keys, buffer_ptrs, sizes):
            return self._get_into_many(w, c, keys, buffer_ptrs, sizes)
        keys = args.check_keys(keys, w)
        buffer_ptrs = args.check_uints(buffer_ptrs, w, "buffer_ptrs")
        sizes = args.check_uints(sizes, w, "sizes")
        n = len(keys)
        c = self._live_batch(w, n, buffer_ptrs=buffer_ptrs, sizes=sizes)
        if c is None:
            return [codes.INVALID_PARAMS] * n
        if args.valid_str_keys(keys):  # no key needs a look of its own
            return self._get_into_many(w, c, keys, buffer_ptrs, sizes)
        out = [0] * n
        idx = []
        for i, k in enumerate(keys):
            if args.key_code(k):
                out[i] = self._fail(w, codes.INVALID_KEY, "empty key or key over 16 KiB")
            else:
                idx.append(i)
        res = self._get_into_many(w, c, [keys[i] for i in idx], [buffer_ptrs[i] for i in idx],
                                  [sizes[i] for i in idx])
        for i, r in zip(idx, res):
            out[i] = r
        return out

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes,
                                     prefer_alloc_in_same_node=False):
        """Reads object i into its scatter list, in list order; the capacity is the sum of its
        sizes. Returns the object sizes. Multi-entry lists go to the core's region call, which
        reads into staging and scatters from there (on the device for device memory)."""
        w = "batch_get_into_multi_buffers"
        keys = args.check_keys(keys, w)
        all_buffer_ptrs = args.check_uint_lists(all_buffer_ptrs, w, "all_buffer_ptrs")
        all_sizes = args.check_uint_lists(all_sizes, w, "all_sizes")
        args.check_bool(prefer_alloc_in_same_node, w, "prefer_alloc_in_same_node")
        n = len(keys)
        c = self._live_batch(w, n, pointer_lists=all_buffer_ptrs, size_lists=all_sizes)
        if c is None:
            return [codes.INVALID_PARAMS] * n
        out = [0] * n
        plan = self._plan_scatter(w, keys, all_buffer_ptrs, all_sizes, out)
        if plan is None:
            return out
        idx, addrs, caps, lists = plan
        self._regions(w, c, keys, all_buffer_ptrs, all_sizes, lists, out, put=False)
        if not idx:
            return out
        res = self._get_into_many(w, c, [keys[i] for i in idx], addrs, caps)
        for i, r in zip(idx, res):
            out[i] = r
        return out

    # ------------------------------------------------------------------ existence, size, removal

    def is_exist(self, arg0, /):
        """1 exists, 0 absent, negative on error. Never takes or renews a read lease."""
        args.check_key(arg0, "is_exist")
        c = self._live("is_exist")
        if c is None:
            return codes.INVALID_PARAMS
        if args.key_code(arg0):
            return self._fail("is_exist", codes.INVALID_KEY, "empty key or key over 16 KiB")
        try:
            return 1 if c.exists(arg0) else 0
        except _core.Error as e:
            return self._fail("is_exist", code_of(e), cause_of(e))

    def batch_is_exist(self, keys):
        keys = args.check_keys(keys, "batch_is_exist")
        n = len(keys)
        c = self._live("batch_is_exist", n)
        if c is None:
            return [codes.INVALID_PARAMS] * n
        if n == 0:
            return []
        out = [0] * n
        idx = []
        for i, k in enumerate(keys):
            if args.key_code(k):
                out[i] = self._fail("batch_is_exist", codes.INVALID_KEY, "empty or long key")
            else:
                idx.append(i)
        try:
            res = c.batch_exists([keys[i] for i in idx]) if idx else []
        except _core.Error as e:
            return self._whole_batch("batch_is_exist", e, n)
        causes = {}
        for i, r in zip(idx, res):
            if isinstance(r, _core.Error):
                out[i] = code_of(r)
                causes[i] = cause_of(r)
            else:
                out[i] = 1 if r else 0
        self._log_batch("batch_is_exist", out, causes)
        return out

    def get_size(self, arg0, /):
        args.check_key(arg0, "get_size")
        c = self._live("get_size")
        if c is None:
            return codes.INVALID_PARAMS
        if args.key_code(arg0):
            return self._fail("get_size", codes.INVALID_KEY, "empty key or key over 16 KiB")
        try:
            info = c.stat(arg0)
        except _core.Error as e:
            return self._fail("get_size", code_of(e), cause_of(e))
        if not getattr(info, "complete", True):
            return self._fail("get_size", codes.OBJECT_NOT_FOUND, "no complete replica yet")
        return int(info.size)

    def remove(self, key, force=False):
        args.check_key(key, "remove")
        force = args.check_bool(force, "remove", "force")
        c = self._live("remove")
        if c is None:
            return codes.INVALID_PARAMS
        if args.key_code(key):
            return self._fail("remove", codes.INVALID_KEY, "empty key or key over 16 KiB")
        try:
            c.remove(key, force=force)
        except _core.Error as e:
            return self._fail("remove", code_of(e), cause_of(e))
        return codes.OK

    def batch_remove(self, keys, force=False):
        keys = args.check_keys(keys, "batch_remove")
        force = args.check_bool(force, "batch_remove", "force")
        n = len(keys)
        c = self._live("batch_remove", n)
        if c is None:
            return [codes.INVALID_PARAMS] * n
        if n == 0:
            return []
        try:
            res = c.batch_remove(keys, force=force)
        except _core.Error as e:
            return self._whole_batch("batch_remove", e, n)
        out, causes = [], {}
        for i, r in enumerate(res):
            if isinstance(r, _core.Error):
                out.append(code_of(r))
                causes[i] = cause_of(r)
            else:
                out.append(0)
        self._log_batch("batch_remove", out, causes)
        return out

    def _remove_matching(self, op, c, match, force):
        """Removes this tenant's keys for which match(key) holds -> the count, or a code."""
        count, start = 0, ""
        try:
            while True:
                page = c.list(prefix="", limit=1000, start_after=start)
                keys = [o.key for o in page.objects]
                doomed = [k for k in keys if match(k)]
                if doomed:
                    res = c.batch_remove(doomed, force=force)
                    count += sum(1 for r in res if not isinstance(r, _core.Error))
                if not page.more or not keys:
                    return count
                start = keys[-1]
        except _core.Error as e:
            return self._fail(op, code_of(e), cause_of(e))

    def remove_by_regex(self, regex_pattern, force=False):
        """Removes the caller's tenant's keys that re.search matches -> the count removed."""
        regex_pattern = args.check_str(regex_pattern, "remove_by_regex", "regex_pattern", "")
        force = args.check_bool(force, "remove_by_regex", "force")
        c = self._live("remove_by_regex")
        if c is None:
            return codes.INVALID_PARAMS
        try:
            rx = re.compile(regex_pattern)
        except re.error as e:
            return self._fail("remove_by_regex", codes.INVALID_PARAMS, f"bad regex: {e}")
        return self._remove_matching(
            "remove_by_regex", c,
            lambda k: rx.search(k if isinstance(k, str) else k.decode("utf-8", "replace")), force)

    def remove_all(self, force=False):
        """Removes every key of the caller's tenant (never another tenant's) -> the count."""
        force = args.check_bool(force, "remove_all", "force")
        c = self._live("remove_all")
        if c is None:
            return codes.INVALID_PARAMS
        return self._remove_matching("remove_all", c, lambda k: True, force)

    # ------------------------------------------------------------------ replicas

    def _descs(self, c, key):
        info = c.stat(key)
        addrs = list(getattr(info, "replica_addresses", []) or [])
        tiers = list(getattr(info, "replica_tiers", []) or [])
        if not addrs:
            addrs = [""] * int(getattr(info, "replicas", 0) or 0)
        tiers += ["host"] * (len(addrs) - len(tiers))
        return [ReplicaDescriptor(int(info.size), a, tier=t) for a, t in zip(addrs, tiers)]

    def get_replica_desc(self, key):
        args.check_key(key, "get_replica_desc")
        c = self._live("get_replica_desc")
        if c is None:
            return []
        try:
            return self._descs(c, key)
        except _core.Error as e:
            LOG.negative("get_replica_desc", code_of(e), cause_of(e))
            return []

    def batch_get_replica_desc(self, keys):
        keys = args.check_keys(keys, "batch_get_replica_desc")
        c = self._live("batch_get_replica_desc", len(keys))
        out = {}
        for k in keys:
            try:
                out[k] = self._descs(c, k) if c is not None else []
            except _core.Error as e:
                LOG.negative("batch_get_replica_desc", code_of(e), cause_of(e))
                out[k] = []
        return out
