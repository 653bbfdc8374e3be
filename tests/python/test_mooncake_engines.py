"""Each engine's call sequence (as its Mooncake connector makes it), replayed against Granary's
class: vLLM's MooncakeStoreConnector, SGLang's HiCache `mooncake` backend (with its TypeError
retry loop), LMCache's `mooncakestore` connector and MooncakeBackend. Host memory only (CPU
tensors); device pointers are tested in test_mooncake_store.py."""

import asyncio
import ctypes
import struct
import time
import uuid

import torch

import granary
from granary.mooncake import (MooncakeDistributedStore, MooncakeHostMemAllocator,
                              ReplicateConfig)
from granary_cluster import http_get


# `cluster` (conftest.py): one master and node per module and transport (default, UCX_TLS=tcp).
CLUSTER_ARGS = {"nodes": 1, "segment_size": "128MB"}


def fill(t, seed):
    g = torch.Generator().manual_seed(seed)
    flat = t.view(-1).view(torch.uint8)
    flat.copy_(torch.randint(0, 256, (flat.numel(),), dtype=torch.uint8, generator=g))


def key_visible_to(cluster, tenant, key):
    with granary.Client(tenant_id=tenant, master=cluster.master) as c:
        return c.exists(key)


# ---------------------------------------------------------------- vLLM

class VllmLayout:
    """Per layer a [2, num_blocks, block_len] KV cache: K and V are separate regions, so each
    chunk's scatter list has one entry per (layer, K/V) region."""

    def __init__(self, layers=2, num_blocks=16, block_len=2048):
        self.block_len = block_len
        self.caches = [torch.zeros(2, num_blocks, block_len, dtype=torch.uint8)
                       for _ in range(layers)]
        self.regions = [c[i].data_ptr() for c in self.caches for i in range(2)]

    def chunk(self, first_block, n_blocks):
        addrs = [base + first_block * self.block_len for base in self.regions]
        return addrs, [self.block_len * n_blocks] * len(self.regions)


def test_vllm_save_and_load(cluster):
    tenant, model = "vllm-tenant", "Qwen3-8B"
    store = MooncakeDistributedStore()
    # connector.py: 7 positional + tenant_id= when not "default"; embedded mode (segment > 0).
    assert store.setup("127.0.0.1", "", 32 << 20, 16 << 20, "rdma", "", cluster.master,
                       tenant_id=tenant) == 0
    src = VllmLayout()
    for i, c in enumerate(src.caches):
        fill(c, i)
        assert store.register_buffer(c.data_ptr(), c.numel() * c.element_size()) == 0
    hashes = [uuid.uuid4().hex for _ in range(4)]
    keys = [f"{model}@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@{h}" for h in hashes]
    chunks = [src.chunk(4 * i, 4) for i in range(4)]

    def save(keys, chunks):
        exists = store.batch_is_exist(keys)
        todo = [i for i, e in enumerate(exists) if e != 1]
        if not todo:
            return []
        cfg = ReplicateConfig()
        cfg.preferred_segment = ""
        cfg.group_ids = [f"vllm-mooncake-store:{model}@{hashes[i]}" for i in todo]
        return store.batch_put_from_multi_buffers([keys[i] for i in todo],
                                                  [chunks[i][0] for i in todo],
                                                  [chunks[i][1] for i in todo], cfg)

    assert save(keys[:2], chunks[:2]) == [0, 0]
    assert save(keys, chunks) == [0, 0]  # only the two missing ones are put
    assert save(keys, chunks) == []
    assert key_visible_to(cluster, tenant, keys[0])
    assert not key_visible_to(cluster, "default", keys[0])

    # Lookup (rank 0): a hit needs == 1 for every key.
    assert store.batch_is_exist(keys) == [1] * 4

    # Load into another KV cache, no fourth argument; results are the object sizes.
    dst = VllmLayout()
    for c in dst.caches:
        assert store.register_buffer(c.data_ptr(), c.numel() * c.element_size()) == 0
    loads = [dst.chunk(4 * i, 4) for i in range(4)]
    got = store.batch_get_into_multi_buffers(keys, [a for a, _ in loads], [s for _, s in loads])
    assert got == [sum(s) for _, s in loads]
    for a, b in zip(src.caches, dst.caches):
        assert torch.equal(a, b)
    assert store.batch_get_into_multi_buffers(["absent-" + keys[0]], [loads[0][0]],
                                              [loads[0][1]]) == [-704]  # < 0: load error

    assert store.remove_all(force=True) == 4  # reset
    assert store.close() == 0  # shutdown; __del__ runs close() again
    del store


# ---------------------------------------------------------------- SGLang

def sglang_setup(store, cluster, setup_kwargs, tenant_id):
    """SGLang's setup call and its TypeError retry loop (mooncake_store.py): each keyword that
    the message names is dropped and the call retried; a rejected tenant_id is fatal."""
    setup_kwargs = dict(setup_kwargs)
    if tenant_id != "default":
        setup_kwargs["tenant_id"] = tenant_id
    retries = 0
    while True:
        try:
            ret_code = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * 1024 * 1024, "tcp", "",
                                   cluster.master, None, **setup_kwargs)
            break
        except TypeError as e:
            unsupported = [key for key in list(setup_kwargs) if key in str(e)]
            if not unsupported:
                raise
            if "tenant_id" in unsupported:
                raise RuntimeError("does not support tenant_id") from e
            for key in unsupported:
                setup_kwargs.pop(key, None)
            retries += 1
    if ret_code:
        raise RuntimeError(f"Failed to setup Mooncake store, error code: {ret_code}")
    return setup_kwargs, retries


def sglang_warmup(store):
    key = "sglang_mooncake_store_warmup_key" + uuid.uuid4().hex
    value = bytes(4 * 1024)
    for _ in range(10):
        if store.put(key, value) == 0:
            break
        time.sleep(1)
    else:
        raise RuntimeError("warm-up put failed")
    assert store.is_exist(key) == 1
    assert store.get(key) == value


def test_sglang_hicache_sequence(cluster):
    tenant = "sglang-tenant"
    store = MooncakeDistributedStore()
    kwargs = {"enable_ssd_offload": True, "ssd_offload_path": "/nonexistent",
              "a_keyword_from_a_newer_sglang": 1}
    kept, retries = sglang_setup(store, cluster, kwargs, tenant)
    assert retries == 1  # only the unknown keyword was dropped
    assert set(kept) == {"enable_ssd_offload", "ssd_offload_path", "tenant_id"}
    sglang_warmup(store)

    # Host KV pool from MooncakeHostMemAllocator, wrapped as SGLang does, then registered.
    pages, page_bytes = 8, 4096
    size = 2 * pages * page_bytes
    ptr = MooncakeHostMemAllocator().alloc(size)
    pool = torch.frombuffer((ctypes.c_byte * size).from_address(ptr), dtype=torch.uint8,
                            count=size).view(2, pages, page_bytes)
    fill(pool, 7)
    expected = pool.clone()
    assert store.register_buffer(ptr, size) == 0

    # MHA keys: <prefix>_<page hash>_<tp_rank>_k / _v, one page per key.
    prefix = "tag_Qwen-Qwen3-8B"
    page_hashes = [uuid.uuid4().hex for _ in range(pages)]
    keys, ptrs, sizes = [], [], []
    for p, h in enumerate(page_hashes):
        for kv in (0, 1):
            keys.append(f"{prefix}_{h}_0_{'kv'[kv]}")
            ptrs.append(pool[kv, p].data_ptr())
            sizes.append(page_bytes)

    def batch_set(idx):
        exists = store.batch_is_exist([keys[i] for i in idx])
        missing = [i for i, e in zip(idx, exists) if e != 1]
        res = store.batch_put_from([keys[i] for i in missing], [ptrs[i] for i in missing],
                                   [sizes[i] for i in missing])
        return all(r == 0 for r in res), len(missing)

    assert batch_set(list(range(0, len(keys), 2))) == (True, pages)  # the K halves
    assert batch_set(list(range(len(keys)))) == (True, pages)  # then only the V halves
    assert sum(1 for e in store.batch_is_exist(keys) if e == 1) == len(keys)

    pool.zero_()
    got = store.batch_get_into(keys, ptrs, sizes)
    assert all(r > 0 for r in got) and got == sizes  # success is > 0
    assert torch.equal(pool, expected)

    # MLA layer_first: <key>__k spans one buffer per layer -> batch_put_from_multi_buffers.
    layers = [torch.empty(pages, 512, dtype=torch.uint8) for _ in range(3)]
    for i, t in enumerate(layers):
        fill(t, 100 + i)
        assert store.register_buffer(t.data_ptr(), t.numel()) == 0
    mla_keys = [f"{prefix}_{h}__k" for h in page_hashes[:3]]
    lists = [[t[p].data_ptr() for t in layers] for p in range(3)]
    cfg = ReplicateConfig(group_ids=[f"sglang-hicache:{h}" for h in page_hashes[:3]])
    assert store.batch_put_from_multi_buffers(mla_keys, lists, [[512] * 3] * 3, cfg) == [0] * 3
    want = [t.clone() for t in layers]
    for t in layers:
        t.zero_()
    assert store.batch_get_into_multi_buffers(mla_keys, lists, [[512] * 3] * 3) == [1536] * 3
    for a, b in zip(layers, want):
        assert torch.equal(a[:3], b[:3])

    assert key_visible_to(cluster, tenant, keys[0])
    assert store.remove_all() >= len(keys) + 3  # clear(); close() does nothing in SGLang
    del store  # the destructor closes


def test_sglang_embedded_store_setup_has_seven_args(cluster):
    store = MooncakeDistributedStore()
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", cluster.master) == 0
    key = f"emb_{uuid.uuid4().hex}"
    assert store.put(key, b"embedding" * 100) == 0
    assert store.get(key) == b"embedding" * 100
    store.close()


def test_sglang_check_server_polls_get_all_segments(cluster):
    body = http_get(cluster.http_port, "/get_all_segments")
    assert body.strip() != ""


# ---------------------------------------------------------------- LMCache

HEADER = struct.Struct("<7i")  # 28 bytes of chunk metadata (shape, dtype, format)
assert HEADER.size == 28


def lmcache_key(chunk_hash, model="Qwen/Qwen3-8B", world=1, worker=0, dtype="bfloat16"):
    return f"{model}@{world}@{worker}@{chunk_hash:x}@{dtype}"


def test_lmcache_connector_sequence(cluster):
    store = MooncakeDistributedStore()
    # Seven positional arguments, the result unchecked; the tenant comes from the environment.
    store.setup("127.0.0.1", "P2PHANDSHAKE", 32 << 20, 16 << 20, "tcp", "", cluster.master)
    cfg = ReplicateConfig()
    cfg.replica_num = 1
    cfg.preferred_segment = store.get_hostname()  # prefer_local_alloc
    assert cfg.preferred_segment.startswith("127.0.0.1")  # the embedded node's host:port

    hidden, chunk_tokens = 256, 16
    max_bytes = chunk_tokens * hidden * 2
    arena = torch.zeros(8 * max_bytes, dtype=torch.uint8)
    assert store.register_buffer(arena.data_ptr(), arena.numel()) == 0

    # Put: put_from under wait_for(to_thread); the last chunk is shorter than max_bytes.
    chunks = [torch.randn(chunk_tokens, hidden).to(torch.bfloat16) for _ in range(3)]
    chunks.append(torch.randn(5, hidden).to(torch.bfloat16))
    keys = [lmcache_key(0x1000 + i + uuid.uuid4().int % 10 ** 9) for i in range(4)]

    async def put_all():
        for i, (key, t) in enumerate(zip(keys, chunks)):
            region = arena[i * max_bytes:(i + 1) * max_bytes]
            region[:t.numel() * 2].copy_(t.view(-1).view(torch.uint8))
            rc = await asyncio.wait_for(
                asyncio.to_thread(store.put_from, key, region.data_ptr(), t.numel() * 2, cfg),
                timeout=30)
            assert rc == 0

    asyncio.run(put_all())
    assert all(bool(store.is_exist(x)) for x in keys)  # the raw value as a truth value
    assert not store.is_exist("absent-" + keys[0])

    # Get: batch_get_into into max-size buffers, reshaped by the returned count.
    arena.zero_()
    ptrs = [arena[i * max_bytes:].data_ptr() for i in range(4)]
    got = store.batch_get_into(keys, ptrs, [max_bytes] * 4)
    assert got == [t.numel() * 2 for t in chunks]  # the exact object size
    for i, (n, t) in enumerate(zip(got, chunks)):
        back = arena[i * max_bytes:i * max_bytes + n].view(torch.bfloat16).view(-1, hidden)
        assert torch.equal(back, t)

    # save_chunk_meta: put_parts(key, 28-byte header, kv bytes) and batch_get_buffer.
    meta_keys = [k + "@meta" for k in keys]
    for key, t in zip(meta_keys, chunks):
        header = HEADER.pack(t.shape[0], t.shape[1], 1, 1, 2, 15, 0)
        assert store.put_parts(key, header, t.view(-1).view(torch.uint8).numpy()) == 0
    bufs = store.batch_get_buffer(meta_keys + ["absent-meta"])
    assert len(bufs) == 5 and bufs[4] is None
    for buf, t in zip(bufs, chunks):
        rows, cols, *_ = HEADER.unpack_from(buf, 0)
        body = torch.frombuffer(buf, dtype=torch.uint8, offset=HEADER.size)
        assert (rows, cols) == tuple(t.shape)
        assert torch.equal(body.view(torch.bfloat16).view(rows, cols), t)

    assert store.unregister_buffer(arena.data_ptr()) == 0
    assert store.close() == 0


def test_lmcache_backend_sequence(cluster):
    store = MooncakeDistributedStore()
    store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 128 << 20, "tcp", "", cluster.master)
    arena = torch.zeros(1 << 20, dtype=torch.uint8)
    assert store.register_buffer(arena.data_ptr(), arena.numel()) == 0
    fill(arena, 3)
    want = arena.clone()
    keys = [lmcache_key(uuid.uuid4().int % 10 ** 12) for _ in range(4)]
    ptrs = [arena[i * 65536:].data_ptr() for i in range(4)]
    assert [e == 1 for e in store.batch_is_exist(keys)] == [False] * 4  # batched_contains
    assert store.batch_put_from(keys, ptrs, [65536] * 4) == [0] * 4
    assert [e == 1 for e in store.batch_is_exist(keys)] == [True] * 4
    arena.zero_()
    assert store.get_into(keys[0], ptrs[0], 65536) == 65536
    assert store.batch_get_into(keys[1:], ptrs[1:], [65536] * 3) == [65536] * 3
    assert torch.equal(arena[:4 * 65536], want[:4 * 65536])
    assert store.get_into("absent-" + keys[0], ptrs[0], 65536) <= 0  # a miss
    assert store.unregister_buffer(arena.data_ptr()) == 0
    store.close()
