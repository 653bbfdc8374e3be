"""The put half of granary.mooncake's MooncakeDistributedStore (put, put_parts, put_batch,
put_from and their batch and multi-buffer forms). Assembled with the others in mooncake.py."""

import granary as _core

from . import mooncake_args as args
from . import mooncake_codes as codes
from .mooncake_base import _bytes_view, _check_config
from .mooncake_codes import LOG, cause_of, code_of



class _PutMixin:
    """Mooncake's put calls; status methods return 0 or a negative Mooncake code."""

    def put(self, key, value, config=None):
        args.check_key(key, "put")
        mv = _bytes_view(value, "put")
        config = _check_config(config, "put")
        c = self._live("put")
        if c is None:
            return codes.INVALID_PARAMS
        if args.key_code(key):
            return self._fail("put", codes.INVALID_KEY, "empty key or key over 16 KiB")
        opts = self._put_opts("put", config, 1, False)
        if isinstance(opts, int):
            return opts
        try:
            if opts[0] or opts[1]:
                r = c.batch_put([key], [mv], soft_pin=opts[0], hard_pin=opts[1])[0]
                if isinstance(r, _core.Error):
                    raise r
            else:
                c.put(key, mv)
        except _core.AlreadyExists:
            return codes.OK
        except _core.Error as e:
            return self._fail("put", code_of(e), cause_of(e))
        return codes.OK

    def put_parts(self, key, *parts, config=None):
        args.check_key(key, "put_parts")
        views = []
        for p in parts:
            try:
                mv = memoryview(p)
            except TypeError:
                raise TypeError("put_parts(): incompatible function arguments: parts must "
                                f"support the buffer protocol, not {type(p).__name__}") from None
            if mv.ndim != 1 or mv.itemsize != 1:
                raise RuntimeError("parts must be 1-D bytes-like")
            views.append(mv)
        return self.put(key, b"".join(views), config)

    def put_batch(self, keys, values, config=None):
        keys = args.check_keys(keys, "put_batch")
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            raise TypeError("put_batch(): incompatible function arguments: values must be a "
                            "list of buffers")
        views = [_bytes_view(v, "put_batch") for v in values]
        config = _check_config(config, "put_batch")
        c = self._live("put_batch", len(keys))
        if c is None:
            return codes.INVALID_PARAMS
        if len(keys) != len(views):
            return self._fail("put_batch", codes.INVALID_PARAMS,
                              f"{len(keys)} keys, {len(views)} values", len(keys))
        if not keys:
            return codes.OK
        if any(args.key_code(k) for k in keys):
            return self._fail("put_batch", codes.INVALID_KEY, "empty key or key over 16 KiB")
        opts = self._put_opts("put_batch", config, len(keys), False)
        if isinstance(opts, int):
            return opts
        try:
            res = c.batch_put(keys, views, soft_pin=opts[0], hard_pin=opts[1])
        except _core.Error as e:
            return self._fail("put_batch", code_of(e), cause_of(e), len(keys))
        for r in res:
            if isinstance(r, _core.Error) and code_of(r) != codes.OBJECT_ALREADY_EXISTS:
                return self._fail("put_batch", code_of(r), cause_of(r), len(keys))
        return codes.OK

    def put_from(self, key, buffer_ptr, size, config=None):
        args.check_key(key, "put_from")
        buffer_ptr = args.check_uint(buffer_ptr, "put_from", "buffer_ptr")
        size = args.check_uint(size, "put_from", "size")
        config = _check_config(config, "put_from")
        c = self._live("put_from")
        if c is None:
            return codes.INVALID_PARAMS
        if args.key_code(key):
            return self._fail("put_from", codes.INVALID_KEY, "empty key or key over 16 KiB")
        opts = self._put_opts("put_from", config, 1, True)
        if isinstance(opts, int):
            return opts
        if size == 0:
            LOG.once("put_from: size 0 stores nothing (returns 0, as Mooncake)")
            return codes.OK
        return self._put_from_many("put_from", c, [key], [buffer_ptr], [size], *opts)[0]

    def put_from_with_metadata(self, key, buffer_ptr, metadata_buffer_ptr, size,
                               metadata_size, config=None):
        """Stores metadata then data as one object (the layout get_tensor_into parses)."""
        w = "put_from_with_metadata"
        args.check_key(key, w)
        ptrs = [args.check_uint(metadata_buffer_ptr, w, "metadata_buffer_ptr"),
                args.check_uint(buffer_ptr, w, "buffer_ptr")]
        sizes = [args.check_uint(metadata_size, w, "metadata_size"),
                 args.check_uint(size, w, "size")]
        config = _check_config(config, w)
        return self.batch_put_from_multi_buffers([key], [ptrs], [sizes], config)[0]

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        w = "batch_put_from"
        c = self._client
        if config is None and c is not None and args.plain_batch(keys, buffer_ptrs, sizes):
            return self._put_from_many(w, c, keys, buffer_ptrs, sizes, False, False)
        keys = args.check_keys(keys, w)
        buffer_ptrs = args.check_uints(buffer_ptrs, w, "buffer_ptrs")
        sizes = args.check_uints(sizes, w, "sizes")
        config = _check_config(config, w)
        n = len(keys)
        c = self._live_batch(w, n, buffer_ptrs=buffer_ptrs, sizes=sizes)
        if c is None:
            return [codes.INVALID_PARAMS] * n
        if n == 0:
            return []
        opts = self._put_opts(w, config, n, True)
        if isinstance(opts, int):
            return [opts] * n
        if args.valid_str_keys(keys) and min(sizes) > 0:  # no key needs a look of its own
            return self._put_from_many(w, c, keys, buffer_ptrs, sizes, *opts)
        out = [0] * n
        idx = []
        for i, k in enumerate(keys):
            if args.key_code(k):
                out[i] = self._fail(w, codes.INVALID_KEY, "empty key or key over 16 KiB")
            elif sizes[i] == 0:
                LOG.once(f"{w}: size 0 stores nothing (returns 0, as Mooncake)")
            else:
                idx.append(i)
        res = self._put_from_many(w, c, [keys[i] for i in idx], [buffer_ptrs[i] for i in idx],
                                  [sizes[i] for i in idx], *opts)
        for i, r in zip(idx, res):
            out[i] = r
        return out

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        """Object i is the concatenation of its scatter list. A one-entry list goes to the core
        as a plain buffer; longer lists, host or device memory, go to the core's region call
        (gathered there: on the device for device memory)."""
        w = "batch_put_from_multi_buffers"
        keys = args.check_keys(keys, w)
        all_buffer_ptrs = args.check_uint_lists(all_buffer_ptrs, w, "all_buffer_ptrs")
        all_sizes = args.check_uint_lists(all_sizes, w, "all_sizes")
        config = _check_config(config, w)
        n = len(keys)
        c = self._live_batch(w, n, pointer_lists=all_buffer_ptrs, size_lists=all_sizes)
        if c is None:
            return [codes.INVALID_PARAMS] * n
        if n == 0:
            return []
        opts = self._put_opts(w, config, n, False)
        if isinstance(opts, int):
            return [opts] * n
        out = [0] * n
        plan = self._plan_scatter(w, keys, all_buffer_ptrs, all_sizes, out)
        if plan is None:
            return out
        idx, addrs, sizes, lists = plan
        self._regions(w, c, keys, all_buffer_ptrs, all_sizes, lists, out, put=True, pins=opts)
        if not idx:
            return out
        res = self._put_from_many(w, c, [keys[i] for i in idx], addrs, sizes, *opts)
        for i, r in zip(idx, res):
            out[i] = r
        return out
