"""examples/llama_prefix_reuse.py against a real master and node: a LLaMA-style decoder with a
paged KV cache reads its prompts' prefix pages from Granary (granary.mooncake), and its
logits over those pages equal a full prefill's."""

import importlib.util
import os
import re
import subprocess
import sys

import torch

from granary_cluster import Cluster, free_port

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "llama_prefix_reuse.py")
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/(\d+)\s+(\d+)%\s")


def load_example():
    spec = importlib.util.spec_from_file_location("llama_prefix_reuse", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_example(*args):
    return subprocess.run([sys.executable, EXAMPLE, "--small", *args], capture_output=True,
                          text=True, timeout=120)


def test_small_run_matches_and_hits_from_the_second_turn():
    with Cluster(segment_size="64MB") as c:
        p = run_example("--master", c.master, "--tenant", "llama")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "Traceback" not in out, out
    assert "logits: every turn equals the full prefill's" in p.stdout, out
    cfg, w = load_example().SMALL
    rows = [tuple(map(int, m.groups())) for m in map(ROW.match, p.stdout.splitlines()) if m]
    assert len(rows) == w.conversations * w.turns, out
    for conv, turn, tokens, found, needed, hit in rows:
        assert needed == tokens // cfg.page_tokens, out
        if turn == 1 and conv == 1:
            assert found == 0, out  # a cold start: the earlier run's pages were removed
        else:
            assert found > 0 and hit > 0, out  # the system prompt, then the turns before
        if turn > 1:  # every full page of the previous turn's prompt
            assert found == (tokens - w.user - w.reply) // cfg.page_tokens, out


def test_logits_over_fetched_pages_equal_a_full_prefill():
    ex = load_example()
    cfg, w = ex.SMALL
    convs = ex.conversations(w, cfg.vocab, seed=3)
    with Cluster(segment_size="64MB") as c:
        store = ex.open_store(c.master, "llama-logits")
        try:
            engine = ex.Engine(cfg, 3, store)
            first = engine.serve(convs[0][0])
            assert first.found == 0 and first.errors == 0
            second = engine.serve(convs[0][1])
            assert second.errors == 0
            assert second.found == first.needed > 0
            full = engine.serve(convs[0][1], use_store=False)
            assert full.found == 0
            computed = len(convs[0][1]) - second.found * cfg.page_tokens
            assert second.logits.shape == (computed, cfg.vocab)
            assert torch.allclose(second.logits, full.logits[-computed:], rtol=ex.RTOL,
                                  atol=ex.ATOL)
            engine.close()

            # The check can fail: a model with other weights that reads the same names gets
            # the first model's K/V, and its logits then differ from its own full prefill.
            other = ex.Engine(cfg, 4, store, namespace=engine.namespace)
            wrong = other.serve(convs[0][1])
            assert wrong.found > 0
            own = other.serve(convs[0][1], use_store=False)
            assert not torch.allclose(wrong.logits, own.logits[-len(wrong.logits):],
                                      rtol=ex.RTOL, atol=ex.ATOL)
            other.close()
        finally:
            store.close()


def test_no_master_is_a_message_not_a_traceback():
    p = run_example("--master", f"127.0.0.1:{free_port()}")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "cannot use Granary" in p.stderr, p.stderr
    assert "Traceback" not in p.stdout + p.stderr
