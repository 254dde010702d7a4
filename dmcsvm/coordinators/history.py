"""The per-round history a solve keeps, bounded so that the coordinator's memory does not grow
with the number of rounds (docs/design.md, 'The coordinator's size').

Every round appends one row (a dict of scalars) to equal-length columns.  Up to ``limit`` rows
every round is kept; when a row would exceed it the history is thinned: every other row is
dropped, keeping the first and the newest, so that at most ``limit`` rows remain whatever the
number of rounds.  Older rounds thus end up at a coarser resolution than recent ones; the
``round`` column says which rounds the kept rows are.  ``dropped`` counts the rows thinned away.
"""

from __future__ import annotations

#: rows kept before thinning: 10,000 rounds of 22 columns stay under 10 MB as Python floats
HISTORY_LIMIT = 10_000


class RoundHistory(dict):
    """Columns of per-round values (``{key: list}``), at most ``limit`` rows long.

    A dict, so that code reading ``history[key]`` (checkpoints, ``history_``) is unchanged.
    ``tags`` are constant columns added to every row appended while they are set (for example
    MultiPrototypeSVC's ``epoch``).
    """

    def __init__(self, keys, limit: int | None = None):
        super().__init__((k, []) for k in keys)
        limit = HISTORY_LIMIT if limit is None else limit  # read now: tests lower it
        if int(limit) < 2:
            raise ValueError(f"history limit must be at least 2 rows, got {limit}")
        self.limit = int(limit)
        self.tags: dict = {}
        self.dropped = 0

    @property
    def n_rows(self) -> int:
        """Rows kept (every column has this length; ``len()`` stays the number of columns)."""
        return len(next(iter(self.values()), []))

    def append(self, row: dict) -> None:
        """Add one round's row (every key of the history, from ``row`` or ``tags``)."""
        for k, col in self.items():
            col.append(self.tags[k] if k in self.tags else row[k])
        if self.n_rows > self.limit:
            self.thin()

    def thin(self) -> None:
        """Drop every other row, keeping the first and the newest: ``limit // 2 + 1`` rows."""
        m = self.n_rows
        for col in self.values():
            col[:] = col[0 : m - 1 : 2] + col[m - 1 :]
        self.dropped += m - self.n_rows
