"""The engine: row partitions that own their slice of a solve's state, and the executors that run
their rounds in this process or on a Dask cluster.

What it promises to the coordinators above it (:mod:`dmcsvm.coordinators`):

* **Executors are interchangeable, bit for bit.**  The in-process executor
  (:class:`~dmcsvm.engine.executor.InProcessExecutor`, threads) and the Dask executor
  (:class:`~dmcsvm.engine.dask.DaskExecutor`, actors on the workers) run the same
  :class:`~dmcsvm.engine.partition.Partition` objects on the same messages, so the same settings
  and partitioning give the same rounds and the same model on either.
* **State is owned by partitions.**  Each partition keeps its rows (in memory or streamed from the
  zarr store), their scores, selection statistics and kernel-column cache where it lives; a round
  is one message down (the batch update) and one reply up (candidates and aggregates) per worker,
  never a task graph per pattern.  The coordinator holds only what grows with the support set.
* **Checkpoints.**  A partition saves and restores the state the next rounds depend on (active set,
  shrinking counters) beside the coordinator's checkpoint (:mod:`dmcsvm.checkpoint`), so a resumed
  fit continues where it stopped.
* **Recovery.**  A partition lost with its Dask worker is rebuilt on a live worker from its rows
  and the coordinator's current state (``F = K(X_part, X_SV) B_SV``), without replaying history
  (:mod:`dmcsvm.engine.dask.recovery`); the fit converges to the same optimum within the solver's
  tolerances.  Every wait on the cluster is bounded.

See docs/design.md, 'Architecture: coordinator, partitions, rounds'.
"""
