"""The coordinator's Gram block kept for the next fit in this process, for a while.

A fit's Gram block (``coordinators.crammer_singer._GramCache``: up to ``cache_size``, 800-900 MB
for letter's 15,000 rows) is written row by row into memory the process has not touched, and
fresh memory is costly: each page is zeroed by the kernel, and on a VM whose host takes freed
memory back, backed again (0.1-2.4 ms per MB on the project's VM, benchmarks/results/HISTORY.md,
session 46).  LIBSVM's kernel cache is rows of the C heap, which the next fit in the process
reuses.  So a fit's block is kept after it ends and the next fit that needs no larger one takes
it; one block at most, dropped :data:`HOLD_SECONDS` after the fit that gave it back, or at once by
:func:`release_memory`.  A process thus holds up to its ``cache_size`` for that long after a fit,
as a run of fits (``GridSearchCV``, ``cross_val_score``) holds it during the run anyway.
Measured alternated on the 2-core VM (session 47): system time per pendigits fit 0.02-0.06 s ->
0.00-0.02 s, letter's huge pages paged in per fit 848 MB -> 96-110 MB; fit times 0-10 % lower
(pendigits median 0.13-0.17 s -> 0.13-0.14 s, satimage 0.088-0.103 -> 0.083-0.092), within the
VM's noise on letter.
"""

from __future__ import annotations

import threading

import numpy as np

#: seconds a block is kept after the fit that gave it back
HOLD_SECONDS = 10.0

_lock = threading.Lock()
_kept: list = []  # [flat block] or []
_timer: list = []  # [threading.Timer] dropping it, or []


def take(n_values: int, dtype) -> np.ndarray:
    """A flat block of at least ``n_values`` values of ``dtype``: the kept one when it is
    large enough and of that dtype (then no longer kept), else a new one (a kept one too small
    is dropped: the new block takes its place in memory)."""
    dtype = np.dtype(dtype)
    with _lock:
        block = _kept.pop() if _kept else None
        _cancel()
    if block is not None and block.dtype == dtype and block.shape[0] >= n_values:
        return block
    del block
    return np.empty(int(n_values), dtype=dtype)


def give(block: np.ndarray) -> None:
    """Keep ``block`` (flat, from :func:`take`; nothing else may still use it) for the next
    fit, in place of a kept one, for :data:`HOLD_SECONDS`."""
    if HOLD_SECONDS <= 0:
        return
    timer = threading.Timer(HOLD_SECONDS, release_memory)
    timer.daemon = True
    with _lock:
        _kept[:] = [block]
        _cancel()
        _timer.append(timer)
    timer.start()


def release_memory() -> int:
    """Drop the Gram block kept from the last fit (if any); returns its bytes.  The next fit
    makes its own."""
    with _lock:
        freed = sum(b.nbytes for b in _kept)
        _kept.clear()
        _cancel()
    return freed


def kept_bytes() -> int:
    """Bytes of the block kept now."""
    with _lock:
        return sum(b.nbytes for b in _kept)


def _cancel() -> None:
    """Stop the pending drop (under the lock)."""
    for t in _timer:
        t.cancel()
    _timer.clear()
