"""granary.Client against a real master and node, over the default transports and UCX_TLS=tcp:
every core method byte-exact with numpy arrays, bytearray, memoryview and torch CPU tensors as
buffers; the batch forms; bad input and errors; close."""

import json
import os
import re
import threading
import time

import numpy as np
import pytest
import torch

import granary

SIZES = [1, 4096 + 3, (1 << 20) + 17]


def pattern(n, seed=0):
    """n bytes that differ from any shifted copy of themselves."""
    rng = np.random.default_rng(seed + n)
    return rng.integers(0, 256, n, dtype=np.uint8).tobytes()


# Buffer kinds: make(data) -> a source holding `data`; empty(n) -> a writable n-byte
# destination; read(buf) -> its bytes.
KINDS = {
    "numpy": (lambda d: np.frombuffer(d, np.uint8).copy(), lambda n: np.zeros(n, np.uint8),
              lambda b: b.tobytes()),
    "bytearray": (bytearray, bytearray, bytes),
    "memoryview": (lambda d: memoryview(bytearray(d)), lambda n: memoryview(bytearray(n)),
                   lambda b: b.tobytes()),
    "torch": (lambda d: torch.frombuffer(bytearray(d), dtype=torch.uint8),
              lambda n: torch.zeros(n, dtype=torch.uint8), lambda b: b.numpy().tobytes()),
}


def test_transport_env(client, key):
    """The client side follows the cluster's transport: under UCX_TLS=tcp every endpoint's
    RMA transport is tcp."""
    transport = "tcp" if os.environ.get("UCX_TLS") == "tcp" else "default"
    client.put(key, pattern(100000))
    assert client.get(key) == pattern(100000)
    rma = re.findall(r'^granary_transport_endpoints_total\{rma="([^"]*)"', client.metrics_text(),
                     re.M)
    assert rma, client.metrics_text()
    if transport == "tcp":
        assert set(rma) == {"tcp"}


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "numpy"])
def test_put_get(client, key, kind, size):
    data = pattern(size)
    value = data if kind == "bytes" else KINDS[kind][0](data)
    client.put(key, value)
    got = client.get(key)
    assert type(got) is bytes and got == data


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("kind", list(KINDS))
def test_put_from_get_into(client, key, kind, size):
    make, empty, read = KINDS[kind]
    data = pattern(size, 1)
    client.put_from(key, make(data))
    dst = empty(size + 100)  # larger than the object: get_into returns the object's size
    assert client.get_into(key, dst) == size
    back = read(dst)
    assert back[:size] == data and back[size:] == bytes(100)
    assert client.get(key) == data


def test_int_address(client, key):
    src = np.frombuffer(pattern(5000), np.uint8).copy()
    client.put_from(key, src.ctypes.data, src.nbytes)
    dst = np.zeros(8000, np.uint8)
    assert client.get_into(key, dst.ctypes.data, dst.nbytes) == 5000
    assert dst[:5000].tobytes() == src.tobytes()
    with pytest.raises(TypeError, match="size is required"):
        client.get_into(key, dst.ctypes.data)


def test_size_argument(client, key):
    src = np.frombuffer(pattern(1000), np.uint8).copy()
    client.put_from(key, src, 100)
    assert client.get(key) == src[:100].tobytes()
    dst = np.zeros(1000, np.uint8)
    assert client.get_into(key, dst, 100) == 100
    with pytest.raises(granary.InvalidArgument, match="larger than"):
        client.put_from(key + "x", src, 1001)
    with pytest.raises(granary.InvalidArgument):
        client.put_from(key + "x", src, -1)


def test_torch_float_tensor(client, key):
    t = torch.randn(64, 128)
    client.put_from(key, t)
    assert client.stat(key).size == t.numel() * t.element_size()
    out = torch.empty(64, 128)
    assert client.get_into(key, out) == t.numel() * 4
    assert torch.equal(out, t)
    with pytest.raises(granary.InvalidArgument, match="contiguous"):
        client.get_into(key, out.t())


def test_noncontiguous_numpy_refused(client, key):
    client.put(key, b"x" * 100)
    a = np.zeros((20, 20), np.uint8)[:, ::2]
    with pytest.raises(granary.InvalidArgument):
        client.get_into(key, a)


def test_batch_put_get(client, key):
    keys = [f"{key}/{i}" for i in range(5)]
    values = [pattern(100 * (i + 1), i) for i in range(5)]
    mixed = [values[0], bytearray(values[1]), memoryview(values[2]),
             np.frombuffer(values[3], np.uint8), values[4]]
    assert client.batch_put(keys, mixed) == [None] * 5
    again = client.batch_put(keys[:1] + [key + "/new"], [b"a", b"b"], soft_pin=True)
    assert isinstance(again[0], granary.AlreadyExists) and again[1] is None
    got = client.batch_get(keys + [key + "/missing"])
    assert got[:5] == values
    assert isinstance(got[5], granary.NotFound) and got[5].code == "NOT_FOUND"
    assert client.batch_get([]) == []


def test_batch_put_tier(client, key):
    # The test cluster has host segments only: host and any land there, gpu has no room.
    assert client.batch_put([key + "/h"], [b"h"], tier="host") == [None]
    assert client.batch_put([key + "/a"], [b"a"], tier="any") == [None]
    res = client.batch_put([key + "/g"], [b"g"], tier="gpu")
    assert isinstance(res[0], granary.ResourceExhausted) and "gpu tier" in str(res[0])
    with pytest.raises(ValueError, match="tier 'ssd' is not one of host, gpu, any"):
        client.batch_put([key + "/s"], [b"s"], tier="ssd")
    assert client.batch_exists([key + "/h", key + "/a", key + "/g", key + "/s"]) == [
        True, True, False, False]
    assert client.batch_get([key + "/h", key + "/a"]) == [b"h", b"a"]


def test_put_and_get_options_on_every_form(client, key):
    """Pins and tier reach the buffer and scatter-list puts; lease and tier the gets."""
    a = np.frombuffer(pattern(3000, 5), np.uint8).copy()
    regions = [[a.ctypes.data, a.ctypes.data + 1000]], [[1000, 2000]]
    for tier, ok in (("gpu", False), ("host", True)):
        one = client.batch_put_from([key + "/b"], [a], tier=tier, hard_pin=True)
        many = client.batch_put_from_regions([key + "/r"], *regions, tier=tier, soft_pin=True)
        for res in (one, many):
            if ok:
                assert res == [None]
            else:
                assert isinstance(res[0], granary.ResourceExhausted) and "gpu tier" in str(res[0])
        assert client.batch_exists([key + "/b", key + "/r"]) == [ok, ok]
    assert client.batch_get([key + "/b", key + "/r"], lease_ms=30000, tier="host") == [
        a.tobytes(), a.tobytes()]
    dst = np.zeros(3000, np.uint8)
    assert client.batch_get_into([key + "/b"], [dst], lease_ms=1, tier="gpu") == [3000]
    assert dst.tobytes() == a.tobytes()
    x, y = np.zeros(1500, np.uint8), np.zeros(1500, np.uint8)
    got = client.batch_get_into_regions([key + "/r"], [[x.ctypes.data, y.ctypes.data]],
                                        [[1500, 1500]], lease_ms=600000, tier="any")
    assert got == [3000] and x.tobytes() + y.tobytes() == a.tobytes()
    for bad in (-1, 600001):
        with pytest.raises(ValueError, match=f"lease_ms={bad} is not in"):
            client.batch_get([key + "/b"], lease_ms=bad)
    with pytest.raises(ValueError, match="tier 'ssd' is not one of host, gpu, any"):
        client.batch_get_into([key + "/b"], [dst], tier="ssd")
    with pytest.raises(ValueError, match="tier 'nvme'"):
        client.batch_put_from([key + "/n"], [a], tier="nvme")
    assert client.batch_exists([key + "/n"]) == [False]


@pytest.mark.parametrize("kind", list(KINDS))
def test_batch_put_from_get_into(client, key, kind):
    make, empty, read = KINDS[kind]
    keys = [f"{key}/{i}" for i in range(4)]
    data = [pattern(s, 2) for s in (10, 4096, 65536, (1 << 20) + 1)]
    assert client.batch_put_from(keys, [make(d) for d in data]) == [None] * 4
    dsts = [empty(len(d) + 8) for d in data]
    assert client.batch_get_into(keys, dsts) == [len(d) for d in data]
    for d, b in zip(data, dsts):
        assert read(b)[:len(d)] == d
    # sizes: partial sources, and a per-key failure (too small) that does not fail the batch
    srcs = [make(d) for d in data]
    assert client.batch_put_from([k + "/p" for k in keys], srcs, [5, None, 7, 9]) == [None] * 4
    small = [empty(len(d)) for d in data]
    res = client.batch_get_into([keys[0], keys[1] + "/missing", keys[2]], small[:3],
                                [len(data[0]), None, 100])
    assert res[0] == len(data[0])
    assert isinstance(res[1], granary.NotFound)
    assert isinstance(res[2], granary.Error) and not isinstance(res[2], granary.NotFound)
    assert read(small[2]) == bytes(len(data[2]))  # nothing written on failure


def test_batch_regions_host_memory(client, key):
    """Scatter lists of host addresses: an object is the concatenation of its regions."""
    keys = [f"{key}/{i}" for i in range(2)]
    a = np.frombuffer(pattern(5000, 3), np.uint8).copy()
    b = np.frombuffer(pattern(300, 4), np.uint8).copy()
    ptrs = [[a.ctypes.data, a.ctypes.data + 4000], [b.ctypes.data]]
    assert client.batch_put_from_regions(keys, ptrs, [[100, 1000], [300]]) == [None, None]
    assert client.get(keys[0]) == a[:100].tobytes() + a[4000:5000].tobytes()
    x, y = np.zeros(600, np.uint8), np.zeros(500, np.uint8)
    got = client.batch_get_into_regions(keys[:1], [[x.ctypes.data, y.ctypes.data]], [[600, 500]])
    assert got == [1100]
    assert x.tobytes() + y.tobytes() == a[:100].tobytes() + a[4000:5000].tobytes()
    with pytest.raises(granary.InvalidArgument, match=r"ptr_lists\[0\]\[1\] is a <class 'str'>"):
        client.batch_put_from_regions(keys[:1], [[a.ctypes.data, "x"]], [[1, 1]])
    with pytest.raises(granary.InvalidArgument, match=r"size_lists\[0\]\[0\] = -1"):
        client.batch_put_from_regions(keys[:1], [[a.ctypes.data]], [[-1]])
    with pytest.raises(granary.InvalidArgument, match="key 0: 2 addresses but 1 sizes"):
        client.batch_get_into_regions(keys[:1], [[x.ctypes.data, y.ctypes.data]], [[600]])
    assert client.get(keys[1]) == b.tobytes()  # nothing stored was touched


def test_batch_exists_remove(client, key):
    keys = [f"{key}/{i}" for i in range(3)]
    client.batch_put(keys[:2], [b"a", b"b"])
    assert client.batch_exists(keys) == [True, True, False]
    res = client.batch_remove(keys)
    assert res[:2] == [None, None] and isinstance(res[2], granary.NotFound)
    assert client.batch_exists(keys) == [False, False, False]


def test_mismatched_lengths(client, key):
    with pytest.raises(granary.InvalidArgument, match="values has 1 entries but keys has 2"):
        client.batch_put([key, key + "2"], [b"x"])
    with pytest.raises(granary.InvalidArgument):
        client.batch_get_into([key], [bytearray(4), bytearray(4)])
    with pytest.raises(granary.InvalidArgument):
        client.batch_put_from([key], [b"abc"], [1, 2])


def test_exists_remove_stat(client, key):
    assert client.exists(key) is False
    client.put(key, b"12345")
    assert client.exists(key) is True
    info = client.stat(key)
    assert (info.key, info.size, info.complete, info.replicas) == (key, 5, True, 1)
    assert "ObjectInfo(" in repr(info)
    client.remove(key)
    assert not client.exists(key)
    with pytest.raises(granary.NotFound):
        client.remove(key)
    with pytest.raises(granary.NotFound):
        client.stat(key)


def test_list(client, key):
    keys = sorted(f"{key}/{i:02d}" for i in range(12))
    client.batch_put(keys, [b"v"] * len(keys))
    page = client.list(key + "/", limit=5)
    assert [o.key for o in page.objects] == keys[:5] and page.more
    rest = client.list(key + "/", limit=100, start_after=page.objects[-1].key)
    assert [o.key for o in rest.objects] == keys[5:] and not rest.more
    assert client.list(key + "/nothing").objects == []


def test_segments_and_metrics(client):
    segs = client.segments()
    assert len(segs) == 1
    s = segs[0]
    assert s.tier == "host" and s.size == 128 << 20 and s.node_address and s.name
    assert isinstance(client.metrics_text(), str)


def test_keys_bytes_and_kvkey(client, key):
    bkey = key.encode() + b"/\xff\xfe"
    client.put(bkey, b"binary key")
    assert client.get(bkey) == b"binary key"
    assert client.stat(bkey).key == bkey  # not UTF-8: bytes
    k = granary.KvKey("llama-3-8b", "sha256", key)
    client.put(k, b"block")
    assert client.get(k.encode()) == b"block"
    assert client.exists(k)


def test_kvkey():
    k = granary.KvKey("llama-3-8b", "sha256", "ab12")
    assert k.encode() == "kv1/10:llama-3-8b/6:sha256/-/4:ab12"
    a = granary.KvKey("llama-3-8b", "sha256", "ab12", adapter_id="lora/fr")
    assert a.encode() == "kv1/10:llama-3-8b/6:sha256/7:lora/fr/4:ab12"
    assert granary.KvKey.decode(a.encode()) == a
    assert hash(granary.KvKey.decode(k.encode())) == hash(k)
    assert a.adapter_id == "lora/fr" and k.adapter_id is None
    assert granary.KvKey.prefix("llama-3-8b", "sha256") == "kv1/10:llama-3-8b/6:sha256/-/"
    with pytest.raises(granary.InvalidArgument):
        granary.KvKey("", "sha256", "ab").encode()
    with pytest.raises(granary.InvalidArgument):
        granary.KvKey.decode("not a kv key")


def test_lookup_prefix(client, key):
    model = "m-" + key[-8:]
    hashes = [f"h{i}" for i in range(6)]
    for h in hashes[:4]:
        client.put(granary.KvKey(model, "sha256", h, "ad"), h.encode() * 10)
    r = client.lookup_prefix(model, "sha256", "ad", hashes)
    assert r.present == 4 and r.lease_ms == 0
    assert [b.key for b in r.blocks] == [granary.KvKey(model, "sha256", h, "ad").encode()
                                         for h in hashes[:4]]
    assert all(b.size == 20 and b.node_address for b in r.blocks)
    assert client.get(r.blocks[2].key) == b"h2" * 10
    assert client.lookup_prefix(model, "sha256", None, hashes).present == 0
    leased = client.lookup_prefix(model, "sha256", "ad", hashes, lease=True)
    assert leased.present == 4 and leased.lease_ms > 0
    listed = client.list(granary.KvKey.prefix(model, "sha256", "ad"))
    assert len(listed.objects) == 4


def test_register_buffer(client, key):
    buf = np.zeros(1 << 20, np.uint8)
    buf[:] = np.frombuffer(pattern(1 << 20, 3), np.uint8)
    client.register_buffer(buf)
    with pytest.raises(granary.AlreadyExists):
        client.register_buffer(buf)
    client.put_from(key, buf, 1000)
    dst = buf[4096:]
    assert client.get_into(key, dst) == 1000
    assert buf[4096:5096].tobytes() == buf[:1000].tobytes()
    client.unregister_buffer(buf)
    with pytest.raises(granary.NotFound):
        client.unregister_buffer(buf)
    t = torch.zeros(4096, dtype=torch.uint8)
    client.register_buffer(t.data_ptr(), 4096)
    assert client.get_into(key, t) == 1000
    client.unregister_buffer(t.data_ptr())
    # A registered buffer stays exported: a bytearray cannot resize (move) under the transport.
    ba = bytearray(4096)
    client.register_buffer(ba)
    with pytest.raises(BufferError):
        ba.extend(b"x")
    client.unregister_buffer(ba)
    ba.extend(b"x")


def test_errors_not_found_already_exists(client, key):
    with pytest.raises(granary.NotFound) as e:
        client.get(key)
    assert e.value.code == "NOT_FOUND" and e.value.reason == "NONE"
    assert str(e.value) == e.value.message and key in e.value.message
    client.put(key, b"first")
    with pytest.raises(granary.AlreadyExists):
        client.put(key, b"second")
    assert client.get(key) == b"first"


def test_wrong_types(client, key):
    with pytest.raises(TypeError):
        client.put(123, b"x")
    with pytest.raises(TypeError):
        client.put(key, "a str is not bytes")
    with pytest.raises(TypeError):
        client.put(key, 12345)
    with pytest.raises(TypeError):
        client.get_into(key, object())
    with pytest.raises(TypeError):
        client.get_into(key, bytearray(4), "4")
    with pytest.raises(TypeError):
        client.batch_get("not a list")
    with pytest.raises(TypeError):
        client.batch_get([key, 5])
    with pytest.raises(TypeError):
        client.list(5)
    with pytest.raises(TypeError):
        granary.Client(5)
    with pytest.raises(TypeError):
        client.get(key, unknown=1)


def test_too_small_destination_writes_nothing_past_it(client, key):
    data = pattern(4096, 4)
    client.put(key, data)
    guard = 4096
    arena = np.full(100 + guard, 0xAB, np.uint8)
    with pytest.raises(granary.Error) as e:
        client.get_into(key, arena[:100])
    assert e.value.code in ("FAILED_PRECONDITION", "INVALID_ARGUMENT")
    assert (arena == 0xAB).all()
    with pytest.raises(granary.Error):
        client.get_into(key, arena.ctypes.data, 100)
    assert (arena == 0xAB).all()
    res = client.batch_get_into([key], [arena.ctypes.data], [100])
    assert isinstance(res[0], granary.Error) and (arena == 0xAB).all()


def test_read_only_destination_refused(client, key):
    client.put(key, b"abcd")
    ro = np.zeros(16, np.uint8)
    ro.flags.writeable = False
    for dst in (bytes(16), memoryview(bytes(16)), ro, memoryview(bytearray(16)).toreadonly()):
        with pytest.raises(granary.InvalidArgument, match="read-only"):
            client.get_into(key, dst)
        with pytest.raises(granary.InvalidArgument, match="read-only"):
            client.batch_get_into([key], [dst])
    client.put_from(key + "/ro", ro)  # read-only is fine as a source


def test_closed_client(cluster, key):
    c = granary.Client(master=cluster.master)
    c.put(key, b"x")
    assert not c.closed
    c.close()
    c.close()
    assert c.closed
    for call in (lambda: c.get(key), lambda: c.put(key, b"y"), lambda: c.batch_get([key]),
                 lambda: c.exists(key), lambda: c.segments(), lambda: c.metrics_text()):
        with pytest.raises(granary.Closed) as e:
            call()
        assert isinstance(e.value, granary.FailedPrecondition)
        assert e.value.code == "FAILED_PRECONDITION"
    with granary.Client(master=cluster.master) as c2:
        assert c2.get(key) == b"x"
    assert c2.closed


def test_close_while_other_threads_call(cluster, key):
    c = granary.Client(master=cluster.master)
    c.put(key, pattern(1 << 16))
    outcomes, stop = [], threading.Event()

    def loop():
        buf = np.zeros(1 << 16, np.uint8)
        while not stop.is_set():
            try:
                c.get_into(key, buf)
                outcomes.append("ok")
            except granary.Closed:
                outcomes.append("closed")
                return
            except BaseException as e:  # reported below
                outcomes.append(e)
                return

    threads = [threading.Thread(target=loop) for _ in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(outcomes) < 20 and time.monotonic() < deadline:
        time.sleep(0.001)
    c.close()
    stop.set()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert "ok" in outcomes and c.closed
    assert all(o in ("ok", "closed") for o in outcomes), [o for o in outcomes if o != "ok"]


def test_config_forms(cluster, key, tmp_path, monkeypatch):
    with granary.Client({"master_server_address": cluster.master, "tenant_id": "t-dict"}) as c:
        assert (c.master, c.tenant_id) == (cluster.master, "t-dict")
        assert c.cluster_id == "granary_cluster"  # the default, used with an etcd:// master
        c.put(key, b"dict")
    path = tmp_path / "client.json"
    path.write_text(json.dumps({"master_server_addr": cluster.master, "tenant_id": "t-file"}))
    with granary.Client(path) as c:  # os.PathLike
        assert c.tenant_id == "t-file"
    with granary.Client(str(path), tenant_id="t-dict") as c:  # keyword overrides win
        assert c.get(key) == b"dict"
    monkeypatch.delenv("GRANARY_CONFIG_PATH", raising=False)
    monkeypatch.setenv("GRANARY_MASTER", cluster.master)
    monkeypatch.setenv("GRANARY_TENANT_ID", "t-env")
    monkeypatch.setenv("GRANARY_CLUSTER_ID", "c-env")
    with granary.Client() as c:
        assert (c.master, c.tenant_id, c.cluster_id) == (cluster.master, "t-env", "c-env")
    monkeypatch.setenv("GRANARY_CONFIG_PATH", str(path))
    with granary.Client() as c:
        assert c.tenant_id == "t-file"
    with pytest.raises(granary.InvalidArgument, match="replica_num"):
        granary.Client({"master_server_address": cluster.master, "replica_num": 0})
    with pytest.raises(granary.InvalidArgument, match="<dict>"):
        granary.Client({"replica_num": "many"})
    with pytest.raises(granary.NotFound):
        granary.Client(str(tmp_path / "missing.json"))


def test_unreachable_master():
    with pytest.raises(granary.Error) as e:
        granary.Client({"master_server_address": "127.0.0.1:1", "rpc_timeout_ms": 500})
    assert e.value.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED")


class FakeCudaTensor:
    """A torch-like object that says it is on a CUDA device (no GPU needed)."""

    is_cuda = True

    def __init__(self, n):
        self.backing = np.zeros(n, np.uint8)
        self.nbytes = n

    def data_ptr(self):
        return self.backing.ctypes.data


@pytest.fixture
def fake_device():
    """Marks arrays as CUDA device memory through the C++ test hook; clears them after."""
    arrays = []

    def mark(n, fill=0x5A):
        a = np.full(n, fill, np.uint8)
        granary._testing_add_fake_device_range(a.ctypes.data, a.nbytes)
        arrays.append(a)
        return a

    yield mark
    granary._testing_clear_fake_device_ranges()


def test_device_pointer_refused_nothing_touched(client, key, fake_device):
    client.put(key, pattern(4096, 5))
    dev = fake_device(8192)
    for call in (lambda: client.get_into(key, dev),
                 lambda: client.get_into(key, dev.ctypes.data, 8192),
                 lambda: client.put_from(key + "/new", dev),
                 lambda: client.register_buffer(dev)):
        with pytest.raises(granary.DevicePointer) as e:
            call()
        assert isinstance(e.value, granary.InvalidArgument)
        assert (e.value.code, e.value.reason) == ("INVALID_ARGUMENT", "DEVICE_POINTER")
        assert hex(dev.ctypes.data)[2:] in e.value.message.lower()
    assert (dev == 0x5A).all()
    assert not client.exists(key + "/new")
    host = np.zeros(4096, np.uint8)
    res = client.batch_get_into([key, key], [dev, host])
    assert isinstance(res[0], granary.DevicePointer) and res[1] == 4096
    assert (dev == 0x5A).all() and host.tobytes() == pattern(4096, 5)
    res = client.batch_put_from([key + "/d", key + "/h"], [dev, host])
    assert isinstance(res[0], granary.DevicePointer) and res[1] is None
    assert client.batch_exists([key + "/d", key + "/h"]) == [False, True]
    granary._testing_clear_fake_device_ranges()
    assert client.get_into(key, dev) == 4096  # host memory again


def test_cuda_tensor_refused_before_the_call(client, key):
    client.put(key, b"abc")
    t = FakeCudaTensor(64)
    with pytest.raises(granary.DevicePointer, match="CUDA device memory"):
        client.get_into(key, t)
    with pytest.raises(granary.DevicePointer):
        client.put_from(key + "/t", t)
    assert (t.backing == 0).all()


def test_remove_force_over_a_read_lease(client, key):
    model = "lease-" + key[-8:]
    keys = [granary.KvKey(model, "sha256", f"h{i}") for i in range(2)]
    client.batch_put(keys, [b"one", b"two"])
    assert client.lookup_prefix(model, "sha256", None, ["h0", "h1"], lease=True).present == 2
    with pytest.raises(granary.HasLease) as e:
        client.remove(keys[0])
    assert isinstance(e.value, granary.FailedPrecondition)
    assert (e.value.code, e.value.reason) == ("FAILED_PRECONDITION", "HAS_LEASE")
    res = client.batch_remove(keys)
    assert all(isinstance(r, granary.HasLease) for r in res)
    assert client.batch_exists(keys) == [True, True]
    client.remove(keys[0], force=True)
    assert client.batch_remove(keys[1:], force=True) == [None]
    assert client.batch_exists(keys) == [False, False]


def test_stat_replica_addresses(client, key):
    client.put(key, b"where")
    info = client.stat(key)
    assert info.replica_addresses == [client.segments()[0].node_address]
    assert "replica_addresses=['" in repr(info)
    assert client.list(key).objects[0].replica_addresses == []
