"""Which X rows every worker's row bank holds, so that a round's message leaves them out.

Each :class:`~dmcsvm.engine.worker_group.WorkerGroup` banks the X rows of the batches it applied
(a :class:`~dmcsvm.engine.row_bank.RowBank`, pruned as the coordinator prunes its own); the
executor mirrors what every group holds in one :class:`~dmcsvm.engine.messages.HeldIds`, and
:func:`~dmcsvm.engine.messages.pack_message` leaves those rows out of ``XB``.  A batch is mostly
support patterns that were in earlier batches, and ``XB`` is most of a round's message on wide
data.  The mirror is forgotten whenever a group is rebuilt (its bank starts empty)."""

from __future__ import annotations

import numpy as np

from ..messages import HeldIds, has_batch


class HeldRows:
    """The coordinator's mirror of the groups' row banks (a mixin of
    :class:`~.executor.DaskExecutor`).

    Reads ``bank_rows`` and ``recoveries``; keeps ``_held`` and ``_held_at`` and counts
    ``rows_sent`` and ``rows_held``."""

    def _held_now(self) -> HeldIds:
        """What every group banks; forgotten when a group was rebuilt (its bank starts empty)."""
        if len(self.recoveries) != self._held_at:
            self._held.clear()
            self._held_at = len(self.recoveries)
        return self._held

    def _held_rows(self, msg):
        """The batch rows of ``msg`` every group banks (:meth:`HeldIds.rows`), counted."""
        have = self._held_now().rows(msg) if self.bank_rows else None
        if has_batch(msg) and msg.XB is not None:
            n_have = 0 if have is None else int(np.count_nonzero(have))
            self.rows_held += n_have
            self.rows_sent += len(msg.ids) - n_have
        return have

    def _banked(self, msg) -> None:
        """After a round every group answered: the rows their banks now hold.  A group rebuilt
        during the round applied only the report-only fields, so its bank holds nothing yet."""
        if self.bank_rows and self._held_at == len(self.recoveries):
            self._held.applied(msg)
        else:
            self._held_now()
