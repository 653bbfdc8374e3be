"""The Mooncake-compatible class with engine device buffers (issue 15 point 6): register_buffer,
put_from/get_into and the multi-buffer calls (vLLM's data path) given device pointers, which take
the client's GPU paths. Without a GPU the child process runs on the fake device backend
(GRANARY_DEVICE_BACKEND=fake: device memory the CPU cannot touch, so any CPU copy of it crashes
the child and fails the test); every byte is compared through the backend. Runs against the
module's cluster under both transports (shared memory: the host-segment path; tcp: staging)."""

import os
import subprocess
import sys
import textwrap

CLUSTER_ARGS = {"nodes": 1, "segment_size": "128MB"}

CHILD = textwrap.dedent(r'''
    import sys, uuid
    import numpy as np
    import granary
    from granary.mooncake import MooncakeDistributedStore
    master = sys.argv[1]
    assert granary._device_backend() == "fake", granary._device_backend()
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master) == 0
    dev = lambda n: granary._testing_device_alloc(n)
    def to_dev(d, a):
        granary._testing_device_copy(d, a.ctypes.data, a.nbytes)
    def from_dev(d, n):
        a = np.zeros(n, np.uint8)
        granary._testing_device_copy(a.ctypes.data, d, n)
        return a
    rng = np.random.default_rng(5)
    tag = uuid.uuid4().hex[:8]
    n = 300_000
    src = rng.integers(0, 256, n, dtype=np.uint8)
    d = dev(2 * n)
    to_dev(d, src)
    # register_buffer records device memory (never handed to UCX); twice is fine (Mooncake: 0).
    assert s.register_buffer(d, 2 * n) == 0
    assert s.register_buffer(d, 2 * n) == 0
    assert s.put_from(f"one-{tag}", d, n) == 0
    assert bytes(s.get(f"one-{tag}")) == src.tobytes(), "a device write reads back wrong"
    assert s.get_into(f"one-{tag}", d + n, n) == n
    assert (from_dev(d + n, n) == src).all(), "a device read differs"
    # batch forms with device pointers
    assert s.batch_put_from([f"b0-{tag}", f"b1-{tag}"], [d, d + 1000], [1000, 5000]) == [0, 0]
    out = dev(6000)
    assert s.batch_get_into([f"b0-{tag}", f"b1-{tag}"], [out, out + 1000], [1000, 5000]) == [1000, 5000]
    assert (from_dev(out, 6000) == src[:6000]).all()
    # multi-buffer: vLLM's per-layer K/V pieces, device regions gathered and scattered
    parts = [(0, 4096), (50_000, 8192), (200_000, 3)]
    keys = [f"m0-{tag}", f"m1-{tag}"]
    ptrs = [[d + o for o, _ in parts], [d + 7]]
    sizes = [[z for _, z in parts], [100]]
    assert s.batch_put_from_multi_buffers(keys, ptrs, sizes) == [0, 0]
    want = np.concatenate([src[o:o + z] for o, z in parts])
    assert bytes(s.get(keys[0])) == want.tobytes(), "the gathered value differs"
    back = dev(sum(z for _, z in parts))
    bptrs = [[back, back + 4096, back + 4096 + 8192], [out]]
    assert s.batch_get_into_multi_buffers(keys, bptrs, sizes) == [want.nbytes, 100]
    assert (from_dev(back, want.nbytes) == want).all(), "the scattered value differs"
    assert (from_dev(out, 100) == src[7:107]).all()
    # mixed host and device regions in one list
    host = np.zeros(10, np.uint8)
    assert s.batch_get_into_multi_buffers([keys[1]], [[host.ctypes.data, out]], [[10, 90]]) == [100]
    assert (host == src[7:17]).all() and (from_dev(out, 90) == src[17:107]).all()
    assert s.unregister_buffer(d) == 0
    paths = [l for l in s._client.metrics_text().splitlines()
             if l.startswith("granary_client_gpu_transfers_total{")]
    print("\n".join(paths))
    assert any(not l.endswith(" 0") for l in paths), paths
    s.close()
    print("child ok")
''')


def run_child(script, master):
    """Runs `script` in a child process on the fake device backend; it must exit 0."""
    env = dict(os.environ, GRANARY_DEVICE_BACKEND="fake", PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, "-c", script, master], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"child failed ({r.returncode}):\n{r.stdout}\n{r.stderr[-4000:]}"
    return r


def test_device_pointers_take_the_gpu_paths(cluster):
    r = run_child(CHILD, cluster.master)
    counts = {}
    for line in r.stdout.splitlines():
        if line.startswith("granary_client_gpu_transfers_total{"):
            name, value = line.rsplit(" ", 1)
            counts[name.split('path="')[1].split('"')[0]] = float(value)
    # Same host over shared memory: the node's mapped host segment; over tcp: pinned staging.
    want = "staging" if cluster.transport == "tcp" else "host_segment"
    assert counts.get(want, 0) > 0, f"no transfer took the {want} path: {counts}"
    assert "child ok" in r.stdout
    want = "staging" if cluster.transport == "tcp" else "host_segment"
    assert any(want in line and not line.endswith(" 0") for line in r.stdout.splitlines()), \
        r.stdout


# The stream contract (include/granary/client.h, DeviceWait). The engine writes on its stream,
# the fake's engine stream, whose writes land only once something waits for them: a put without
# the contract stores the bytes from before the write; with stream= or event= (a raw handle, or
# an object shaped like torch.cuda.Stream / torch.cuda.Event) it stores the engine's bytes. The
# Mooncake class keeps Mooncake's signatures: its callers synchronize before the call.
STREAM_CHILD = textwrap.dedent(r'''
    import sys, uuid
    import numpy as np
    import granary
    from granary.mooncake import MooncakeDistributedStore
    master = sys.argv[1]
    assert granary._device_backend() == "fake", granary._device_backend()
    c = granary.Client(master=master)
    rng = np.random.default_rng(7)
    tag = uuid.uuid4().hex[:8]
    n = 100_000
    d = granary._testing_device_alloc(n)
    engine = granary._testing_engine_stream(60_000)
    keep = []  # the engine's sources live until the end

    def engine_writes():
        granary._testing_stream_synchronize(engine)  # the last write lands first
        old = rng.integers(0, 256, n, dtype=np.uint8)
        fresh = rng.integers(0, 256, n, dtype=np.uint8)
        granary._testing_device_copy(d, old.ctypes.data, n)
        keep.append(fresh)
        granary._testing_engine_write(engine, d, fresh.ctypes.data, n)
        return old.tobytes(), fresh.tobytes()

    class Stream:  # torch.cuda.Stream's shape
        def __init__(self, handle):
            self.cuda_stream = handle

    class Event:  # torch.cuda.Event's shape
        def __init__(self, handle):
            self.cuda_event = handle

    old, fresh = engine_writes()
    c.put_from(f"without-{tag}", d, n)
    assert c.get(f"without-{tag}") == old, "a put without the contract waited anyway"
    for i, wait in enumerate([dict(stream=engine), dict(stream=Stream(engine))]):
        old, fresh = engine_writes()
        c.put_from(f"with{i}-{tag}", d, n, **wait)
        assert c.get(f"with{i}-{tag}") == fresh, f"put_from({wait}) stored stale bytes"
    old, fresh = engine_writes()
    ev = granary._testing_engine_event(engine)
    assert c.batch_put_from([f"batch-{tag}"], [d], [n], event=Event(ev)) == [None]
    assert c.get(f"batch-{tag}") == fresh, "batch_put_from(event=) stored stale bytes"
    old, fresh = engine_writes()
    ev = granary._testing_engine_event(engine)
    assert c.batch_put_from_regions([f"reg-{tag}"], [[d, d + 1000]], [[1000, n - 1000]],
                                    event=ev) == [None]
    assert c.get(f"reg-{tag}") == fresh, "batch_put_from_regions(event=) stored stale bytes"
    for bad, err in [(dict(stream="s"), TypeError), (dict(event=1.5), TypeError),
                     (dict(stream=-1), ValueError)]:
        try:
            c.put_from(f"bad-{tag}", d, n, **bad)
        except err as e:
            assert next(iter(bad)) in str(e), e
        else:
            raise AssertionError(f"put_from({bad}) was accepted")

    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master) == 0
    old, fresh = engine_writes()
    granary._testing_stream_synchronize(engine)  # what Mooncake's callers do before a put
    assert s.put_from(f"mc-{tag}", d, n) == 0
    assert bytes(s.get(f"mc-{tag}")) == fresh
    try:
        s.put_from(f"mc2-{tag}", d, n, stream=engine)
    except TypeError as e:
        assert "stream" in str(e), e
    else:
        raise AssertionError("the Mooncake class took a keyword Mooncake does not have")
    granary._testing_stream_synchronize(engine)
    s.close()
    c.close()
    print("child ok")
''')


def test_puts_wait_for_the_engine_stream(cluster):
    run_child(STREAM_CHILD, cluster.master)
