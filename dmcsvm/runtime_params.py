"""The one list of "where and how it runs" estimator parameters.

They choose the cluster, threads, memory, caches, progress output and checkpoint files of a fit,
never its solution, so (docs/design.md, 'The coordinator's size') they are not part of what a model
file or a checkpoint records: :mod:`dmcsvm.model_io` drops them on save and ignores them on load (a
model file can never choose the scheduler that ``predict`` connects to), :mod:`dmcsvm.checkpoint`
lets a run resume with other values of them, and the CLI sets them through its own options.

Each is declared once below (:data:`PARAMS`) with what it means and, where ``dmcsvm train`` sets
it through a dedicated option instead of ``--NAME``, that option; everything else
(:data:`RUNTIME_PARAMS`, :data:`CLI_OPTIONS`, :data:`RESUME_MAY_CHANGE`) is derived from it.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "CLI_OPTIONS",
    "PARAMS",
    "RESUMABLE_MODEL_PARAMS",
    "RESUME_MAY_CHANGE",
    "RUNTIME_PARAMS",
    "RuntimeParam",
    "split_runtime",
]


class RuntimeParam(NamedTuple):
    """One runtime parameter: its name, what it chooses, and the ``dmcsvm train`` option that
    sets it (None: the generic ``--NAME`` option)."""

    name: str
    meaning: str
    cli_option: str | None = None


PARAMS = (
    RuntimeParam(
        "client",
        "where training runs: in-process, a Dask cluster, or this process's kept LocalCluster",
        "--scheduler / --local-workers",
    ),
    RuntimeParam("n_workers", "workers of the LocalCluster of client='local'", "--local-workers"),
    RuntimeParam(
        "threads_per_worker", "threads of each worker of that LocalCluster", "--threads-per-worker"
    ),
    RuntimeParam(
        "memory_limit", "memory limit of each worker of that LocalCluster", "--memory-limit"
    ),
    RuntimeParam("n_jobs", "threads (and row partitions) of the in-process executor"),
    RuntimeParam("n_partitions", "row partitions of the training data"),
    RuntimeParam("verbose", "whether a progress bar shows the fit", "--progress / --no-progress"),
    RuntimeParam("cache_size", "budget (MB) of the in-memory kernel-column cache"),
    RuntimeParam("disk_cache_size", "budget (MB) of the on-disk tier of the column cache"),
    RuntimeParam("cache_dir", "directory of the on-disk column cache"),
    RuntimeParam("data_in_memory", "whether partitions hold their rows of a store in memory"),
    RuntimeParam("checkpoint", "directory the solve is checkpointed to", "--checkpoint"),
    RuntimeParam(
        "checkpoint_every",
        "how often (rounds, or seconds as '30s') it is checkpointed",
        "--checkpoint-every",
    ),
    RuntimeParam("resume", "whether the fit continues from the newest checkpoint", "--resume"),
)

RUNTIME_PARAMS = frozenset(p.name for p in PARAMS)
"""Names of the runtime parameters: neither written to nor read from model files and checkpoints."""

CLI_OPTIONS = {p.name: p.cli_option for p in PARAMS if p.cli_option}
"""``{parameter: option}`` of the runtime parameters ``dmcsvm train`` sets by a dedicated option
(not by ``--NAME`` or ``--param``)."""

RESUMABLE_MODEL_PARAMS = {
    "max_iter": "the round limit: a resumed run may stop later (or sooner) than the first",
    "warm_start": "where the first fit started: a checkpoint already holds a state",
}
"""Model parameters (written to model files) that a run may still resume a checkpoint with other
values of."""

RESUME_MAY_CHANGE = RUNTIME_PARAMS | frozenset(RESUMABLE_MODEL_PARAMS)
"""Estimator parameters a checkpoint does not record, so that a resumed run may change them."""


def split_runtime(params: dict, names=RUNTIME_PARAMS) -> tuple[dict, dict]:
    """``(model parameters, runtime parameters)`` of a ``get_params()`` dict (``names``: the
    runtime ones).  The runtime entries of ``solver_options`` (``n_partitions``,
    ``data_in_memory``, ...) go with the runtime parameters; the model's ``solver_options`` keeps
    the rest (None when nothing is left)."""
    model = {k: v for k, v in params.items() if k not in names}
    runtime = {k: v for k, v in params.items() if k in names}
    options = model.get("solver_options")
    if isinstance(options, dict):
        runtime.update({k: v for k, v in options.items() if k in names})
        model["solver_options"] = {k: v for k, v in options.items() if k not in names} or None
    return model, runtime
