"""Rebuilding the partitions lost with their worker, from their rows and the coordinator's state.

The partitions lost with their worker -- during a round, between rounds, or while no worker is
alive for up to ``recover_timeout`` seconds -- are rebuilt together on one live worker, each from
its rows (the store, or the persisted / in-memory block) and the coordinator's current state,
which the coordinator registers with :meth:`Recovery.set_snapshot`: the support patterns' X rows
and coefficients (``F = K(X_part, X_SV) B_SV``, one kernel block in row blocks of bounded size),
its own coefficient rows, which of its rows the coordinator already holds, and kind-specific
fields (``Partition.restore``).  All its rows are active again.  The rebuilt partition answers the
round it was lost in without applying that round's update a second time (the coordinator's state
already holds it); a surviving group asked again for a round it applied (its tree parent died)
answers from memory.  Nothing is logged per round: the coordinator's memory does not grow with
the round count.

The rebuilt scores equal the accumulated ones up to rounding, so a fit with a recovery is not bit
for bit the uninterrupted one: it completes and converges to the same optimum within the solver's
tolerances.  Without a recovery the rounds are exactly those of the in-process executor.  A
partition lost more than ``MAX_LOSSES`` times ends the fit.  See docs/design.md, 'Architecture:
coordinator, partitions, rounds'."""

from __future__ import annotations

import contextlib
import time

from . import limits
from .client import SchedulerLostError
from .liveness import settle


class Recovery:
    """Rebuilding lost groups (a mixin of :class:`~.executor.DaskExecutor`).

    Reads ``client``, ``token``, ``groups``, ``recover_timeout``, ``_build``, ``_mutated``,
    ``_snapshots``; replaces ``parts[g]`` and appends to ``recoveries`` and ``_losses``."""

    def set_snapshot(self, fn, name: str = "state") -> None:
        """Register ``fn(lo, hi) -> dict``, the coordinator's current state as a partition of rows
        ``[lo, hi)`` needs it to be rebuilt (``Partition.restore``); providers registered under
        different names are merged (e.g. the coefficients from ``solve`` and the assignment from
        the multi-prototype search).  ``fn=None`` removes one.  A provider is called only when a
        partition is lost, at that moment: it must describe the state *after* every update the
        coordinator has sent or is sending."""
        if fn is None:
            self._snapshots.pop(name, None)
        else:
            self._snapshots[name] = fn

    def _snapshot(self, k):
        """The merged snapshot of every provider for partition ``k`` (None: nothing registered
        and nothing changed yet, so its rows alone rebuild it)."""
        lo, hi = self._build[k][0], self._build[k][1]
        if not self._snapshots:
            if self._mutated:
                raise RuntimeError(
                    f"partition {k} was lost with its worker {self.placement[k]} after rounds had "
                    f"changed its state, and no coordinator state is registered to rebuild it "
                    f"from (DaskExecutor.set_snapshot); start the fit again"
                )
            return None
        snap: dict = {}
        for fn in self._snapshots.values():
            snap.update(fn(lo, hi))
        return snap

    def _recover(self, g, op):
        """Rebuild group ``g`` (every partition of the lost worker) on one live worker from its
        rows and the coordinator's snapshot and return its answer to ``op`` (the operation that
        found it gone)."""
        t0 = time.monotonic()
        ks = self.groups[g]
        dead = self._worker_of(g)
        for k in ks:
            self._losses[k] += 1
        k = ks[0]  # a group's partitions are lost (and counted) together
        if self._losses[k] > limits.MAX_LOSSES:
            restarts = self._memory_restarts()
            if restarts:
                raise self._memory_error(k, restarts, "while running; lost again")
            raise RuntimeError(
                f"partition {k} was lost with its worker {self._losses[k]} times "
                f"in this fit (last on {dead}); see the workers' logs"
            )
        with contextlib.suppress(Exception):
            old = self.parts[g]
            self.client.cancel([getattr(old, "_future", old)])
        failure = None
        attempt = 0
        while True:
            try:
                w = self._wait_for_worker(g, "to take over")
            except RuntimeError as e:
                raise e from failure
            attempt += 1
            try:
                return self._rebuild(g, dead, w, op, t0, attempt)
            except SchedulerLostError:
                raise
            except Exception as e:  # noqa: BLE001 - the chosen worker may be dying too
                failure = e
                if not (self._group_lost(g) or self._is_suspect(w) or isinstance(e, OSError)):
                    raise
                if time.monotonic() - t0 > self.recover_timeout:
                    raise RuntimeError(
                        f"partition {ks[0]} could not be rebuilt within "
                        f"{self.recover_timeout:.0f} s after its worker {dead} died: "
                        f"{e!r}"
                    ) from e

    def _rebuild(self, g, dead, w, op, t0, attempt):
        """One attempt of :meth:`_recover` on worker ``w``: build, restore, answer ``op``."""
        self._place(g, w)
        ks = self.groups[g]
        snaps = {k: self._snapshot(k) for k in ks}
        key = f"dmcsvm-group-{g}-{self.token}-r{len(self.recoveries) + 1}-{attempt}"
        fut = self._submit(g, w, [self._rows_for(k, w) for k in ks], key)
        actor = self._await_rebuilt(g, fut)
        snaps = {k: v for k, v in snaps.items() if v is not None}
        if snaps:
            self._wait_one(g, actor.restore(snaps))
        if op[0] == "step":
            # its state comes from the snapshot, which already holds the round's update
            reply = self._wait_one(g, actor.step_packed(*op[1:], True))
        else:
            reply = self._wait_one(g, actor.call(op[1], op[2]))
        self.parts[g] = actor
        for k in ks:
            self.recoveries.append((k, dead, w, time.monotonic() - t0))
        return reply

    def _await_rebuilt(self, g, fut):
        """The rebuilt group's actor; an OSError when its new worker leaves too."""
        while True:
            settle(fut)
            self._check_scheduler()
            if fut.status == "finished":
                self._actor_futs[g] = fut
                return fut.result()
            if fut.status == "error":
                return fut.result()  # raises: the caller decides
            if self._group_lost(g) or fut.status in ("lost", "cancelled"):
                raise OSError(
                    f"worker {self._worker_of(g)} left while rebuilding "
                    f"partition {self.groups[g][0]}"
                )

    def _wait_one(self, g, f):
        """Result of one call on a rebuilt group, bounded by its worker's liveness."""
        while True:
            try:
                return f.result(timeout=limits.ACTOR_POLL_S)
            except TimeoutError:
                self._check_scheduler()
                if self._group_lost(g):
                    raise OSError(
                        f"worker {self._worker_of(g)} left while "
                        f"rebuilding partition {self.groups[g][0]}"
                    ) from None

    def _lost(self, k) -> RuntimeError:
        """The error of a lost partition when ``recover`` is off."""
        return RuntimeError(
            f"the Dask worker {self.placement[k]} holding partition {k} has left "
            f"the cluster; its state is lost (start the fit again)"
        )
