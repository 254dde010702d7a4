"""Checkpointing and resuming an estimator's fit: reads its ``checkpoint`` /
``checkpoint_every`` / ``resume`` parameters, binds a :class:`~dmcsvm.checkpoint.Checkpointer`
to the solve and resumes from the newest checkpoint (:mod:`dmcsvm.checkpoint` is the file
format, :mod:`dmcsvm.coordinators.resume` rebuilds the coordinator's state)."""

from __future__ import annotations

import os
import warnings

import numpy as np

from ..checkpoint import (
    Checkpointer,
    _crc,
    _jsonable,
    data_fingerprint,
    has_checkpoint,
    labels_crc32,
    load_checkpoint,
    parse_every,
    restore_rng,
)
from ..coordinators.resume import resume_state
from ..engine.messages import RoundMessage
from ..param_history import upgrade_params
from ..runtime_params import RESUME_MAY_CHANGE
from ..solver_options import defaults_of

__all__ = ["CheckpointSession"]


class CheckpointSession:
    """What an estimator's ``fit`` needs for ``checkpoint`` / ``checkpoint_every`` / ``resume``.

    ``CheckpointSession.for_estimator(est, X, y_idx, settings)`` reads those parameters; when
    ``checkpoint`` is None it does nothing (``settings`` unchanged, no extra solve arguments).
    Otherwise :meth:`solve_kwargs` gives ``on_round`` (a bound :class:`Checkpointer`) and, when
    resuming from an existing checkpoint, ``state`` and ``first_msg``; :attr:`settings` then has
    ``max_iter`` reduced by the rounds already run, so a resumed run stops where an
    uninterrupted one would.
    """

    def __init__(self, settings, checkpointer=None, state=None, first_msg=None):
        self._ck = None
        self.settings = settings
        self.checkpointer = checkpointer
        self.state = state
        self.first_msg = first_msg

    @classmethod
    def for_estimator(cls, est, X, y_idx, settings, assign=None, rng=None, row_C=None):
        directory = getattr(est, "checkpoint", None)
        resume = getattr(est, "resume", False)  # both types: _parameter_constraints
        if directory is None:
            if resume:
                raise ValueError("resume=True needs checkpoint (the checkpoint directory)")
            return cls(settings)
        rounds, seconds = parse_every(getattr(est, "checkpoint_every", 10))
        # the solver options one by one and in full (defaults filled in), as the parameters
        # they were before 0.3: a checkpoint of an older dmcsvm compares equal when they match
        params = {
            k: v
            for k, v in est.get_params(deep=False).items()
            if k not in RESUME_MAY_CHANGE and k != "solver_options"
        }
        params.update(_recorded_options(type(est).__name__, est._solver_options()))
        params["estimator"] = type(est).__name__
        params["n_samples"], params["n_features"] = int(X.shape[0]), int(X.shape[1])
        params["labels_crc32"] = int(labels_crc32(y_idx))
        params["data_fingerprint"] = data_fingerprint(X, y_idx)
        if row_C is not None:
            # the per-pattern bounds C_i (class_weight, sample_weight): a resume with other
            # weights is another problem (absent without weights: older checkpoints still match)
            params["weights_crc32"] = int(_crc(np.ascontiguousarray(row_C, dtype=np.float64)))
        ckpt = Checkpointer(directory, rounds, seconds, settings=params)
        state, first_msg, resumed = None, None, None
        if resume and has_checkpoint(directory):
            ck = load_checkpoint(directory)
            # a checkpoint of an older dmcsvm names renamed parameters by their old names
            ck.settings = _upgraded(params["estimator"], ck.settings)
            diff = sorted(
                k
                for k in set(ck.settings) | set(ckpt.settings)
                if ck.settings.get(k) != ckpt.settings.get(k) and k != "data_fingerprint"
            )
            if diff:
                shown = ", ".join(
                    f"{k}={ck.settings.get(k)!r} (now {ckpt.settings.get(k)!r})" for k in diff
                )
                raise ValueError(f"{ck.path} was written with other settings or data: {shown}")
            if ck.settings.get("data_fingerprint") != params["data_fingerprint"]:
                raise ValueError(
                    f"{ck.path} was written for other training data (data fingerprint "
                    f"{ck.settings.get('data_fingerprint')}, this data "
                    f"{params['data_fingerprint']}): refusing to resume onto it"
                )
            state, first_msg = resume_state(ck, X)
            resumed = ck
            if rng is not None:
                restore_rng(rng, ck.rng)
            if assign is not None and ck.assign is not None:
                assign[:] = ck.assign
            if settings.max_iter > 0:
                left = settings.max_iter - ck.rounds
                if left < 1:
                    warnings.warn(
                        f"{ck.path}: the checkpoint is already at max_iter="
                        f"{settings.max_iter}; running one more round",
                        stacklevel=3,
                    )
                settings = _replace(settings, max_iter=max(1, left))
        elif resume:
            warnings.warn(f"no checkpoint in {directory}: starting from scratch", stacklevel=3)
        sess = cls(settings, ckpt, state, first_msg)
        sess._ck = resumed
        sess._X = X
        sess._assign, sess._rng = assign, rng
        return sess

    def solve_kwargs(self, n, P, sparse, x_dtype, executor=None):
        """Keyword arguments for :func:`solve`: ``on_round`` and, when resuming, the state.

        With the ``executor`` (started on the partitions), checkpoints include the partitions'
        own states, and a resume onto the same partition bounds loads them and continues
        exactly; otherwise the partitions are rebuilt from the support coefficients."""
        if self.checkpointer is None:
            return {}
        from ..coordinators.crammer_singer import CoordinatorState

        if self.state is None:
            self.state = CoordinatorState.fresh(n, P)
        elif self._ck is not None and executor is not None:
            self._resume_partitions(executor)
        self.checkpointer.bind(
            self.state,
            n_features=self._X.shape[1],
            sparse=sparse,
            x_dtype=x_dtype,
            assign=self._assign,
            rng=self._rng,
            executor=executor,
        )
        kw = {"on_round": self.checkpointer, "state": self.state}
        if self.first_msg is not None:
            kw["first_msg"] = self.first_msg
        return kw

    def _resume_partitions(self, executor):
        """Load the checkpointed partition states, or warn why the partitions are rebuilt."""
        ck = self._ck
        why = _partition_states_usable(ck, executor)
        if why is None:
            executor.call("load_state", ck.path)
            # partitions are where the checkpointed round left them: send the batch it chose
            self.first_msg = RoundMessage(**ck.pending)
            return
        warnings.warn(
            f"{ck.path}: resuming from the support coefficients, not the partitions' "
            f"saved states, because {why}: the fit reaches the same optimum (to tol) by "
            f"other rounds than an uninterrupted one",
            stacklevel=4,
        )


def _partition_states_usable(ck, executor) -> str | None:
    """Why the checkpoint's partition states cannot be loaded into ``executor``'s partitions, or
    None when they can."""
    if ck.partition_bounds is None:
        return "it holds no partition states (written by dmcsvm 0.1 or without partitions)"
    bounds = [tuple(b) for b in executor.call("row_range")]
    if bounds != [tuple(b) for b in ck.partition_bounds]:
        return (
            f"its partitions own rows {ck.partition_bounds}, this run's {bounds} (another "
            f"n_partitions or cluster size)"
        )
    missing = [
        k
        for k in range(len(bounds))
        if not os.path.exists(os.path.join(ck.path, f"part-{k:05d}.npz"))
    ]
    if missing:
        return (
            f"the state files of partitions {missing} are not in {ck.path} (workers that "
            f"wrote to disks of their own?)"
        )
    return None


def _recorded_options(estimator: str, options: dict) -> dict:
    """The solver options a checkpoint records: all but the runtime ones."""
    return {k: v for k, v in options.items() if k not in RESUME_MAY_CHANGE}


def _upgraded(estimator: str, settings: dict) -> dict:
    """A checkpoint's recorded parameters with today's names (:mod:`dmcsvm.param_history`): a
    parameter that moved into ``solver_options`` is recorded under its option's name, and the
    options an older dmcsvm did not have take their defaults."""
    out = upgrade_params(estimator, settings)
    moved = out.pop("solver_options", None) or {}
    recorded = _recorded_options(estimator, {**defaults_of(estimator), **moved})
    return {**{k: _jsonable(v) for k, v in recorded.items()}, **out}


def _replace(settings, **kw):
    import dataclasses

    return dataclasses.replace(settings, **kw)
