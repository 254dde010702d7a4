"""All partitions of one Dask worker behind one actor, and the broadcast / reduction tree over them.

Why (benchmarks/results/scaling.md): with one actor per partition, a round costs the coordinator
one call, one copy of the round's message and one candidate list per *partition* -- 512 of each
on 32 workers x 16 cores, which the scaling model puts at 96 % of a round.  A :class:`WorkerGroup`
holds the partitions a worker owns and runs them on that worker's threads (numba and BLAS release
the GIL, as in the in-process executor), so a round costs one call and one message per *worker*,
and it cuts the partitions' candidate lists to what the coordinator can still pick
(:func:`~dmcsvm.engine.messages.prune_candidates`).  With ``tree`` the coordinator calls only the
root group; each group forwards the message to its children (worker to worker, over Dask's own
RPC to their actors) while its partitions run, and merges the children's replies into its own
before answering: the coordinator's link and CPU carry one message and one reply per round
whatever the number of workers.

Rounds are numbered.  A group remembers the replies of the last round it applied, so a round sent
again to a group that already applied it (a parent died before it could forward the children's
replies) is answered from that memory, bit for bit, without applying the update twice.

Each group banks the X rows of the batches it applied, pruned as the coordinator prunes its own
(the message's ``bank_ids``), so that a message carries only the batch rows no group has seen
(:func:`~dmcsvm.engine.messages.pack_message`); the executor tracks which rows every group holds.
"""

from __future__ import annotations

import asyncio
import pickle
import threading
from concurrent.futures import ThreadPoolExecutor

from .messages import (
    RoundMessage,
    banked_batch,
    pack_reply_rows,
    prune_candidates,
    report_only,
    unpack_message,
)
from .row_bank import RowBank

_PICKLE = pickle.HIGHEST_PROTOCOL


class WorkerGroup:
    """The partitions one worker owns, as one actor.

    Parameters
    ----------
    specs : list of (int, type, tuple)
        ``(k, partition_cls, args)`` per partition: its number and how to build it.
    n_threads : int
        Threads running the partitions of a round (the worker's threads).

    The replies' candidate X rows travel as their nonzeros when that is smaller
    (:func:`~dmcsvm.engine.messages.pack_reply_rows`; lossless).
    """

    def __init__(self, specs, n_threads: int = 1):
        self.parts = {int(k): cls(*args) for k, cls, args in specs}
        self.order = sorted(self.parts)
        n = min(max(1, int(n_threads)), len(self.order))
        self._pool = ThreadPoolExecutor(n) if n > 1 else None
        self._seq = None  # number of the last round applied
        self._last = None  # its replies [(k, reply)], before pruning, and its ``pick``
        self._lock = threading.Lock()  # a round sent again while it runs waits for it
        self._bank = RowBank()  # X rows of the batches applied (module docstring)

    # ---------------------------------------------------------------- rounds
    def _map(self, fn) -> list:
        parts = [self.parts[k] for k in self.order]
        if self._pool is None:
            return [fn(p) for p in parts]
        return list(self._pool.map(fn, parts))

    def _local(self, blob: bytes, seq: int, rebuilt: bool = False) -> tuple:
        """``(replies, pick)``: this group's replies ``[(k, reply)]`` to round ``seq``, unpruned,
        and the message's ``pick``; a round already applied is answered from memory.
        ``rebuilt``: the partitions were restored from the coordinator's state, which holds the
        round's update already (only its report-only fields apply)."""
        with self._lock:
            if seq != self._seq:
                msg = unpack_message(blob, self._bank, rows=not rebuilt)
                if rebuilt:
                    msg = report_only(msg)
                else:
                    self._bank_rows(msg)
                replies = list(zip(self.order, self._map(lambda p: p.step(msg)), strict=False))
                self._seq, self._last = seq, (replies, getattr(msg, "pick", None))
            return self._last

    def _bank_rows(self, msg) -> None:
        """Bank the message's dense X rows (:func:`banked_batch`), after pruning to the
        coordinator's ``bank_ids``; :class:`~dmcsvm.engine.messages.HeldIds` mirrors this."""
        if not isinstance(msg, RoundMessage):
            return
        if msg.bank_ids is not None:
            self._bank.keep(msg.bank_ids)
        if banked_batch(msg):
            self._bank.add(msg.ids, msg.XB)

    def step_packed(self, blob: bytes, seq: int, rebuilt: bool = False) -> bytes:
        """One round on this group's partitions: ``blob`` from
        :func:`~dmcsvm.engine.messages.pack_message`; the reply is the pickled list of
        ``(partition, reply)``, candidates pruned as the message's ``pick`` says
        (:func:`~dmcsvm.engine.messages.prune_candidates`), their X rows in wire form
        (:func:`~dmcsvm.engine.messages.pack_reply_rows`)."""
        replies, pick = self._local(blob, seq, rebuilt)
        return pickle.dumps(self._wire(prune_candidates(replies, pick)), protocol=_PICKLE)

    def _wire(self, replies) -> list:
        return pack_reply_rows(replies)

    def _own_wire(self, blob: bytes, seq: int) -> tuple:
        """This group's replies to round ``seq`` cut to what the coordinator can pick and in wire
        form, while the children's subtrees still run: only a leaf's packing is left on the
        round's critical path.  Cutting the union again later keeps the same candidates
        (:func:`~dmcsvm.engine.messages.prune_candidates`: a pick from the union is a pick from
        its own list)."""
        replies, pick = self._local(blob, seq)
        return self._wire(prune_candidates(replies, pick)), pick

    async def tree_step(self, blob: bytes, seq: int, children) -> bytes:
        """One round over the subtree rooted here.  ``children``: ``[(address, actor key,
        subtree children, group numbers of the subtree)]``.  The message goes to the children
        before this group's own partitions start; their replies are merged with this group's
        own.  Reply: pickled ``(replies, lost)``, ``lost`` being the groups of every subtree
        that did not answer (the coordinator asks those itself)."""
        from distributed.protocol import to_serialize
        from distributed.worker import get_worker

        worker = get_worker()

        async def forward(child):
            addr, key, sub, _ = child
            out = await worker.rpc(addr).actor_execute(
                actor=key,
                function="tree_step",
                args=[to_serialize(a) for a in (blob, seq, sub)],
                kwargs={},
            )
            if out.get("status") != "OK":
                raise RuntimeError(f"group {key} failed: {out.get('exception')!r}")
            return pickle.loads(out["result"])

        calls = [asyncio.ensure_future(forward(c)) for c in children]
        loop = asyncio.get_running_loop()
        own, pick = await loop.run_in_executor(None, self._own_wire, blob, seq)
        replies = list(own)
        lost: list = []
        for child, call in zip(children, calls, strict=False):
            try:
                got, gone = await call
            except Exception:  # noqa: BLE001 - a lost subtree: the coordinator asks it directly
                lost.extend(child[3])
                continue
            replies.extend(got)
            lost.extend(gone)
        # the children's candidate rows arrive packed and are cut packed (own: see _own_wire)
        return pickle.dumps((self._wire(prune_candidates(replies, pick)), lost), protocol=_PICKLE)

    # ---------------------------------------------------------------- other calls
    def call(self, name: str, args: tuple) -> list:
        """Method ``name`` of every partition of the group with ``args``; results in partition
        order."""
        return self._map(lambda p: getattr(p, name)(*args))

    def restore(self, snapshots: dict) -> list:
        """Restore each partition from its snapshot (``{partition: snapshot}``)."""
        return [self.parts[k].restore(snapshots[k]) for k in self.order if k in snapshots]

    def close(self) -> list:
        out = self.call("close", ())
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        return out
