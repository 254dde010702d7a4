"""The one list of "where and how it runs" estimator parameters.

They choose the cluster, threads, memory, caches, progress output and checkpoint files of a fit,
never its solution, so (DESIGN §4) they are not part of what a model file or a checkpoint
records: :mod:`dmcsvm.model_io` drops them on save and ignores them on load (a model file can
never choose the scheduler that ``predict`` connects to), :mod:`dmcsvm.checkpoint` lets a run
resume with other values of them, and the CLI sets them through its own options.
"""

from __future__ import annotations

__all__ = ["RUNTIME_PARAMS", "split_runtime"]

RUNTIME_PARAMS = frozenset({
    "client", "n_workers", "threads_per_worker", "memory_limit", "n_jobs", "n_partitions",
    "verbose", "cache_size", "disk_cache_size", "cache_dir", "data_in_memory",
    "checkpoint", "checkpoint_every", "resume",
})


def split_runtime(params: dict) -> tuple[dict, dict]:
    """``(model parameters, runtime parameters)`` of a ``get_params()`` dict."""
    model = {k: v for k, v in params.items() if k not in RUNTIME_PARAMS}
    runtime = {k: v for k, v in params.items() if k in RUNTIME_PARAMS}
    return model, runtime
