"""The acquire / release intrinsics that hand work between numba threads
(:mod:`dmcsvm.numerics.atomics`): values published with a release store are seen whole by a
thread whose acquire load reads it, a spin loop on an acquire load is not hoisted (it ends), and
waiting threads yield, so more threads than cores still make progress."""

import threading

import numba
import numpy as np

from dmcsvm.numerics.atomics import load_acquire, store_release, yield_cpu


@numba.njit(nogil=True)
def _relay(tid, threads, turn, data, n):
    """Thread ``tid`` takes every ``threads``-th turn: checks the value the previous turn wrote,
    writes its own, then publishes the next turn with a release store."""
    bad = 0
    spins = 0
    while True:
        t = load_acquire(turn, 0)
        if t >= n:
            return bad
        if t % threads == tid:
            if t > 0 and data[t - 1] != 3 * (t - 1) + 1:
                bad += 1
            data[t] = 3 * t + 1
            store_release(turn, 0, t + 1)
        else:
            spins += 1
            if spins % 64 == 0:
                yield_cpu()


def test_release_stores_are_seen_by_acquire_loads_across_threads():
    """Four threads (more than this box's cores) pass 20,000 turns round-robin; every turn sees
    the value written by the turn before it."""
    threads, n = 4, 20_000
    turn = np.zeros(8, dtype=np.int64)
    data = np.zeros(n, dtype=np.int64)
    bad = [None] * threads

    def run(tid):
        bad[tid] = _relay(tid, threads, turn, data, n)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert not any(w.is_alive() for w in workers)
    assert bad == [0] * threads
    assert turn[0] == n
    np.testing.assert_array_equal(data, 3 * np.arange(n) + 1)


def test_store_release_writes_the_value():
    @numba.njit
    def roundtrip(a):
        store_release(a, 3, 41)
        return load_acquire(a, 3) + 1

    a = np.zeros(5, dtype=np.int64)
    assert roundtrip(a) == 42 and a[3] == 41
