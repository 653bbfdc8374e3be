#!/usr/bin/python3
"""A small inference "engine" that reuses its KV cache through Granary.

It does what a real engine's connector does, with a stand-in for the model:

1. A prompt is cut into blocks of BLOCK_TOKENS tokens. Each block is named by the hash of the
   whole prefix it ends (a chain: hash(previous hash, this block's tokens)), so two prompts
   that share their first N blocks share those N keys (granary.KvKey(model, "sha256", hash)).
2. "Prefill" computes, for every layer, a K and a V tensor per block (here a deterministic
   function of the block's prefix hash instead of attention) into a paged KV buffer: a torch
   tensor [pages, layers, 2 (K/V), BLOCK_TOKENS, heads, head_dim]. One page holds one block.
3. The pages are stored in Granary straight from the registered tensor (batch_put_from of
   each page's address), under their KvKeys.
4. A second request whose prompt shares a prefix with the first asks Granary how many leading
   blocks exist (lookup_prefix, one round trip for the chain), loads those blocks into free
   pages of another paged buffer (batch_get_into straight into the tensor), and computes only
   the rest. The loaded pages are checked byte for byte against the first request's.

Usage: /usr/bin/python3 examples/prefix_cache_engine.py --master 127.0.0.1:50051 [--tenant t]
Exit status 0 when every loaded block matched; it prints what it reused.
"""

import argparse
import hashlib
import sys

import torch

import granary

MODEL = "example-llm-4l"
LAYERS, HEADS, HEAD_DIM, BLOCK_TOKENS = 4, 8, 64, 16
DTYPE = torch.float16


def prefix_hashes(tokens):
    """The chain of block hashes of a prompt (full blocks only)."""
    hashes, prev = [], b""
    for b in range(len(tokens) // BLOCK_TOKENS):
        block = tokens[b * BLOCK_TOKENS:(b + 1) * BLOCK_TOKENS]
        h = hashlib.sha256(prev + b"".join(t.to_bytes(4, "little") for t in block)).hexdigest()
        hashes.append(h)
        prev = bytes.fromhex(h)
    return hashes


class PagedKV:
    """A paged KV buffer: page p holds one block's K and V for every layer, contiguous."""

    def __init__(self, pages):
        self.t = torch.zeros(pages, LAYERS, 2, BLOCK_TOKENS, HEADS, HEAD_DIM, dtype=DTYPE)
        self.free = list(range(pages))

    def page_bytes(self):
        return self.t[0].numel() * self.t.element_size()

    def addr(self, page):
        return self.t.data_ptr() + page * self.page_bytes()

    def take(self, n):
        got, self.free = self.free[:n], self.free[n:]
        return got


def prefill_block(kv, page, block_hash):
    """Stands in for attention: K/V of every layer, determined by the block's prefix hash."""
    g = torch.Generator().manual_seed(int(block_hash[:15], 16))
    kv.t[page] = torch.randn(kv.t[page].shape, generator=g).to(DTYPE)


def serve(client, kv, tokens, label):
    """One request: reuse what Granary holds, prefill the rest, store the new blocks."""
    hashes = prefix_hashes(tokens)
    found = client.lookup_prefix(MODEL, "sha256", None, hashes)
    hit = found.present
    pages = kv.take(len(hashes))
    if hit:
        keys = [b.key for b in found.blocks]
        got = client.batch_get_into(keys, [kv.addr(p) for p in pages[:hit]],
                                    [kv.page_bytes()] * hit)
        bad = [(k, r) for k, r in zip(keys, got) if not isinstance(r, int)]
        if bad:
            raise SystemExit(f"{label}: loading {len(bad)} block(s) failed: {bad[0][1]}")
    for i in range(hit, len(hashes)):
        prefill_block(kv, pages[i], hashes[i])
    new = range(hit, len(hashes))
    keys = [granary.KvKey(MODEL, "sha256", hashes[i]).encode() for i in new]
    res = client.batch_put_from(keys, [kv.addr(pages[i]) for i in new],
                                [kv.page_bytes()] * len(keys))
    failed = [r for r in res if r is not None and not isinstance(r, granary.AlreadyExists)]
    if failed:
        raise SystemExit(f"{label}: storing {len(failed)} block(s) failed: {failed[0]}")
    print(f"{label}: {len(hashes)} blocks, {hit} loaded from Granary, "
          f"{len(hashes) - hit} prefilled and stored ({kv.page_bytes()} bytes per block)")
    return pages, hit


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--master", default="127.0.0.1:50051")
    ap.add_argument("--tenant", default="example-engine")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = torch.Generator().manual_seed(args.seed)
    system_prompt = torch.randint(0, 32000, (5 * BLOCK_TOKENS,), generator=rng).tolist()
    first = system_prompt + torch.randint(0, 32000, (3 * BLOCK_TOKENS,), generator=rng).tolist()
    second = system_prompt + torch.randint(0, 32000, (2 * BLOCK_TOKENS,), generator=rng).tolist()

    with granary.Client({"master_server_address": args.master, "tenant_id": args.tenant}) as c:
        kv_a, kv_b = PagedKV(16), PagedKV(16)
        kv_b.take(3)  # the second request lands on other page numbers
        c.register_buffer(kv_a.t)
        c.register_buffer(kv_b.t)
        try:
            pages_a, _ = serve(c, kv_a, first, "request 1")
            pages_b, hit = serve(c, kv_b, second, "request 2")
            if hit < 5:
                raise SystemExit(f"request 2 reused {hit} blocks; the shared prefix has 5")
            # Every loaded block is what prefill computes for its hash, and the shared prefix
            # is request 1's bytes.
            scratch = PagedKV(1)
            hashes = prefix_hashes(second)
            for i in range(hit):
                prefill_block(scratch, 0, hashes[i])
                loaded = kv_b.t[pages_b[i]].numpy().tobytes()
                if loaded != scratch.t[0].numpy().tobytes() or (
                        i < 5 and loaded != kv_a.t[pages_a[i]].numpy().tobytes()):
                    raise SystemExit(f"block {i}: the loaded bytes differ from the stored ones")
            print(f"request 2: the {hit} loaded blocks match byte for byte (the shared 5 are request 1's)")
        finally:
            c.unregister_buffer(kv_a.t)
            c.unregister_buffer(kv_b.t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
