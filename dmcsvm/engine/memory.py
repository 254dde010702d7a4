"""Sizing a partition to its worker's memory limit (docs/design.md, 'Architecture';
cluster/README.md).

A Dask worker pauses at 80 % of its memory limit and its nanny kills it at 95 %; a paused or
killed worker stalls or loses a round.  So before partitions are created the executor plans, for
each worker, what its partitions may hold: their state (scores ``F``, coefficients ``B`` and
per-row bookkeeping, fixed by the row count), the kernel blocks it keeps for its rounds
(:data:`KERNEL_BLOCKS` of ``kernel_block_bytes``), their rows if they fit (twice: a round copies
the rows outside its working set), and the in-memory column cache from what is left.  Rows that
do not fit are streamed from the store; kernel columns that do not fit in memory go to the zarr
tier on disk.
"""

from __future__ import annotations

from dataclasses import dataclass

#: resident memory of a worker process before any partition (Python, numpy, numba, distributed,
#: dmcsvm imported: about 290 MB measured on Linux x86-64)
WORKER_BASELINE_BYTES = 320 * 2**20
#: fraction of the limit the plan fills: below Dask's 80 % pause threshold, with room for
#: messages, replies and allocator slack
PLAN_FRACTION = 0.6
#: bytes per row of partition state: F and B (P float64 each) plus norms, kernel diagonal,
#: selection values, KKT violations (float64), calm counter, active index (int64), shipped flag
STATE_BYTES_PER_ROW_FIXED = 8 * 6 + 1
#: kernel blocks a partition keeps from round to round (``PartitionBase._scratch``): the round's
#: columns, the columns it computes whole for its cache, and those over the rows outside the
#: working set
KERNEL_BLOCKS = 3


@dataclass(frozen=True)
class PartitionPlan:
    """What one partition may hold: stream its rows or not, and its column-cache budget."""

    stream: bool
    cache_bytes: int
    budget_bytes: int
    state_bytes: int


def plan_partition(
    memory_limit: int,
    parts_on_worker: int,
    n_rows: int,
    n_prototypes: int,
    x_bytes: int,
    can_stream: bool,
    cache_bytes: int,
    kernel_block_bytes: int,
    chunk_bytes: int = 8 * 2**20,
    stream: bool | str = "auto",
) -> PartitionPlan:
    """Plan one partition on a worker with ``memory_limit`` bytes (0: unknown, no limit).

    Parameters
    ----------
    memory_limit : int
        The worker's memory limit in bytes (0 or None when it has none).
    parts_on_worker : int
        Partitions placed on that worker.
    n_rows, n_prototypes : int
        Rows of the partition and prototypes ``P``.
    x_bytes : int
        Bytes of its rows in memory.
    can_stream : bool
        Whether the rows can be re-read from a store instead.
    cache_bytes : int
        Requested in-memory column cache (the estimator's ``cache_size`` share).
    kernel_block_bytes : int
        Largest kernel block the partition materializes.
    chunk_bytes : int
        One store chunk (two are held while streaming).
    stream : {'auto', True, False}
        ``data_in_memory`` inverted: True forces streaming, False forbids it.

    Returns
    -------
    PartitionPlan
    """
    state = n_rows * (STATE_BYTES_PER_ROW_FIXED + 16 * n_prototypes)
    if not memory_limit:
        return PartitionPlan(bool(stream is True and can_stream), int(cache_bytes), 0, state)
    budget = max(0, PLAN_FRACTION * memory_limit - WORKER_BASELINE_BYTES) / max(parts_on_worker, 1)
    fixed = state + KERNEL_BLOCKS * kernel_block_bytes
    if stream == "auto":
        streaming = can_stream and fixed + 2 * x_bytes > budget
    else:
        streaming = bool(stream) and can_stream
    held = fixed + (2 * chunk_bytes if streaming else 2 * x_bytes)
    cache = int(max(0, min(cache_bytes, budget - held)))
    return PartitionPlan(streaming, cache, int(budget), int(state))
