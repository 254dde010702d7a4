"""The bounds of every wait of the Dask executor, and the routing threshold.

Read as ``limits.NAME`` at the moment they are used, so that a test can shorten a wait by setting
the attribute of this module."""

from __future__ import annotations

ACTOR_POLL_S = 5.0  # how often a waiting call checks the scheduler and the partitions' workers
BUILD_POLL_S = 1.0  # the same while partitions are being created
CALL_TIMEOUT_S = 20.0  # bound of one request to the scheduler (its list of workers)
BUILD_RESTARTS = 3  # worker losses (nanny restarts for memory included) tolerated while building
MAX_LOSSES = 5  # times one partition may be rebuilt in a fit before the fit gives up
TREE_MIN_GROUPS = 8  # tree='auto': rounds go down the broadcast / reduction tree from this many
# workers on (below it, one call per worker costs less:
# benchmarks/results/scaling.md)
REACH_TIMEOUT_S = 3.0  # how long the client waits for a worker to answer directly before relaying
#: partition methods that change no state (a fit that made only these calls can rebuild a lost
#: partition from its rows alone)
READ_ONLY_CALLS = frozenset({"stats", "close", "summary", "prototypes", "save_state", "row_range"})
MiB = 2**20
