"""The lifecycle and shared helpers of granary.mooncake's MooncakeDistributedStore: setup and
close, the in-process node and pool, buffer registration, the liveness checks, and the put and
get plumbing both halves use (option building, batch calls, scatter-list planning).

Split out of mooncake.py along the class's jobs; the class itself is assembled there.
"""

import http.server
import logging
import os
import sys
import threading

import granary as _core

from . import mooncake_args as args
from . import mooncake_codes as codes
from .mooncake_codes import LOG, cause_of, code_of
from .mooncake_types import MooncakeHostMemAllocator, ReplicateConfig, SoftPinAction


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




class _StoreBase:
    """Setup, close and the plumbing shared by the put and get halves (mooncake_put.py,
    mooncake_get.py). Thread-safety as the assembled class (mooncake.py)."""

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
