#!/usr/bin/python3
"""Prefix reuse through Granary for a small LLaMA-style decoder with a paged KV cache.

What an engine's KV connector (SGLang's HiCache, vLLM's store connector) does with Granary's
Mooncake-compatible class, on a model small enough for a CPU:

- The model: a LLaMA-style decoder in torch (RMSNorm, rotary positions, grouped-query
  attention, SwiGLU), random weights from --seed, float32, CPU. Nothing is downloaded.
- The KV cache is paged as SGLang and vLLM keep one: a pool of fixed-size pages of
  PAGE_TOKENS tokens and, per sequence, a page table naming its pages in order. A page holds
  its tokens' K for every layer, then their V for every layer (the "page first" layout of
  SGLang's host pool). Attention reads a sequence's K and V through its page table.
- A full page is named by a chain hash of the token prefix it ends (sha256 of the previous
  page's hash and this page's tokens), so prompts that share N leading pages share N names.
  Its K and its V are two page-sized blobs in Granary, keys "<model>/<hash>_0_k" and
  "<model>/<hash>_0_v" (the key shape of SGLang's Mooncake backend, tensor-parallel rank 0).
- A request asks Granary which leading pages exist (batch_is_exist), reads them into free
  pages of the pool (batch_get_into, straight into the registered pool), computes only the
  tokens after them, and once it has the first token's logits stores its new full pages
  (batch_put_from). The engine keeps no pages between requests itself (as if each turn landed
  on another replica, or its own cache had evicted them): every reused page comes from Granary.

The workload: conversations that share a system prompt and grow turn by turn, served turn 1 of
every conversation, then turn 2, and so on. For every turn it measures the time to first
token with Granary (lookup, read, partial prefill) and without (a full prefill), the hit rate
(pages found / full pages of the prompt), and checks that the logits computed over the pages
read from Granary equal the full prefill's (torch.allclose). It first removes the pages an
earlier run of the same model left in the tenant, so the first turn starts cold.

Usage: /usr/bin/python3 examples/llama_prefix_reuse.py [--master 127.0.0.1:50051] [--small]
           [--tenant T] [--seed N] [--plot docs/img/prefix_reuse.png]
Exit status 0 when every turn's logits matched, 1 when one did not, 2 when it could not run
(no master, no granary module, a plot it cannot write).
"""

import argparse
import dataclasses
import hashlib
import importlib.util
import math
import os
import re
import sys
import time

import torch

# The tolerance of the logits check: the fetched K/V are the bytes an earlier prefill wrote,
# but that prefill multiplied matrices of another shape, which rounds differently in the last
# bits (float32).
RTOL, ATOL = 1e-5, 1e-5
# A prompt is prefilled in chunks of at most this many tokens (each attends over the pages
# before it), as engines prefill long prompts.
CHUNK_TOKENS = 256


@dataclasses.dataclass(frozen=True)
class Config:
    """The model and its pages. The default is sized for a 2-core CPU with Debian's torch
    (reference BLAS): the full run's prefills take about a minute there."""
    layers: int = 4
    dim: int = 128
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 384
    vocab: int = 2048
    page_tokens: int = 16
    rope_theta: float = 10000.0

    @property
    def head_dim(self):
        return self.dim // self.heads

    def name(self):
        return (f"llama-demo-l{self.layers}-d{self.dim}-h{self.heads}-kv{self.kv_heads}"
                f"-f{self.ffn}-v{self.vocab}-p{self.page_tokens}")


@dataclasses.dataclass(frozen=True)
class Workload:
    system: int = 250  # tokens of the shared system prompt
    user: int = 60  # tokens of each user message
    reply: int = 100  # tokens of each assistant reply (part of the next turn's prompt)
    turns: int = 8
    conversations: int = 3


FULL = (Config(), Workload())
SMALL = (Config(layers=2, dim=64, heads=4, kv_heads=2, ffn=192, vocab=512),
         Workload(system=40, user=20, reply=24, turns=3, conversations=2))


def rms_norm(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate(x, cos, sin):
    """Rotary position embedding of x [tokens, heads, head_dim] (the rotate-half form)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


class Model:
    """A LLaMA-style decoder with random weights (deterministic in seed)."""

    def __init__(self, cfg, seed):
        self.cfg = cfg
        g = torch.Generator().manual_seed(seed)

        def w(rows, cols):
            return torch.randn(rows, cols, generator=g) / math.sqrt(cols)

        def norm():
            return 1 + 0.1 * torch.randn(cfg.dim, generator=g)

        hd, d = cfg.head_dim, cfg.dim
        self.embed = torch.randn(cfg.vocab, d, generator=g)
        self.layers = [dict(attn_norm=norm(), wq=w(cfg.heads * hd, d), wk=w(cfg.kv_heads * hd, d),
                            wv=w(cfg.kv_heads * hd, d), wo=w(d, d), mlp_norm=norm(),
                            w1=w(cfg.ffn, d), w3=w(cfg.ffn, d), w2=w(d, cfg.ffn))
                       for _ in range(cfg.layers)]
        self.norm = norm()
        self.lm_head = w(cfg.vocab, d)
        self.inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2).float() / hd)

    def forward(self, tokens, start, pool, table):
        """Prefill of `tokens` at positions start.. of a sequence whose page table is `table`
        (pages covering start + len(tokens) positions); the K/V of positions before `start`
        are in those pages already. Writes the new tokens' K/V into the pages and returns
        their final hidden states [len(tokens), dim]."""
        cfg, P, hd = self.cfg, self.cfg.page_tokens, self.cfg.head_dim
        n, total = len(tokens), start + len(tokens)
        pos = torch.arange(start, total)
        freqs = pos[:, None].float() * self.inv_freq[None, :]
        cos, sin = torch.cat((freqs, freqs), -1).cos(), torch.cat((freqs, freqs), -1).sin()
        pages = torch.tensor(table, dtype=torch.long)
        slot_page, slot_off = pages[pos // P], pos % P  # where each new token's K/V goes
        ctx = pages[:(total + P - 1) // P]  # the pages the new tokens attend over
        causal = torch.arange(total)[None, :] <= pos[:, None]  # [n, total]
        group = cfg.heads // cfg.kv_heads
        x = self.embed[torch.tensor(tokens, dtype=torch.long)]
        for i, L in enumerate(self.layers):
            h = rms_norm(x, L["attn_norm"])
            q = rotate((h @ L["wq"].T).view(n, cfg.heads, hd), cos, sin)
            k = rotate((h @ L["wk"].T).view(n, cfg.kv_heads, hd), cos, sin)
            v = (h @ L["wv"].T).view(n, cfg.kv_heads, hd)
            pool.k[slot_page, i, slot_off] = k
            pool.v[slot_page, i, slot_off] = v
            keys = pool.k[ctx, i].reshape(-1, cfg.kv_heads, hd)[:total]
            values = pool.v[ctx, i].reshape(-1, cfg.kv_heads, hd)[:total]
            keys = keys.repeat_interleave(group, dim=1)
            values = values.repeat_interleave(group, dim=1)
            scores = torch.einsum("qhd,khd->hqk", q, keys) / math.sqrt(hd)
            probs = scores.masked_fill(~causal, float("-inf")).softmax(-1)
            x = x + torch.einsum("hqk,khd->qhd", probs, values).reshape(n, cfg.dim) @ L["wo"].T
            h = rms_norm(x, L["mlp_norm"])
            x = x + (torch.nn.functional.silu(h @ L["w1"].T) * (h @ L["w3"].T)) @ L["w2"].T
        return rms_norm(x, self.norm)

    def logits(self, hidden):
        return hidden @ self.lm_head.T


class PagePool:
    """The paged KV cache: buf[page, 0 (K) or 1 (V), layer, token in page, kv head, dim]. One
    page's K (or V) for every layer is contiguous: one blob of blob_bytes."""

    def __init__(self, cfg, pages):
        self.buf = torch.zeros(pages, 2, cfg.layers, cfg.page_tokens, cfg.kv_heads,
                               cfg.head_dim)
        self.k, self.v = self.buf[:, 0], self.buf[:, 1]
        self.blob_bytes = self.buf[0, 0].numel() * self.buf.element_size()
        self.free = list(range(pages))

    def alloc(self, n):
        if n > len(self.free):
            raise MemoryError(f"the pool has {len(self.free)} free pages, {n} needed")
        got, self.free = self.free[:n], self.free[n:]
        return got

    def release(self, pages):
        self.free = sorted(self.free + list(pages))

    def addr(self, page, kv):
        return self.buf.data_ptr() + (2 * page + kv) * self.blob_bytes


def page_hashes(tokens, page_tokens):
    """The chain of hashes of a prompt's full pages."""
    out, prev = [], b""
    for p in range(len(tokens) // page_tokens):
        page = tokens[p * page_tokens:(p + 1) * page_tokens]
        prev = hashlib.sha256(prev + b"".join(t.to_bytes(4, "little") for t in page)).digest()
        out.append(prev.hex())
    return out


@dataclasses.dataclass
class Turn:
    tokens: int
    needed: int  # full pages of the prompt
    found: int  # of those, read from Granary
    ttft_s: float
    read_s: float  # lookup and read, part of ttft_s
    store_s: float  # after the first token: storing the new pages
    logits: torch.Tensor  # of the computed positions (the tokens after the found pages)
    errors: int  # store calls that answered a negative code (the pages were computed instead)


class Engine:
    """One model, one page pool, and (optionally) a MooncakeDistributedStore for prefixes."""

    def __init__(self, cfg, seed, store=None, namespace=None, pool_pages=None):
        self.cfg, self.model, self.store = cfg, Model(cfg, seed), store
        self.namespace = namespace or f"{cfg.name()}-seed{seed}"
        self.pool = PagePool(cfg, pool_pages or 256)
        if store is not None:
            rc = store.register_buffer(self.pool.buf.data_ptr(),
                                       self.pool.buf.numel() * self.pool.buf.element_size())
            if rc != 0:
                raise StoreError(f"register_buffer answered {rc}")

    def close(self):
        if self.store is not None:
            self.store.unregister_buffer(self.pool.buf.data_ptr())

    def keys(self, h):
        return [f"{self.namespace}/{h}_0_k", f"{self.namespace}/{h}_0_v"]

    def forget_earlier_runs(self):
        """Removes this model's pages from the tenant -> how many keys went."""
        n = self.store.remove_by_regex("^" + re.escape(self.namespace) + "/", True)
        return max(n, 0)

    def _read_prefix(self, hashes, table):
        """How many leading pages Granary has, read into the first pages of `table`."""
        if self.store is None or not hashes:
            return 0, 0
        keys = [k for h in hashes for k in self.keys(h)]
        exist = self.store.batch_is_exist(keys)
        errors = sum(1 for e in exist if e < 0)
        found = 0
        while found < len(hashes) and exist[2 * found] == 1 and exist[2 * found + 1] == 1:
            found += 1
        if found == 0:
            return 0, errors
        pool = self.pool
        addrs = [pool.addr(table[p], kv) for p in range(found) for kv in (0, 1)]
        got = self.store.batch_get_into(keys[:2 * found], addrs, [pool.blob_bytes] * len(addrs))
        for i, size in enumerate(got):  # a page evicted since the lookup is computed instead
            if size != pool.blob_bytes:
                errors += size < 0
                return i // 2, errors
        return found, errors

    def _store_pages(self, hashes, table, first):
        keys = [k for h in hashes[first:] for k in self.keys(h)]
        if self.store is None or not keys:
            return 0
        addrs = [self.pool.addr(table[p], kv) for p in range(first, len(hashes)) for kv in (0, 1)]
        rcs = self.store.batch_put_from(keys, addrs, [self.pool.blob_bytes] * len(keys))
        return sum(1 for rc in rcs if rc != 0)

    def serve(self, tokens, use_store=True):
        """A prefill up to the first token, reusing what Granary holds when use_store."""
        P = self.cfg.page_tokens
        hashes = page_hashes(tokens, P)
        table = self.pool.alloc((len(tokens) + P - 1) // P)
        try:
            t0 = time.perf_counter()
            found, errors = self._read_prefix(hashes, table) if use_store else (0, 0)
            t1 = time.perf_counter()
            start = found * P
            if start == len(tokens):  # every page was found: the last token is computed again
                start -= 1
            with torch.inference_mode():  # chunked prefill, as engines run long prompts
                hidden = torch.cat([self.model.forward(tokens[a:a + CHUNK_TOKENS], a, self.pool,
                                                       table)
                                    for a in range(start, len(tokens), CHUNK_TOKENS)])
                self.model.logits(hidden[-1])  # the first token's logits: what TTFT waits for
            t2 = time.perf_counter()
            errors += self._store_pages(hashes, table, found) if use_store else 0
            t3 = time.perf_counter()
            with torch.inference_mode():
                logits = self.model.logits(hidden)  # every computed position, for the check
        finally:
            self.pool.release(table)
        return Turn(len(tokens), len(hashes), found, t2 - t0, t1 - t0, t3 - t2, logits, errors)


class StoreError(Exception):
    pass


def open_store(master, tenant):
    """A MooncakeDistributedStore on the master, using the cluster's nodes (no embedded
    segment), as an engine sets one up."""
    from granary.mooncake import MooncakeDistributedStore
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master,
                     tenant_id=tenant)
    if rc != 0:
        raise StoreError(f"setup on master {master} (tenant {tenant}) answered {rc}")
    return store


def conversations(w, vocab, seed):
    """The prompts of every turn of every conversation: [conversation][turn] -> tokens."""
    g = torch.Generator().manual_seed(seed + 1)

    def rand(n):
        return torch.randint(0, vocab, (n,), generator=g).tolist()

    system = rand(w.system)
    out = []
    for _ in range(w.conversations):
        prompt, turns = list(system), []
        for t in range(w.turns):
            prompt = prompt + (rand(w.reply) if t else []) + rand(w.user)
            turns.append(prompt)
        out.append(turns)
    return out


def run(engine, convs):
    """Serves turn 1 of every conversation, then turn 2, ...; with Granary, then without.
    -> rows (conversation, turn, with Granary, without, max |logit difference|, match)."""
    rows = []
    engine.serve(convs[0][0][:engine.cfg.page_tokens], use_store=False)  # warm-up
    for t in range(len(convs[0])):
        for c, turns in enumerate(convs):
            cached = engine.serve(turns[t])
            full = engine.serve(turns[t], use_store=False)
            ref = full.logits[-len(cached.logits):]  # the positions the cached run computed
            diff = (cached.logits - ref).abs().max().item()
            rows.append((c + 1, t + 1, cached, full, diff,
                         torch.allclose(cached.logits, ref, rtol=RTOL, atol=ATOL)))
    return rows


def print_table(rows):
    print(f"{'conv':>4} {'turn':>4} {'prompt':>6} {'pages':>9} {'hit':>5} "
          f"{'TTFT without':>12} {'TTFT with':>10} {'(read)':>8} {'speedup':>7} "
          f"{'max |dlogit|':>12}")
    for c, t, cached, full, diff, ok in rows:
        print(f"{c:>4} {t:>4} {cached.tokens:>6} {cached.found:>4}/{cached.needed:<4} "
              f"{cached.found / max(cached.needed, 1):>5.0%} {full.ttft_s * 1e3:>9.1f} ms "
              f"{cached.ttft_s * 1e3:>7.1f} ms {cached.read_s * 1e3:>5.1f} ms "
              f"{full.ttft_s / cached.ttft_s:>6.1f}x {diff:>12.2e}{'' if ok else '  MISMATCH'}")
    found = sum(r[2].found for r in rows)
    needed = sum(r[2].needed for r in rows)
    later = [r for r in rows if r[1] > 1]
    print(f"hit rate {found}/{needed} pages ({found / max(needed, 1):.0%})", end="")
    if later:
        with_ms = sum(r[2].ttft_s for r in later) / len(later) * 1e3
        without_ms = sum(r[3].ttft_s for r in later) / len(later) * 1e3
        print(f"; turns 2+: mean TTFT {without_ms:.1f} ms without Granary, {with_ms:.1f} ms "
              f"with ({without_ms / with_ms:.1f}x)", end="")
    store_ms = sum(r[2].store_s for r in rows) / len(rows) * 1e3
    print(f"; storing a turn's new pages (after its first token): {store_ms:.1f} ms mean")


def plot(rows, path, cfg, w, machine):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, idx, marker in (("without Granary (full prefill)", 3, "o"),
                               ("with Granary (prefix pages read)", 2, "s")):
        by_turn = {}
        for r in rows:
            by_turn.setdefault(r[1], []).append((r[idx].tokens, r[idx].ttft_s * 1e3))
        pts = [p for ps in by_turn.values() for p in ps]
        line = ax1.plot([sum(x for x, _ in ps) / len(ps) for ps in by_turn.values()],
                        [sum(y for _, y in ps) / len(ps) for ps in by_turn.values()],
                        "-", alpha=0.6)[0]
        ax1.scatter([x for x, _ in pts], [y for _, y in pts], marker=marker,
                    color=line.get_color(), label=label)
    ax1.set_xlabel("prompt length (tokens)")
    ax1.set_ylabel("time to first token (ms)")
    ax1.set_title("TTFT against prompt length (lines: mean per turn)")
    ax1.set_ylim(bottom=0)
    ax1.grid(alpha=0.3)
    ax1.legend()
    for c in sorted({r[0] for r in rows}):
        rs = [r for r in rows if r[0] == c]
        ax2.plot([r[2].tokens for r in rs], [100 * r[2].found / max(r[2].needed, 1) for r in rs],
                 "o-", label=f"conversation {c}")
    ax2.set_xlabel("prompt length (tokens)")
    ax2.set_ylabel("hit rate (% of the prompt's pages read)")
    ax2.set_title("Pages found in Granary / pages needed")
    ax2.set_ylim(-5, 105)
    ax2.grid(alpha=0.3)
    ax2.legend()
    fig.suptitle(f"{cfg.layers}-layer LLaMA-style decoder (d={cfg.dim}, {cfg.page_tokens}-token "
                 f"pages), {w.conversations} conversations x {w.turns} turns sharing a "
                 f"{w.system}-token system prompt; CPU torch, {machine}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--master", default="127.0.0.1:50051", help="the Granary master (host:port)")
    ap.add_argument("--tenant", default="example-llama")
    ap.add_argument("--seed", type=int, default=7, help="the model's weights and the prompts")
    ap.add_argument("--small", action="store_true", help="a tiny model and 2x3 turns (seconds)")
    ap.add_argument("--plot", metavar="PNG", help="also plot TTFT and hit rate into this file")
    ap.add_argument("--machine", default=f"{os.cpu_count()}-core machine",
                    help="how the plot names the machine")
    args = ap.parse_args()
    cfg, w = SMALL if args.small else FULL
    if args.plot and importlib.util.find_spec("matplotlib") is None:  # before the run
        print("--plot needs matplotlib (Debian: apt-get install python3-matplotlib)",
              file=sys.stderr)
        return 2
    try:
        store = open_store(args.master, args.tenant)
    except ImportError as e:
        print(f"the granary module is not importable ({e}): build it (scripts/build.sh) and "
              "run with PYTHONPATH=build/python, or install it (scripts/install_python.sh)",
              file=sys.stderr)
        return 2
    except StoreError as e:
        print(f"cannot use Granary: {e} (is a master running there, with a node?)",
              file=sys.stderr)
        return 2
    try:
        engine = Engine(cfg, args.seed, store)
        print(f"model {engine.namespace}; K+V {2 * engine.pool.blob_bytes} bytes per page; "
              f"removed {engine.forget_earlier_runs()} keys of an earlier run")
        rows = run(engine, conversations(w, cfg.vocab, args.seed))
        engine.close()
    except StoreError as e:
        print(f"cannot use Granary: {e}", file=sys.stderr)
        return 2
    finally:
        store.close()
    print_table(rows)
    errors = sum(r[2].errors for r in rows)
    if errors:
        print(f"{errors} store calls failed (their pages were computed instead; the "
              "granary.mooncake log has the causes)")
    if args.plot:
        try:
            plot(rows, args.plot, cfg, w, args.machine)
        except (OSError, ValueError) as e:
            print(f"cannot write the plot: {e}", file=sys.stderr)
            return 2
        print(f"plot: {args.plot}")
    bad = [r for r in rows if not r[5]]
    if bad:
        print(f"{len(bad)} turn(s): the logits over the pages read from Granary differ from the "
              f"full prefill's (rtol {RTOL}, atol {ATOL})", file=sys.stderr)
        return 1
    print(f"logits: every turn equals the full prefill's (torch.allclose, rtol {RTOL}, "
          f"atol {ATOL})")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
