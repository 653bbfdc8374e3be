"""granary.mooncake.MooncakeDistributedStore method by method against a real master and node:
byte-exact with numpy arrays and torch CPU tensors, Mooncake's return conventions, bad input,
before setup and after close."""

import asyncio
import ctypes
import logging
import time
import uuid

import numpy as np
import pytest
import torch

import granary
from granary import mooncake as mc
from granary.mooncake import (MooncakeDistributedStore, MooncakeDistributedStoreAsync,
                              MooncakeHostMemAllocator, ReplicateConfig, ReplicaStatus,
                              SoftPinAction)
from granary_cluster import Cluster
from mooncake_util import addr, env, np_buf, payload, setup_args, store_on


# `cluster` (conftest.py): one master and node per module and transport (default, UCX_TLS=tcp).
CLUSTER_ARGS = {"nodes": 1, "segment_size": "128MB"}


@pytest.fixture
def store(cluster):
    with store_on(cluster) as s:
        yield s


def k(name):
    return f"{name}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- before setup / after close

def _every_method(s):
    """(call, expected not-initialised answer) for every method."""
    return [
        (lambda: s.put("a", b"x"), -600),
        (lambda: s.put_batch(["a", "b"], [b"x", b"y"]), -600),
        (lambda: s.put_parts("a", b"x", b"y"), -600),
        (lambda: s.get("a"), b""),
        (lambda: s.get_batch(["a", "b"]), [b"", b""]),
        (lambda: s.get_buffer("a"), None),
        (lambda: s.batch_get_buffer(["a", "b"]), [None, None]),
        (lambda: s.register_buffer(4096, 10), -600),
        (lambda: s.unregister_buffer(4096), -600),
        (lambda: s.put_from("a", 4096, 10), -600),
        (lambda: s.put_from_with_metadata("a", 4096, 8192, 10, 4), -600),
        (lambda: s.batch_put_from(["a", "b"], [4096, 8192], [1, 1]), [-600, -600]),
        (lambda: s.get_into("a", 4096, 10), -600),
        (lambda: s.batch_get_into(["a", "b"], [4096, 8192], [1, 1]), [-600, -600]),
        (lambda: s.batch_put_from_multi_buffers(["a", "b"], [[1], [2]], [[1], [1]]), [-600, -600]),
        (lambda: s.batch_get_into_multi_buffers(["a", "b"], [[1], [2]], [[1], [1]]), [-600, -600]),
        (lambda: s.is_exist("a"), -600),
        (lambda: s.batch_is_exist(["a", "b"]), [-600, -600]),
        (lambda: s.get_size("a"), -600),
        (lambda: s.remove("a"), -600),
        (lambda: s.batch_remove(["a", "b"]), [-600, -600]),
        (lambda: s.remove_by_regex(".*"), -600),
        (lambda: s.remove_all(), -600),
        (lambda: s.get_replica_desc("a"), []),
        (lambda: s.batch_get_replica_desc(["a"]), {"a": []}),
        (lambda: s.alloc_from_mem_pool(64), 0),
        (lambda: s.health_check(), 1),
        (lambda: s.get_hostname(), ""),
        (lambda: s.close(), 0),
    ]


def test_every_method_before_setup_answers_not_initialised():
    s = MooncakeDistributedStore()
    for call, expected in _every_method(s):
        assert call() == expected


def test_every_method_after_close_answers_not_initialised(cluster):
    s = MooncakeDistributedStore()
    assert s.setup(*setup_args(cluster)) == 0
    assert s.put("closed-k", b"v") == 0
    assert s.close() == 0
    assert s.close() == 0  # idempotent
    for call, expected in _every_method(s):
        assert call() == expected


def test_del_closes_a_set_up_store(cluster):
    s = MooncakeDistributedStore()
    assert s.setup(*setup_args(cluster)) == 0
    client = s._client
    del s
    assert client.closed


# ---------------------------------------------------------------- bytes path

def test_put_get_exists_size_remove(store):
    key = k("basic")
    assert store.is_exist(key) == 0
    assert store.get(key) == b""  # a miss is b""
    assert store.get_size(key) == -704
    assert store.put(key, payload(key, 5000)) == 0
    assert store.is_exist(key) == 1
    assert store.get(key) == payload(key, 5000)
    assert store.get_size(key) == 5000
    assert store.remove(key) == 0
    assert store.remove(key) == -704
    assert store.is_exist(key) == 0


def test_put_of_existing_key_returns_0_and_keeps_old_value(store):
    key = k("dup")
    assert store.put(key, b"first") == 0
    assert store.put(key, b"second") == 0
    assert store.get(key) == b"first"


def test_put_takes_numpy_bytearray_memoryview_and_torch(store):
    arr = np.arange(1000, dtype=np.float32).reshape(10, 100)
    t = torch.arange(300, dtype=torch.int16)
    cases = {k("np"): (arr, arr.tobytes()), k("ba"): (bytearray(b"abc" * 10), b"abc" * 10),
             k("mv"): (memoryview(b"xyz" * 7), b"xyz" * 7),
             k("torch"): (t, t.numpy().tobytes())}
    for key, (value, expected) in cases.items():
        assert store.put(key, value) == 0
        assert store.get(key) == expected  # all the bytes, not the element count


def test_put_batch_returns_one_int_and_get_batch_one_entry_per_key(store):
    keys = [k(f"pb{i}") for i in range(4)]
    assert store.put_batch(keys, [payload(x, 100 + i) for i, x in enumerate(keys)]) == 0
    assert store.put_batch(keys[:2], [b"other", b"other"]) == 0  # existing keys: 0
    got = store.get_batch(keys + ["absent-" + keys[0]])
    assert got == [payload(x, 100 + i) for i, x in enumerate(keys)] + [b""]
    assert store.get_batch([]) == []  # Mooncake gives [b""]
    assert store.put_batch(keys, [b"x"]) == -600
    assert store.put_batch([], []) == 0


def test_put_parts_concatenates_and_buffers_read_it_back(store):
    key = k("parts")
    header = bytes(range(28))
    body = np.arange(1000, dtype=np.uint8)
    assert store.put_parts(key, header, body, memoryview(b"tail")) == 0
    expected = header + body.tobytes() + b"tail"
    h = store.get_buffer(key)
    assert isinstance(h, mc.BufferHandle)
    assert h.size() == len(h) == len(expected)
    assert bytes(memoryview(h)) == expected
    assert ctypes.string_at(h.ptr(), h.size()) == expected
    assert np.frombuffer(h, dtype=np.uint8)[:28].tobytes() == header
    assert store.get_buffer("absent-" + key) is None
    hs = store.batch_get_buffer([key, "absent-" + key])
    assert len(hs) == 2 and bytes(hs[0]) == expected and hs[1] is None
    assert store.batch_get_buffer([]) == []
    with pytest.raises(RuntimeError, match="parts must be 1-D bytes-like"):
        store.put_parts(key, np.zeros((2, 2), dtype=np.uint8))
    with pytest.raises(RuntimeError, match="parts must be 1-D bytes-like"):
        store.put_parts(key, np.zeros(4, dtype=np.int32))


# ---------------------------------------------------------------- buffer path

def test_put_from_get_into_numpy_and_torch_exact_size_into_larger_buffer(store):
    for kind in ("numpy", "torch"):
        key = k(f"pf-{kind}")
        data = payload(key, 70000)
        if kind == "numpy":
            src = np.frombuffer(data, dtype=np.uint8).copy()
            dst = np_buf(100000, 0xEE)
        else:
            src = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            dst = torch.full((100000,), 0xEE, dtype=torch.uint8)
        assert store.register_buffer(addr(dst), 100000) == 0
        assert store.put_from(key, addr(src), len(data)) == 0
        assert store.get_into(key, addr(dst), 100000) == 70000  # the object size
        out = dst.numpy() if kind == "torch" else dst
        assert out[:70000].tobytes() == data
        assert (out[70000:] == 0xEE).all()
        assert store.unregister_buffer(addr(dst)) == 0


def test_batch_put_from_batch_get_into(store):
    keys = [k(f"bpf{i}") for i in range(5)]
    sizes = [1, 4096, 65536, 100000, 7]
    srcs = [np.frombuffer(payload(x, n), dtype=np.uint8).copy() for x, n in zip(keys, sizes)]
    assert store.batch_put_from(keys, [addr(a) for a in srcs], sizes) == [0] * 5
    assert store.batch_put_from(keys, [addr(a) for a in srcs], sizes) == [0] * 5  # existing
    dsts = [torch.zeros(n + 100, dtype=torch.uint8) for n in sizes]
    got = store.batch_get_into(keys, [addr(d) for d in dsts], [n + 100 for n in sizes])
    assert got == sizes
    for d, a, n in zip(dsts, srcs, sizes):
        assert d.numpy()[:n].tobytes() == a.tobytes()
    assert store.batch_put_from([], [], []) == []
    assert store.batch_get_into([], [], []) == []


def test_put_from_size_0_stores_nothing(store):
    key = k("zero")
    buf = np_buf(16)
    assert store.put_from(key, addr(buf), 0) == 0
    assert store.is_exist(key) == 0
    assert store.batch_put_from([key], [addr(buf)], [0]) == [0]
    assert store.is_exist(key) == 0


def test_multi_buffers_uneven_scatter_lists_numpy_and_torch(store):
    keys = [k(f"mb{i}") for i in range(3)]
    layout = [[100, 4000, 7], [65536], [1, 2, 3, 4, 5000]]
    srcs = [[np.frombuffer(payload(f"{x}{j}", n), dtype=np.uint8).copy() for j, n in enumerate(l)]
            for x, l in zip(keys, layout)]
    assert store.batch_put_from_multi_buffers(
        keys, [[addr(a) for a in s] for s in srcs], layout) == [0, 0, 0]
    for x, s in zip(keys, srcs):
        assert store.get(x) == b"".join(a.tobytes() for a in s)
    # Read back into a different scatter layout (torch), capacity = the sum of the sizes.
    read_layout = [[4000, 107], [30000, 35536], [5010]]
    dsts = [[torch.full((n,), 0xAB, dtype=torch.uint8) for n in l] for l in read_layout]
    got = store.batch_get_into_multi_buffers(keys, [[addr(t) for t in d] for d in dsts],
                                             read_layout)
    assert got == [sum(l) for l in layout]
    for x, d, l in zip(keys, dsts, layout):
        flat = b"".join(t.numpy().tobytes() for t in d)
        assert flat[:sum(l)] == store.get(x)
        assert set(flat[sum(l):]) <= {0xAB}
    assert store.batch_put_from_multi_buffers([], [], []) == []
    assert store.batch_get_into_multi_buffers([], [], []) == []


def test_put_from_with_metadata_stores_metadata_then_data(store):
    key = k("meta")
    data, meta = np.arange(200, dtype=np.uint8), np.full(40, 9, dtype=np.uint8)
    assert store.put_from_with_metadata(key, addr(data), addr(meta), 200, 40) == 0
    assert store.get(key) == meta.tobytes() + data.tobytes()


# ---------------------------------------------------------------- bad input

def test_too_small_destination_gives_600_and_writes_nothing_past_it(store):
    key = k("small")
    assert store.put(key, payload(key, 10000)) == 0
    guard = np_buf(20000, 0x5A)
    base = addr(guard)
    assert store.get_into(key, base, 9999) == -600
    assert store.batch_get_into([key], [base], [5000]) == [-600]
    assert store.batch_get_into_multi_buffers([key], [[base, base + 6000]],
                                              [[3000, 3000]]) == [-600]
    assert (guard[3000:] == 0x5A).all()  # nothing past any capacity was written
    assert (guard[9999:] == 0x5A).all()


def test_mismatched_list_lengths_give_one_600_per_key(store):
    keys = ["a", "b", "c"]
    assert store.batch_put_from(keys, [1, 2], [1, 1, 1]) == [-600] * 3
    assert store.batch_get_into(keys, [1, 2, 3], [1]) == [-600] * 3
    assert store.batch_put_from_multi_buffers(keys, [[1]], [[1], [1], [1]]) == [-600] * 3
    assert store.batch_get_into_multi_buffers(keys, [[1], [2], [3]], [[1]]) == [-600] * 3
    # one key's pointer and size lists of different lengths: -600 for that key only
    key = k("mis")
    src = np_buf(10, 3)
    assert store.batch_put_from_multi_buffers([key, key + "x"], [[addr(src)], [addr(src)]],
                                              [[10], [5, 5]]) == [0, -600]
    cfg = ReplicateConfig(group_ids=["g1"])
    assert store.batch_put_from(keys, [addr(src)] * 3, [1] * 3, cfg) == [-600] * 3


def test_prefer_alloc_in_same_node_on_buffer_puts_gives_600(store):
    src = np_buf(10)
    cfg = ReplicateConfig()
    cfg.prefer_alloc_in_same_node = True
    assert store.put_from(k("pa"), addr(src), 10, cfg) == -600
    assert store.batch_put_from([k("pa"), k("pb")], [addr(src)] * 2, [10, 10], cfg) == [-600, -600]


def test_invalid_keys_give_400(store):
    assert store.put("", b"x") == -400
    assert store.is_exist("") == -400
    assert store.put("x" * (16 * 1024 + 1), b"x") == -400
    assert store.batch_is_exist(["", k("ok")]) == [-400, 0]


def test_wrong_types_raise_type_error(store):
    with pytest.raises(TypeError):
        store.put(1, b"x")
    with pytest.raises(TypeError):
        store.put("k", 12)
    with pytest.raises(TypeError):
        store.get(None)
    with pytest.raises(TypeError):
        store.get(arg0="k")  # positional-only, as pybind's arg0
    with pytest.raises(TypeError):
        store.is_exist(arg0="k")
    with pytest.raises(TypeError):
        store.put_from("k", "not-an-address", 10)
    with pytest.raises(TypeError):
        store.get_into("k", 4096, -1)
    with pytest.raises(TypeError):
        store.batch_get_into("k", [1], [1])
    with pytest.raises(TypeError):
        store.batch_is_exist([1, 2])
    with pytest.raises(TypeError):
        store.put("k", b"x", config={"replica_num": 1})
    with pytest.raises(TypeError):
        store.batch_put_from_multi_buffers(["k"], [1], [[1]])
    with pytest.raises(TypeError):
        store.init_all("tcp", "", 1 << 20, 5)
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError):
        s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "")  # 6 of 7 required
    with pytest.raises(TypeError):
        s.setup("127.0.0.1", "P2PHANDSHAKE", "16MB", 1 << 20, "tcp", "", "m:1")
    with pytest.raises(TypeError):
        ReplicateConfig(tenant_id="x")
    with pytest.raises(AttributeError):
        ReplicateConfig().tenant_id = "x"


def test_unknown_setup_keyword_raises_type_error_naming_only_it(cluster):
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError) as e:
        s.setup(*setup_args(cluster), None, tenant_id="t1", client_http_port=1,
                future_option=True)
    msg = str(e.value)
    assert "future_option" in msg
    assert "tenant_id" not in msg and "client_http_port" not in msg
    assert s.health_check() == 1  # nothing was set up


def test_device_pointer_refused_with_600_and_untouched(store):
    key = k("dev")
    assert store.put(key, payload(key, 4096)) == 0
    fake = np_buf(8192, 0x11)
    base = addr(fake)
    granary._testing_add_fake_device_range(base, 8192)
    try:
        assert store.register_buffer(base, 8192) == -600
        assert store.put_from(k("dev2"), base, 4096) == -600
        assert store.get_into(key, base, 8192) == -600
        assert store.batch_put_from([k("dev3")], [base], [4096]) == [-600]
        assert store.batch_get_into([key], [base], [8192]) == [-600]
        assert store.batch_put_from_multi_buffers([k("dev4")], [[base]], [[4096]]) == [-600]
        assert store.batch_get_into_multi_buffers([key], [[base]], [[8192]]) == [-600]
        # the layer's own gather/scatter path checks too
        assert store.batch_get_into_multi_buffers([key], [[base, base + 4096]],
                                                  [[4096, 4096]]) == [-600]
    finally:
        granary._testing_clear_fake_device_ranges()
    assert (fake == 0x11).all()


# ---------------------------------------------------------------- existence, removal, replicas

def test_remove_right_after_is_exist_returns_0(store):
    """is_exist takes no read lease (Mooncake's does: an immediate remove gives -706)."""
    keys = [k(f"rx{i}") for i in range(3)]
    for x in keys:
        assert store.put(x, b"v" * 1000) == 0
    assert store.is_exist(keys[0]) == 1
    assert store.remove(keys[0]) == 0
    assert store.batch_is_exist(keys[1:]) == [1, 1]
    assert store.batch_remove(keys[1:] + [keys[0]]) == [0, 0, -704]
    assert store.batch_remove([]) == []


def test_remove_after_get_returns_0(store):
    key = k("rg")
    assert store.put(key, b"v" * 1000) == 0
    assert store.get(key) == b"v" * 1000
    assert store.remove(key) == 0  # the lease ended with the transfer


def test_remove_by_regex_and_remove_all_count_the_callers_keys(cluster):
    with store_on(cluster, tenant_id="tenant-rm") as s, store_on(cluster) as other:
        for i in range(5):
            assert s.put(f"re-keep-{i}", b"x") == 0
            assert s.put(f"re-drop-{i}", b"x") == 0
        assert other.put("re-drop-other", b"x") == 0
        assert s.remove_by_regex("^re-drop-") == 5
        assert s.remove_by_regex("(") == -600
        assert s.batch_is_exist([f"re-keep-{i}" for i in range(5)]) == [1] * 5
        assert s.remove_all(force=True) == 5
        assert s.remove_all() == 0
        assert other.is_exist("re-drop-other") == 1  # another tenant's key stays


def test_replica_descriptors(store, cluster):
    key = k("desc")
    assert store.put(key, b"d" * 3000) == 0
    descs = store.get_replica_desc(key)
    assert len(descs) == 1
    d = descs[0]
    assert d.status == ReplicaStatus.COMPLETE
    assert d.is_memory_replica() and not d.is_disk_replica() and not d.is_local_disk_replica()
    bd = d.get_memory_descriptor().buffer_descriptor
    assert bd.size == 3000
    assert bd.transport_endpoint.startswith("127.0.0.1:")
    assert store.get_replica_desc("absent-" + key) == []
    both = store.batch_get_replica_desc([key, "absent-" + key])
    assert len(both[key]) == 1 and both["absent-" + key] == []


# ---------------------------------------------------------------- lifecycle and config

def test_health_check_and_hostname(store):
    assert store.health_check() == 0
    assert store.get_hostname() == "127.0.0.1"


def test_health_check_2_when_master_gone():
    c = Cluster(nodes=1, segment_size="16MB")
    try:
        s = MooncakeDistributedStore()
        assert s.setup(*setup_args(c)) == 0
        c.kill("master")
        assert s.health_check() == 2
        s.close()
    finally:
        c.close()


def test_setup_fails_with_code_when_master_unreachable_or_empty():
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", "") == -600
    rc = s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", "127.0.0.1:1")
    assert rc in (-900, -901)
    assert s.health_check() == 1


def test_global_segment_size_starts_an_embedded_node(cluster):
    before = cluster.segment_count()
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 32 << 20, 16 << 20, "tcp", "",
                   cluster.master) == 0
    host = s.get_hostname()
    assert host.startswith("127.0.0.1:") and int(host.rsplit(":", 1)[1]) > 0
    assert cluster.segment_count() == before + 1
    cfg = ReplicateConfig(preferred_segment=host)
    assert s.put(k("emb"), b"e" * 100000, cfg) == 0
    s.close()  # unmounts the segment
    deadline = time.monotonic() + 10
    while cluster.segment_count() != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cluster.segment_count() == before


def test_setup_dict_with_engine_spellings(cluster):
    s = MooncakeDistributedStore()
    cfg = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
           "global_segment_size": 0, "local_buffer_size": "16 MB", "protocol": "tcp",
           "device_name": "", "master_server_address": cluster.master, "unknown_key": 1}
    assert s.setup(cfg) == 0
    assert s.put(k("dict"), b"x") == 0
    s.close()
    assert s.setup(dict(cfg, master_server_addr="127.0.0.1:1")) == -600  # both spellings differ
    assert s.setup({"metadata_server": "x"}) == -600  # local_hostname missing
    assert s.setup(dict(cfg, local_buffer_size="12")) == -600  # below 1 KiB


def test_setup_dummy_and_init_all(cluster):
    with env(GRANARY_CONFIG_PATH=None, GRANARY_MASTER=None):
        s = MooncakeDistributedStore()
        assert s.setup_dummy(1 << 20, 16 << 20, cluster.master) == 0
        p = s.alloc_from_mem_pool(4096)
        assert p != 0
        ctypes.memmove(p, b"pool" * 1024, 4096)
        key = k("dummy")
        assert s.put_from(key, p, 4096) == 0
        assert s.get(key) == b"pool" * 1024
        assert s.alloc_from_mem_pool(2 << 20) == 0  # over the pool
        s.close()
    with env(GRANARY_MASTER=cluster.master):
        s = MooncakeDistributedStore()
        assert s.init_all("tcp", "", 0) == 0
        assert s.put(k("init"), b"x") == 0
        s.close()


def test_tenant_resolution_order(cluster):
    def tenant_of(**kw):
        with store_on(cluster, **kw) as s:
            key = k("tenant")
            assert s.put(key, b"x") == 0
            for t in ("arg-t", "granary-t", "mooncake-t", "default"):
                with granary.Client(tenant_id=t, master=cluster.master) as c:
                    if c.exists(key):
                        return t
    with env(GRANARY_TENANT_ID="granary-t", MOONCAKE_TENANT_ID="mooncake-t"):
        assert tenant_of(tenant_id="arg-t") == "arg-t"
        assert tenant_of(tenant_id="default") == "granary-t"
        assert tenant_of() == "granary-t"
    with env(GRANARY_TENANT_ID=None, MOONCAKE_TENANT_ID="mooncake-t"):
        assert tenant_of() == "mooncake-t"
    with env(GRANARY_TENANT_ID=None, MOONCAKE_TENANT_ID=None):
        assert tenant_of() == "default"
        assert tenant_of(tenant_id=None) == "default"


def test_replicate_config_fields_and_pins(store):
    cfg = ReplicateConfig()
    assert (cfg.replica_num, cfg.nof_replica_num, cfg.dfs_replica_num) == (1, 0, 0)
    assert cfg.soft_pin_action == SoftPinAction.PRESERVE and cfg.soft_pin_ttl_ms is None
    assert cfg.with_hard_pin is False and cfg.preferred_segment == ""
    assert cfg.preferred_segments == [] and cfg.group_ids is None
    assert "replica_num=1" in str(cfg) and "group_ids=None" in str(cfg)
    assert hasattr(ReplicateConfig, "group_ids")  # SGLang probes the class
    cfg.soft_pin_action = SoftPinAction.ENABLE
    cfg.with_hard_pin = True
    key = k("pinned")
    src = np.frombuffer(payload(key, 5000), dtype=np.uint8).copy()
    assert store.put_from(key, addr(src), 5000, cfg) == 0
    assert store.put(key + "b", b"bytes", cfg) == 0
    assert store.get(key) == src.tobytes() and store.get(key + "b") == b"bytes"


def test_negative_results_are_logged_with_cause(store, caplog):
    caplog.set_level(logging.INFO, logger="granary.mooncake")
    mc.codes.LOG.reset()  # rate-limited: the other transport's run logged these already
    s = MooncakeDistributedStore()
    s.get_into("x", 4096, 10)  # before setup
    assert any("-600" in r.getMessage() and "setup" in r.getMessage() for r in caplog.records)
    key = k("logged")
    assert store.get_size(key) == -704
    assert any("get_size" in r.getMessage() and "-704" in r.getMessage()
               for r in caplog.records)


def test_unsupported_calls_answer_600(store):
    assert store.upsert("k", b"v") == -600
    assert store.batch_upsert_from(["a", "b"], [1, 2], [1, 1]) == [-600, -600]
    assert store.query_task(None) == (None, -600)


def test_async_wrapper_runs_in_executor(cluster):
    s = MooncakeDistributedStoreAsync()
    assert s.setup(*setup_args(cluster)) == 0
    key = k("async")

    async def main():
        assert await s.async_put(key, b"async-bytes") == 0
        assert await s.async_is_exist(key) == 1
        return await asyncio.gather(s.async_get(key), s.async_batch_is_exist([key, key + "x"]))

    assert asyncio.run(main()) == [b"async-bytes", [1, 0]]
    s.close()


def test_host_mem_allocator_is_page_aligned_and_usable(store):
    a = MooncakeHostMemAllocator()
    p = a.alloc(3 * 4096 + 5)
    assert p != 0 and p % 4096 == 0
    ctypes.memmove(p, b"z" * 100, 100)
    assert store.register_buffer(p, 3 * 4096 + 5) == 0
    key = k("alloc")
    assert store.put_from(key, p, 100) == 0
    assert store.get(key) == b"z" * 100
    assert store.unregister_buffer(p) == 0
    assert a.free(p) == 0
    assert a.free(p) == -1
    assert a.alloc(0) == 0


def test_client_http_server_serves_metrics(cluster):
    from granary_cluster import free_port, http_get
    port = free_port()
    with store_on(cluster, enable_client_http_server=True, client_http_port=port) as s:
        assert s.put(k("http"), b"x") == 0
        assert http_get(port, "/metrics") is not None
