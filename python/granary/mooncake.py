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
import http.server
import logging
import os
import re
import sys
import threading

import granary as _core

from . import mooncake_args as args
from . import mooncake_codes as codes
from .mooncake_codes import *  # noqa: F401,F403  (the error-code constants)
from .mooncake_codes import LOG, cause_of, code_of
from .mooncake_types import (BufferDescriptor, BufferHandle, MemoryDescriptor,  # noqa: F401
                             MooncakeHostMemAllocator, ObjectDataType, ReplicaDescriptor,
                             ReplicaStatus, ReplicateConfig, SoftPinAction)

_NOT_SET_UP = "not set up (call setup() first) or closed"

_SETUP_PARAMS = ("local_hostname", "metadata_server", "global_segment_size",
                 "local_buffer_size", "protocol", "rdma_devices", "master_server_addr",
                 "engine", "enable_ssd_offload", "ssd_offload_path", "tenant_id",
                 "enable_client_http_server", "client_http_port")
_SETUP_REQUIRED = 7
_SETUP_DEFAULTS = {"engine": None, "enable_ssd_offload": False, "ssd_offload_path": "",
                   "tenant_id": "default", "enable_client_http_server": False,
                   "client_http_port": 9300}


def _bind_setup(pos, kw):
    """pybind-style binding of setup()'s arguments. An unknown keyword raises a TypeError whose
    message names it (and only it: SGLang drops every keyword it finds in the message)."""
    unknown = [k for k in kw if k not in _SETUP_PARAMS]
    if unknown:
        shown = ", ".join(f"{k}={kw[k]!r}" for k in unknown)
        raise TypeError("setup(): incompatible function arguments. Unexpected keyword "
                        f"argument(s): {', '.join(unknown)}\n\nInvoked with: kwargs: {shown}")
    if len(pos) > len(_SETUP_PARAMS):
        raise TypeError(f"setup(): incompatible function arguments: takes at most "
                        f"{len(_SETUP_PARAMS)} arguments, {len(pos)} given")
    bound = dict(zip(_SETUP_PARAMS, pos))
    for k, v in kw.items():
        if k in bound:
            raise TypeError(f"setup(): incompatible function arguments: {k} given twice")
        bound[k] = v
    missing = [p for p in _SETUP_PARAMS[:_SETUP_REQUIRED] if p not in bound]
    if missing:
        raise TypeError("setup(): incompatible function arguments: missing required "
                        f"argument(s) {', '.join(missing)}")
    for k, v in _SETUP_DEFAULTS.items():
        bound.setdefault(k, v)
    w = "setup"
    for name in ("local_hostname", "metadata_server", "protocol", "rdma_devices",
                 "master_server_addr", "ssd_offload_path"):
        bound[name] = args.check_str(bound[name], w, name, "")
    bound["tenant_id"] = args.check_str(bound["tenant_id"], w, "tenant_id", "default")
    for name in ("global_segment_size", "local_buffer_size", "client_http_port"):
        bound[name] = args.check_uint(bound[name], w, name)
    for name in ("enable_ssd_offload", "enable_client_http_server"):
        bound[name] = args.check_bool(bound[name], w, name)
    return bound


def _check_config(config, where):
    if config is None:
        return ReplicateConfig()
    if not isinstance(config, ReplicateConfig):
        raise TypeError(f"{where}(): incompatible function arguments: config must be a "
                        f"ReplicateConfig, not {type(config).__name__}")
    return config


def _bytes_view(value, where, name="value"):
    """A 1-D byte memoryview of any buffer-protocol object (all of its bytes, not its element
    count as Mooncake's span took), or of a torch CPU tensor."""
    try:
        mv = memoryview(value)
    except TypeError:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(value, torch.Tensor) and value.device.type == "cpu":
            mv = memoryview(value.detach().contiguous().view(-1).view(torch.uint8).numpy())
        else:
            raise TypeError(f"{where}(): incompatible function arguments: {name} must support "
                            f"the buffer protocol, not {type(value).__name__}") from None
    if mv.c_contiguous:
        return mv.cast("B") if (mv.ndim != 1 or mv.format != "B") else mv
    return memoryview(mv.tobytes())


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        client = self.server.store._client
        if self.path.split("?")[0] != "/metrics" or client is None:
            self.send_error(404)
            return
        try:
            body = client.metrics_text().encode()
        except Exception as e:  # noqa: BLE001  (the server thread must not die)
            self.send_error(503, str(e))
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


class MooncakeDistributedStore:
    """One Granary client (and, with global_segment_size > 0, one in-process node) behind
    Mooncake's store surface. Lives from setup() to close() (also run from __del__)."""

    def __init__(self):
        self._mu = threading.Lock()  # guards setup/close transitions only
        self._client = None
        self._node = None
        self._http = None
        self._hostname = ""
        self._tenant = "default"
        self._pool = None  # [base, size, next offset] for alloc_from_mem_pool
        self._pool_size = 0
        self._alloc = MooncakeHostMemAllocator()

    # ------------------------------------------------------------------ lifecycle

    def setup(self, *pos, **kw):
        if len(pos) == 1 and not kw and isinstance(pos[0], dict):
            try:
                kw = args.config_from_dict(pos[0])
            except (ValueError, TypeError) as e:
                LOG.negative("setup(dict)", codes.INVALID_PARAMS, str(e))
                return codes.INVALID_PARAMS
            pos = ()
        b = _bind_setup(pos, kw)
        return self._setup(b)

    def setup_dummy(self, mem_pool_size, local_buffer_size, server_address):
        w = "setup_dummy"
        mem_pool_size = args.check_uint(mem_pool_size, w, "mem_pool_size")
        args.check_uint(local_buffer_size, w, "local_buffer_size")
        server_address = args.check_str(server_address, w, "server_address", "")
        LOG.once("setup_dummy: Granary has no separate real-client process; opening an "
                 "ordinary client (the master from GRANARY_CONFIG_PATH/GRANARY_MASTER, else "
                 f"{server_address!r})", level=logging.INFO)
        from_env = os.environ.get("GRANARY_CONFIG_PATH") or os.environ.get("GRANARY_MASTER")
        master = None if from_env else server_address
        if not from_env and not server_address:
            LOG.negative(w, codes.INVALID_PARAMS, "no master: server_address is empty and "
                         "neither GRANARY_CONFIG_PATH nor GRANARY_MASTER is set")
            return codes.INVALID_PARAMS
        return self._open(w, master, args.resolve_tenant(None), 0, "127.0.0.1", mem_pool_size)

    def init_all(self, protocol, device_name, mount_segment_size, /):
        w = "init_all"
        protocol = args.check_str(protocol, w, "protocol", "tcp")
        device_name = args.check_str(device_name, w, "device_name", "")
        mount_segment_size = args.check_uint(mount_segment_size, w, "mount_segment_size")
        master = os.environ.get("GRANARY_MASTER") or args.DEFAULT_MASTER
        return self.setup("127.0.0.1", "P2PHANDSHAKE", mount_segment_size,
                          args.DEFAULT_LOCAL_BUFFER_SIZE, protocol, device_name, master)

    def _setup(self, b):
        w = "setup"
        if not b["master_server_addr"]:
            LOG.negative(w, codes.INVALID_PARAMS, "master_server_addr is empty")
            return codes.INVALID_PARAMS
        if b["metadata_server"] not in ("", "P2PHANDSHAKE"):
            LOG.once(f"setup: metadata_server {b['metadata_server']!r} accepted and ignored "
                     "(the Granary master is the only metadata service)", level=logging.INFO)
        if b["protocol"] not in ("", "tcp", "rdma", "ucx"):
            LOG.once(f"setup: protocol {b['protocol']!r} unknown; UCX picks the transport "
                     "(UCX_TLS)")
        elif b["protocol"]:
            LOG.once(f"setup: protocol {b['protocol']!r} accepted; the transport is UCX's "
                     "choice (set UCX_TLS to force one)", level=logging.INFO)
        if b["rdma_devices"]:
            LOG.once(f"setup: rdma_devices {b['rdma_devices']!r} accepted and ignored (set "
                     "UCX_NET_DEVICES to select NICs)", level=logging.INFO)
        if b["engine"] is not None:
            LOG.once("setup: engine (a Mooncake TransferEngine) accepted and ignored",
                     level=logging.INFO)
        if b["enable_ssd_offload"] or b["ssd_offload_path"]:
            LOG.once("setup: enable_ssd_offload/ssd_offload_path accepted and ignored: Granary "
                     "has no SSD tier")
        host, _ = args.split_host_port(b["local_hostname"] or "127.0.0.1")
        rc = self._open(w, b["master_server_addr"], args.resolve_tenant(b["tenant_id"]),
                        b["global_segment_size"], b["local_hostname"] or host,
                        b["local_buffer_size"])
        if rc == 0 and b["enable_client_http_server"]:
            self._start_http(host, b["client_http_port"])
        return rc

    def _open(self, w, master, tenant, segment_size, local_hostname, pool_size):
        self.close()
        host, port = args.split_host_port(local_hostname)
        try:
            client = _core.Client(tenant_id=tenant, master=master)
        except _core.Error as e:
            code = code_of(e)
            LOG.negative(w, code, f"opening a client of tenant {tenant!r} on master "
                         f"{master!r} failed: {cause_of(e)}")
            return code
        except (TypeError, ValueError) as e:
            LOG.negative(w, codes.INVALID_PARAMS, f"bad client settings: {e}")
            return codes.INVALID_PARAMS
        node = None
        if segment_size > 0:
            try:
                node = _core.EmbeddedNode(master or client.master, segment_size, hostname=host,
                                          port=port, cluster_id=client.cluster_id)
            except _core.Error as e:
                client.close()
                code = code_of(e)
                LOG.negative(w, code, f"starting the embedded node ({segment_size} bytes on "
                             f"{host}:{port or 'a free port'}) failed: {cause_of(e)}")
                return code
        with self._mu:
            self._client, self._node, self._tenant = client, node, tenant
            self._hostname = node.address if node is not None else local_hostname
            self._pool_size = pool_size
        logging.getLogger("granary.mooncake").info(
            "set up: tenant %r, master %r, %s", tenant, master or client.master,
            f"embedded segment {node.address} ({segment_size} bytes)" if node else
            "no embedded segment")
        return codes.OK

    def _start_http(self, host, port):
        try:
            srv = http.server.ThreadingHTTPServer((host, port), _MetricsHandler)
        except OSError as e:
            LOG.once(f"setup: client HTTP server on {host}:{port} not started: {e}")
            return
        srv.daemon_threads = True
        srv.store = self
        threading.Thread(target=srv.serve_forever, name="granary-mc-http", daemon=True).start()
        self._http = srv

    def close(self):
        with self._mu:
            client, node, srv, pool = self._client, self._node, self._http, self._pool
            self._client = self._node = self._http = self._pool = None
        if srv is not None:
            srv.shutdown()
            srv.server_close()
        if node is not None:
            node.close()
        if client is not None:
            client.close()
        if pool is not None:
            self._alloc.free(pool[0])
        return codes.OK

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown: modules may be gone)
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def health_check(self):
        c = self._client
        if c is None:
            return 1
        try:
            c.segments()
            return 0
        except _core.Error as e:
            LOG.negative("health_check", code_of(e), cause_of(e))
            return 2

    def get_hostname(self):
        return self._hostname if self._client is not None else ""

    # ------------------------------------------------------------------ helpers

    def _live(self, op, keys=1):
        c = self._client
        if c is None:
            LOG.negative(op, codes.INVALID_PARAMS, _NOT_SET_UP, keys)
        return c

    def _live_batch(self, op, n, **lists):
        """The client for a batch call of n keys whose other argument lists (by name) must
        have n entries each; None (after logging why) when not set up or a length differs, and
        the caller answers -600 for every key."""
        c = self._live(op, n)
        if c is not None and any(len(v) != n for v in lists.values()):
            self._fail(op, codes.INVALID_PARAMS, f"{n} keys, " + ", ".join(
                f"{len(v)} {name}" for name, v in lists.items()), n)
            return None
        return c

    def _is_device(self, addr, size):
        return args.is_device_pointer(_core, addr, size)

    @staticmethod
    def _fail(op, code, cause, keys=1):
        LOG.negative(op, code, cause, keys)
        return code

    @staticmethod
    def _log_batch(op, out, causes):
        """One log line per distinct negative code of a batch, with its count."""
        counts = {}
        for i, r in enumerate(out):
            if isinstance(r, int) and r < 0:
                counts.setdefault(r, [0, causes.get(i, "")])[0] += 1
        for code, (n, cause) in counts.items():
            LOG.negative(op, code, cause, n)

    def _put_opts(self, op, config, nkeys, from_buffers):
        """(soft_pin, hard_pin), or a negative code for a config this call refuses."""
        if from_buffers and config.prefer_alloc_in_same_node:
            return self._fail(op, codes.INVALID_PARAMS, "prefer_alloc_in_same_node=True is "
                              "not supported for buffer puts (as in Mooncake)", nkeys)
        if config.group_ids is not None and len(config.group_ids) != nkeys:
            return self._fail(op, codes.INVALID_PARAMS, f"{len(config.group_ids)} group_ids "
                              f"for {nkeys} keys", nkeys)
        if config.replica_num != 1:
            LOG.once(f"{op}: ReplicateConfig.replica_num={config.replica_num} ignored; the "
                     "client's replica_num (GRANARY_REPLICA_NUM) applies")
        if config.nof_replica_num or config.dfs_replica_num:
            LOG.once(f"{op}: nof_replica_num/dfs_replica_num ignored: Granary has no NoF or "
                     "DFS tier")
        if config.group_ids is not None:
            LOG.once(f"{op}: ReplicateConfig.group_ids accepted; groups are not recorded yet",
                     level=logging.INFO)
        soft = config.soft_pin_action == SoftPinAction.ENABLE
        return soft, bool(config.with_hard_pin)

    def _put_from_many(self, op, c, keys, addrs, sizes, soft, hard):
        """Puts keys[i] from [addrs[i], +sizes[i]) -> list of codes; an existing key is 0."""
        out = [0] * len(keys)
        causes = {}
        if not keys:
            return out
        try:
            # Pins go with the buffers themselves (host or device memory): no copy.
            if soft or hard:
                res = c.batch_put_from(keys, addrs, sizes, soft_pin=soft, hard_pin=hard)
            else:
                res = c.batch_put_from(keys, addrs, sizes)
            if res.count(None) == len(res):  # every put succeeded
                return out
            res = dict(enumerate(res))
        except _core.Error as e:
            return self._whole_batch(op, e, len(keys))
        for i, r in res.items():
            if isinstance(r, _core.Error):
                code = code_of(r)
                out[i] = 0 if code == codes.OBJECT_ALREADY_EXISTS else code
                causes[i] = cause_of(r)
        self._log_batch(op, out, causes)
        return out

    def _whole_batch(self, op, err, n):
        code = code_of(err)
        LOG.negative(op, code, cause_of(err), n)
        return [code] * n

    def _get_into_many(self, op, c, keys, addrs, caps):
        """Reads keys[i] into [addrs[i], +caps[i]) -> list of sizes or codes."""
        if not keys:
            return []
        try:
            res = c.batch_get_into(keys, addrs, caps)
        except _core.Error as e:
            return self._whole_batch(op, e, len(keys))
        if set(map(type, res)) == {int}:  # every read succeeded: the sizes as they are
            return res
        out, causes = [], {}
        for i, r in enumerate(res):
            if isinstance(r, _core.Error):
                out.append(code_of(r))
                causes[i] = cause_of(r)
            else:
                out.append(int(r))
        self._log_batch(op, out, causes)
        return out

    # ------------------------------------------------------------------ buffers

    def register_buffer(self, buffer_ptr, size):
        buffer_ptr = args.check_uint(buffer_ptr, "register_buffer", "buffer_ptr")
        size = args.check_uint(size, "register_buffer", "size")
        c = self._live("register_buffer")
        if c is None:
            return codes.INVALID_PARAMS
        try:
            c.register_buffer(buffer_ptr, size)
        except _core.AlreadyExists:
            return codes.OK
        except _core.Error as e:
            return self._fail("register_buffer", code_of(e), cause_of(e))
        return codes.OK

    def unregister_buffer(self, buffer_ptr):
        buffer_ptr = args.check_uint(buffer_ptr, "unregister_buffer", "buffer_ptr")
        c = self._live("unregister_buffer")
        if c is None:
            return codes.INVALID_PARAMS
        try:
            c.unregister_buffer(buffer_ptr)
        except _core.Error as e:
            code = codes.INVALID_PARAMS if isinstance(e, _core.NotFound) else code_of(e)
            return self._fail("unregister_buffer", code, cause_of(e))
        return codes.OK

    def alloc_from_mem_pool(self, arg0, /):
        size = args.check_uint(arg0, "alloc_from_mem_pool", "arg0")
        c = self._live("alloc_from_mem_pool")
        if c is None or size == 0:
            return 0
        with self._mu:
            if self._pool is None:
                base = self._alloc.alloc(self._pool_size or args.DEFAULT_LOCAL_BUFFER_SIZE)
                if base == 0:
                    return 0
                self._pool = [base, self._pool_size or args.DEFAULT_LOCAL_BUFFER_SIZE, 0]
                try:
                    c.register_buffer(base, self._pool[1])
                except _core.Error as e:
                    LOG.once(f"alloc_from_mem_pool: pool not registered ({cause_of(e)}); "
                             "transfers from it are staged")
            base, cap, off = self._pool
            off = (off + 63) & ~63
            if off + size > cap:
                LOG.negative("alloc_from_mem_pool", codes.NO_AVAILABLE_HANDLE,
                             f"pool of {cap} bytes has {cap - off} left, {size} asked")
                return 0
            self._pool[2] = off + size
            return base + off

    # ------------------------------------------------------------------ puts

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

    def _plan_scatter(self, w, keys, all_ptrs, all_sizes, out):
        """Validates scatter lists (bad ones get their code in `out`): one-entry lists are plain
        buffers, longer ones go to the core's region calls.
        -> (indices, addrs, sizes, indices of the longer lists)."""
        idx, addrs, sizes, lists = [], [], [], []
        for i, k in enumerate(keys):
            ptrs, szs = all_ptrs[i], all_sizes[i]
            if len(ptrs) != len(szs):
                out[i] = self._fail(w, codes.INVALID_PARAMS, f"key {i}: {len(ptrs)} pointers, "
                                    f"{len(szs)} sizes")
            elif args.key_code(k):
                out[i] = self._fail(w, codes.INVALID_KEY, "empty key or key over 16 KiB")
            elif sum(szs) == 0:
                if w.startswith("batch_put"):
                    LOG.once(f"{w}: size 0 stores nothing (returns 0, as Mooncake)")
                else:
                    out[i] = self._fail(w, codes.INVALID_PARAMS, f"key {i}: capacity 0")
            elif len(ptrs) == 1:
                idx.append(i)
                addrs.append(ptrs[0])
                sizes.append(szs[0])
            else:
                lists.append(i)  # the core gathers or scatters it (on the device for GPU memory)
        if not idx and not lists:
            return None
        return idx, addrs, sizes, lists

    def _regions(self, w, c, keys, all_ptrs, all_sizes, lists, out, put, pins=(False, False)):
        """The multi-entry scatter lists, through the core's region calls (gathered or scattered
        there: on the device for device memory); results into `out`."""
        if not lists:
            return
        ks = [keys[i] for i in lists]
        ps = [all_ptrs[i] for i in lists]
        ss = [all_sizes[i] for i in lists]
        try:
            if put:
                res = c.batch_put_from_regions(ks, ps, ss, soft_pin=pins[0], hard_pin=pins[1])
            else:
                res = c.batch_get_into_regions(ks, ps, ss)
        except _core.Error as e:
            for i, code in zip(lists, self._whole_batch(w, e, len(lists))):
                out[i] = code
            return
        causes = {}
        for i, r in zip(lists, res):
            if isinstance(r, _core.Error):
                code = code_of(r)
                out[i] = 0 if put and code == codes.OBJECT_ALREADY_EXISTS else code
                causes[i] = cause_of(r)
            else:
                out[i] = 0 if put else int(r)
        self._log_batch(w, out, causes)

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
        if not addrs:
            addrs = [""] * int(getattr(info, "replicas", 0) or 0)
        return [ReplicaDescriptor(int(info.size), a) for a in addrs]

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
