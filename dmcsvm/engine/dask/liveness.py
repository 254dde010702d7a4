"""Whether the scheduler and the partitions' workers are alive, and bounded waits on them.

Every wait of the executor ends: on the scheduler's loss (:class:`SchedulerLostError`), on a
worker's removal (pushed by the scheduler, :class:`~.client.Watch`: no request per round), after
``recover_timeout`` with no worker left, or after ``BUILD_RESTARTS`` restarts of workers by their
nannies for memory (an error with the memory numbers).  See docs/design.md, 'Architecture:
coordinator, partitions, rounds'."""

from __future__ import annotations

import asyncio
import contextlib
import time

from distributed import wait
from distributed.utils import CancelledError

from . import limits
from .client import SchedulerLostError, nanny_memory_limit
from .limits import MiB


def settle(fut) -> None:
    """Wait up to ``limits.BUILD_POLL_S`` for ``fut`` to leave 'pending' (inside ``_calls``: the
    executor's client is the current one); the caller reads its status and decides.
    ``distributed.wait`` raises for a cancelled future (a dependency lost with a dying worker),
    which the callers treat as a lost worker, not as the fit's error."""
    with contextlib.suppress(TimeoutError, asyncio.TimeoutError, CancelledError):
        wait([fut], timeout=limits.BUILD_POLL_S)


class Liveness:
    """The executor's view of the cluster's health (a mixin of
    :class:`~.executor.DaskExecutor`).

    Reads ``client``, ``recover_timeout``, ``placement``, ``groups``, ``plans``, ``_x_bytes``,
    ``_settings``, ``_watch``, ``_gen``, ``_suspect``, ``_info_kw``, ``_t_start_restarts``;
    sets ``_not_running``;
    updates ``worker_info``."""

    def _first_workers(self) -> dict:
        """The cluster's workers; when it has none yet, wait for one up to ``recover_timeout``
        (a worker whose nanny keeps restarting it for memory ends the wait with the numbers)."""
        t0 = time.monotonic()
        while True:
            workers = self._live_workers()
            if workers:
                return workers
            restarts = self._memory_restarts()
            if len(restarts) >= limits.BUILD_RESTARTS:
                raise self._memory_error(None, restarts, "before any worker could take")
            if time.monotonic() - t0 > self.recover_timeout:
                raise ValueError(
                    f"the Dask cluster has no running workers (waited "
                    f"{self.recover_timeout:.0f} s for one to join){self._not_running_note()}"
                )
            time.sleep(0.5)

    def _memory_restarts(self):
        """Restarts of workers by their nanny for memory since this executor started."""
        return self._watch.memory[self._t_start_restarts :]

    def _memory_error(self, k, restarts, when) -> RuntimeError:
        addr, rss = restarts[-1]
        limit = int((self.worker_info.get(addr) or {}).get("memory_limit") or 0)
        if not limit:
            limit = max([int(w.get("memory_limit") or 0) for w in self.worker_info.values()] or [0])
        if not limit:
            limit = nanny_memory_limit(self.client, addr)
        plan = self.plans[k] if k is not None and k < len(self.plans) else None
        need = ""
        if plan is not None:
            xb = self._x_bytes[k] if k < len(self._x_bytes) and not plan.stream else 0
            st = getattr(self, "_settings", [])
            kb = st[k].kernel_block_bytes if k < len(st) else 0
            need = (
                f" plus about {(plan.state_bytes + kb + xb) / MiB:.0f} MiB for partition {k} "
                f"(state {plan.state_bytes / MiB:.1f} MiB, one kernel block {kb / MiB:.0f} MiB"
                + (f", rows {xb / MiB:.1f} MiB" if xb else "")
                + ")"
            )
        from ..memory import WORKER_BASELINE_BYTES

        return RuntimeError(
            f"the workers restarted {len(restarts)} times {when} "
            f"{f'partition {k:d}' if k is not None else 'a partition'}: their nannies "
            f"killed them for memory ({addr} held {rss / MiB:.0f} MiB against its memory_limit of "
            f"{limit / MiB:.0f} MiB). memory_limit {limit / MiB:.0f} MiB is too small for a Dask "
            f"worker process (about {WORKER_BASELINE_BYTES / MiB:.0f} MiB before any data)"
            f"{need}; give the workers more memory (--memory-limit / memory_limit)"
        )

    def _wait_futures(self, futs, what):
        """``distributed.wait`` bounded by the scheduler's liveness and the workers' restarts."""
        while True:
            try:
                wait(futs, timeout=limits.BUILD_POLL_S)
                return
            except TimeoutError:
                pass
            self._check_scheduler()
            restarts = self._memory_restarts()
            if len(restarts) >= limits.BUILD_RESTARTS:
                raise self._memory_error(None, restarts, f"while {what}, before building")

    def _check_scheduler(self):
        status = getattr(self.client, "status", "running")
        if status not in ("running", "newly-created"):
            raise SchedulerLostError(
                f"the Dask scheduler {self._scheduler_address()} is lost: the client's connection "
                f"to it is {status!r}; the partitions' state went with it, so the fit cannot go "
                f"on (start it again, with --checkpoint / checkpoint= to resume from the last "
                f"checkpoint)"
            )

    def _scheduler_address(self):
        try:
            return self.client.scheduler.address
        except Exception:  # noqa: BLE001 - only for the message
            return "(unknown address)"

    def _live_workers(self) -> dict:
        """The scheduler's running workers now (one request, bounded)."""
        self._check_scheduler()
        c = self.client
        try:
            info = c.sync(
                c.scheduler.identity, callback_timeout=limits.CALL_TIMEOUT_S, **self._info_kw
            )
        except (OSError, TimeoutError) as e:
            self._check_scheduler()
            raise SchedulerLostError(
                f"the Dask scheduler {self._scheduler_address()} did not answer within "
                f"{limits.CALL_TIMEOUT_S:.0f} s ({e!r}); the fit cannot go on"
            ) from e
        every = info.get("workers", {})
        workers = {a: w for a, w in every.items() if w.get("status", "running") == "running"}
        # the others (paused for memory, closing), named when a wait for a worker ends
        self._not_running = {a: str(w.get("status")) for a, w in every.items() if a not in workers}
        self.worker_info.update(workers)
        return workers

    def _wait_for_worker(self, g, what):
        """A live worker for group ``g`` (the least loaded; not one whose connection broke
        unless the scheduler has replaced it since), waiting up to ``recover_timeout``."""
        t0 = time.monotonic()
        k = self.groups[g][0]
        mine = set(self.groups[g])
        while True:
            alive = sorted(a for a in self._live_workers() if not self._is_suspect(a))
            if alive:
                counts = {
                    w: sum(p == w for i, p in enumerate(self.placement) if i not in mine)
                    for w in alive
                }
                return min(alive, key=lambda a: (counts[a], a))
            if time.monotonic() - t0 > self.recover_timeout:
                raise RuntimeError(
                    f"no Dask worker is left {what} partition {k} (its worker "
                    f"{self.placement[k]} died); waited {self.recover_timeout:.0f} s for one "
                    f"to join{self._not_running_note()}"
                )
            time.sleep(0.5)

    def _not_running_note(self) -> str:
        """The workers the scheduler knows but does not count as running, and why (a worker
        pauses when its memory passes distributed.worker.memory.pause), or those whose
        connection broke: what a failed wait for a worker tells the user beside its timeout."""
        why = {a: f"status {status!r}" for a, status in self._not_running.items()}
        why.update({a: "its connection broke" for a in self._suspect if self._is_suspect(a)})
        if not why:
            return ""
        return "; the scheduler has " + ", ".join(f"{a} ({w})" for a, w in sorted(why.items()))

    def _is_lost(self, k) -> bool:
        """Whether the scheduler has removed partition ``k``'s worker since it was placed there
        (pushed by the scheduler: no request per round)."""
        return self._watch.removed.get(self.placement[k], 0) != self._gen[k]

    def _group_lost(self, g) -> bool:
        """Whether group ``g``'s worker (the one all its partitions live on) is gone."""
        return self._is_lost(self.groups[g][0])

    def _worker_of(self, g) -> str:
        """The worker group ``g``'s partitions live on."""
        return self.placement[self.groups[g][0]]

    def _confirm_lost(self, g, err) -> bool:
        """After a failed call: whether group ``g``'s worker is gone (the scheduler says so
        within a few seconds, or the connection broke)."""
        deadline = time.monotonic() + limits.ACTOR_POLL_S
        while time.monotonic() < deadline:
            if self._group_lost(g):
                return True
            time.sleep(0.1)
        if isinstance(err, OSError):
            a = self._worker_of(g)
            self._suspect[a] = self._watch.removed.get(a, 0)
            return True
        return False

    def _is_suspect(self, a) -> bool:
        """A worker whose connection broke and that the scheduler has not replaced since."""
        return a in self._suspect and self._suspect[a] == self._watch.removed.get(a, 0)
