"""How a call reaches the workers' groups and how their replies come back: direct or down a tree.

Actor calls go straight from the client to the workers when they are reachable; a ``Client`` left
at its default ``direct_to_workers=None`` would otherwise relay each call and reply through the
scheduler, a second hop each way.  From ``TREE_MIN_GROUPS`` workers on, a round goes to one worker
only and travels down a binary tree of workers, the replies merging on the way back
(:meth:`~dmcsvm.engine.worker_group.WorkerGroup.tree_step`).  Either way each worker gets one
message and sends one reply, each one opaque frame
(:func:`~dmcsvm.engine.messages.pack_message`): Dask then ships a single buffer instead of
serializing a dict of arrays array by array.  A call to a group whose worker is gone answers
:data:`LOST`, which :meth:`Routing._result` turns into a rebuild (:mod:`.recovery`) or an error.
See docs/design.md, 'Architecture: coordinator, partitions, rounds'."""

from __future__ import annotations

import asyncio
import contextlib
import pickle

from . import limits


class _Lost:
    """Stands for the reply of a partition whose worker is known to be gone."""


#: the reply of a group whose worker is known to be gone
LOST = _Lost()


class Routing:
    """Calls to the groups and their replies (a mixin of :class:`~.executor.DaskExecutor`).

    Reads ``client``, ``direct``, ``tree``, ``parts``, ``recover``; counts ``bytes_sent`` and
    ``bytes_received``; asks :class:`~.liveness.Liveness` whether a worker is gone and
    :class:`~.recovery.Recovery` to rebuild a group that is."""

    def _direct_route(self, addresses) -> bool:
        """Whether actor calls can skip the scheduler.  A client that chose
        (``direct_to_workers`` True or False) or an explicit ``direct`` is obeyed; otherwise every
        worker is asked once, directly, and any that does not answer in time (a client outside the
        cluster's network) keeps the calls relayed."""
        if self.direct is not None:
            return bool(self.direct)
        if self.client.direct_to_workers is not None:
            return bool(self.client.direct_to_workers)

        async def reach():
            for a in sorted(set(addresses)):
                await asyncio.wait_for(self.client.rpc(a).identity(), limits.REACH_TIMEOUT_S)

        try:
            self.client.sync(reach)
            return True
        except (OSError, TimeoutError):
            return False

    @contextlib.contextmanager
    def _calls(self):
        """Context for talking to the partitions: actor handles talk through the *current*
        client, so make it ours (not whichever client the user created last, else a call waits
        forever on another cluster), and route actor calls as :meth:`_direct_route` decided.  An
        actor handle reads ``direct_to_workers`` of that client when it sends a call; a client at
        its default (None) gets our choice for the duration of the call only."""
        c = self.client
        flip = bool(self.direct) and c.direct_to_workers is None
        if flip:
            c.direct_to_workers = True
        try:
            with c.as_current():
                yield
        finally:
            if flip:
                c.direct_to_workers = None

    def uses_tree(self) -> bool:
        """Whether a round goes down the broadcast / reduction tree (``tree``; 'auto': from
        ``limits.TREE_MIN_GROUPS`` workers on)."""
        if len(self.parts) < 2:
            return False
        if self.tree == "auto":
            return len(self.parts) >= limits.TREE_MIN_GROUPS
        return bool(self.tree)

    def _subtree(self, g) -> tuple:
        """Group ``g``'s node of the binary tree over the groups (children ``2g+1``, ``2g+2``):
        ``(address, actor key, children's nodes, groups of the subtree)``."""
        kids = [self._subtree(c) for c in (2 * g + 1, 2 * g + 2) if c < len(self.parts)]
        below = [g] + [x for kid in kids for x in kid[3]]
        return self._worker_of(g), self.parts[g].key, kids, below

    def _send(self, g, name, *args):
        """Call ``name`` on group ``g``'s actor, or :data:`LOST` when its worker is gone."""
        if self._group_lost(g):
            return LOST
        try:
            return getattr(self.parts[g], name)(*args)
        except RuntimeError:  # "Worker holding Actor was lost": its key is not in memory
            self._check_scheduler()
            return LOST

    def _result(self, g, f, op):
        """The reply of group ``g`` to ``op``; a group lost with its worker is rebuilt
        (``recover``) and answers ``op``, else a clear error.  Bounded: the wait checks every
        ``limits.ACTOR_POLL_S`` that the scheduler and the group's worker are still there."""
        while True:
            if f is LOST:
                if not self.recover:
                    raise self._lost(self.groups[g][0])
                return self._recover(g, op)
            try:
                return f.result(timeout=limits.ACTOR_POLL_S)
            except TimeoutError:
                self._check_scheduler()
                if self._group_lost(g):
                    f = LOST
            except Exception as e:  # noqa: BLE001 - decided below: lost worker or real error
                self._check_scheduler()
                if not self._confirm_lost(g, e):
                    raise
                f = LOST

    def _gather(self, futs, op, groups=None) -> dict:
        """``{group: reply}`` of the calls ``futs`` made to ``groups`` (default: all)."""
        groups = range(len(self.parts)) if groups is None else groups
        out = {g: self._result(g, f, op) for g, f in zip(groups, futs, strict=False)}
        # a worker removed while its reply was in flight may have answered from a group the
        # scheduler re-created empty: answer from the coordinator's state instead
        for g in out:
            if self._group_lost(g) and self.recover:
                out[g] = self._recover(g, op)
        return out

    def _tree_round(self, op):
        """One round down the tree: the replies of every group as lists of ``(partition,
        reply)``, the groups the tree could not reach asked directly (a group that applied the
        round answers from memory; a lost one is rebuilt).  None when the root itself failed or
        a worker left during the round: the caller then asks every group directly."""
        _, blob, seq = op
        self.bytes_sent += len(blob)
        node = self._subtree(0)
        f = self._send(0, "tree_step", blob, seq, node[2])
        if f is LOST:
            return None
        while True:
            try:
                got, lost = self._loads(f.result(timeout=limits.ACTOR_POLL_S))
                break
            except TimeoutError:
                self._check_scheduler()
                if any(self._group_lost(g) for g in range(len(self.parts))):
                    return None
            except Exception:  # noqa: BLE001 - the root is gone or failed: ask every group
                self._check_scheduler()
                return None
        out = [got]
        if lost:
            self.bytes_sent += len(blob) * len(lost)
            futs = [self._send(g, "step_packed", *op[1:]) for g in lost]
            out += [self._loads(r) for r in self._gather(futs, op, lost).values()]
        return out

    def _loads(self, blob: bytes):
        """A group's pickled reply, its bytes counted."""
        self.bytes_received += len(blob)
        return pickle.loads(blob)
