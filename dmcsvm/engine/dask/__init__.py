"""The Dask executor: the same partitions as the in-process executor, living on Dask workers.

One module per job:

* :mod:`.executor` -- :class:`DaskExecutor`, the thin front (start, step, call, close);
* :mod:`.placement` -- which worker holds each partition, and its memory plan;
* :mod:`.routing` -- calls straight to the workers or down a tree of workers;
* :mod:`.recovery` -- rebuilding the partitions of a lost worker from the coordinator's state;
* :mod:`.bank` -- which batch rows every worker already holds, left out of the messages;
* :mod:`.liveness` -- bounded waits on the scheduler and the workers;
* :mod:`.client` -- the Dask client (``'local'``, an address, a ``Client``) and the scheduler's
  worker events;
* :mod:`.local` -- the LocalCluster that ``client='local'`` starts once and keeps;
* :mod:`.limits` -- the bounds of every wait.

Without a lost worker the rounds are exactly those of the in-process executor, bit for bit.  See
docs/design.md, 'Architecture: coordinator, partitions, rounds'.
"""

from __future__ import annotations

from .client import SchedulerLostError, release_client, resolve_client
from .executor import DaskExecutor
from .local import close_local_clusters

__all__ = [
    "DaskExecutor",
    "SchedulerLostError",
    "close_local_clusters",
    "release_client",
    "resolve_client",
]
