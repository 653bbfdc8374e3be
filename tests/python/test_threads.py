"""The GIL is released while a call waits: 8 Python threads doing 1 MiB get_into calls into
their own numpy arrays get more done together than one thread alone.

The ratio is measured in this test, on this machine, each thread with its own key and
destination: one thread and eight threads take turns in short windows (0.3 s each, five of
each), and the ratio is of the summed rates, so a load change on a shared machine hits both
sides alike. With the GIL held across the C++ call the eight threads would serialise on it and
the ratio would be about 1 (the same measurement with a lock around each call gave 0.86-1.00);
released, they overlap their control round trips to the master and their copies. On the 2-core
development VM, with two other builds running, interleaved rounds gave 1.97x-2.57x; one-off
sequential measurements there ranged from 1.17x to 6x, which is why the windows interleave. The
ceiling is the machine: where one thread alone nearly saturates the copy bandwidth the ratio
shrinks toward what the cores allow. A burst of load can still skew one round, so a round is
repeated (at most three) until one passes; a GIL held across the call cannot pass any round. If
this fails, the printed rates tell the machine from the module (a ratio near 1.0 in every round
is the module). Since a waiting caller drives the client's worker itself (2026-12-06) one thread
alone is faster (15.6k-17.7k to 19.4k-22.3k gets/s here, A/B in one build) while eight threads
stay at what the two cores allow (28.4k-31.4k/s either way), so the ratio fell from 1.70-1.82
to 1.41-1.53, and the bar is 1.2: still above any GIL-bound run (0.86-1.00). The client runs
without copy threads (copy_threads 0): with them one thread's 1 MiB copy already takes both
cores here, and the ratio measured the cores rather than the GIL (0.86-1.19 in a run with one).
"""

import threading
import time

import numpy as np

import granary

TRANSPORTS = ["default"]
MIB = 1 << 20
THREADS = 8
WINDOW_S = 0.3
WINDOWS = 5


def run(client, keys, dsts, seconds):
    """(get_into calls, elapsed seconds) of len(keys) threads, each on its own key and array."""
    counts = [0] * len(keys)
    start = threading.Barrier(len(keys) + 1)
    stop = threading.Event()
    errors = []

    def loop(i):
        start.wait()
        try:
            while not stop.is_set():
                assert client.get_into(keys[i], dsts[i]) == MIB
                counts[i] += 1
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(keys))]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.monotonic()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    assert not errors, errors
    return sum(counts), elapsed


def interleaved_rates(client, keys, dsts):
    """(one thread's rate, THREADS threads' rate), from alternating windows."""
    one, many = [0, 0.0], [0, 0.0]
    for _ in range(WINDOWS):
        for acc, n in ((one, 1), (many, THREADS)):
            ops, elapsed = run(client, keys[:n], dsts[:n], WINDOW_S)
            acc[0] += ops
            acc[1] += elapsed
    return one[0] / one[1], many[0] / many[1]


def test_threads_release_the_gil(cluster, key):
    with granary.Client({"copy_threads": 0}, master=cluster.master) as c:
        keys = [f"{key}/{i}" for i in range(THREADS)]
        values = [np.full(MIB, i, np.uint8) for i in range(THREADS)]
        assert c.batch_put_from(keys, values) == [None] * THREADS
        dsts = [np.zeros(MIB, np.uint8) for _ in range(THREADS)]
        run(c, keys, dsts, 0.3)  # warm up: endpoints, registration cache
        ratios = []
        for _ in range(3):
            one, many = interleaved_rates(c, keys, dsts)
            ratios.append(many / one)
            print(f"1 thread {one:.0f}/s, {THREADS} threads {many:.0f}/s, "
                  f"ratio {many / one:.2f}")
            if ratios[-1] > 1.2:
                break
        for i, d in enumerate(dsts):
            assert (d == i).all()
        assert max(ratios) > 1.2, ratios
