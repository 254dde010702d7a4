"""Checkpoints of a running solve, and resuming from them (docs/design.md, 'State that must
survive').

What survives is what the coordinator owns: the coefficients ``B`` (sparse in rows: the ids of
the support patterns and their rows), the X rows of those patterns, the assignment of patterns to
prototypes, the round counter, the history, the RNG state and the settings.  Every partition's
scores are rebuilt from them on resume, ``F_part = K(X_part, X_SV) @ B_SV``, by sending the
support patterns as the first message of the resumed solve.

Layout: the checkpoint directory holds complete zarr groups ``ckpt-<round>.zarr`` and a file
``LATEST`` naming the newest.  A group is written under a temporary name and renamed into place,
then ``LATEST`` is replaced (``os.replace``) and older groups are removed, so a process killed at
any moment leaves the previous checkpoint intact.  Each group::

    attrs  {"format": "dmcsvm-checkpoint", "format_version": 2, "rounds": r, "n": n, "P": P,
            "n_features": d, "sparse": bool, "settings": {...}, "rng": {...} or null,
            "history_keys": [...], "extra": {...}, "checksums": {array: crc32}}

``settings`` holds the estimator's parameters (less the runtime ones) and ``data_fingerprint``, a
hash of the training rows and labels (:func:`data_fingerprint`): a resume onto other data, even
of the same shape, is refused.  Every array's crc32 is checked on load, so a deleted or damaged
chunk (which zarr would read as zeros) is an error naming the file.
    ids (n_SV,) int64; B (n_SV, P) float64; X (n_SV, d) or X_data/X_indices/X_indptr (CSR);
    assign (n,) int64 (optional); history (rounds, len(history_keys)) float64;
    pending_ids, pending_dB, pending_X (or its CSR triplet): the batch chosen in the checkpointed
    round, already in B but not yet sent to the partitions; pending_scores_ids and
    pending_scores_F (optional): its working set's scores after the solve;
    part-<k>.npz: each partition's scores, B rows, active set and shrinking counters, written by
    the partition itself (Partition.save_state; attrs "partition_bounds" lists their rows)

A resume onto the same partition bounds loads those states and sends the pending batch, which
continues the solve exactly where it stopped: the same rounds and coefficients as an
uninterrupted run.  With other bounds (another ``n_partitions``), or partition files that the
coordinator cannot see (workers writing to disks of their own), the partitions are rebuilt from the
support coefficients instead, ``F = K(X, X_SV) B_SV``: the same optimum to ``tol``, reached by
other rounds (scores differ in the last bits and shrinking starts over), with a warning.

This module is the file format (arrays, checksums, fingerprint, metadata) and knows no solver:
:mod:`dmcsvm.coordinators.resume` rebuilds the coordinator's state from a checkpoint and
:mod:`dmcsvm.estimators._checkpoint` (``CheckpointSession``) wires both into an estimator's fit.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from .file_modes import atomic_file, default_mode

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_VERSION",
    "Checkpointer",
    "Checkpoint",
    "load_checkpoint",
    "has_checkpoint",
    "restore_rng",
    "parse_every",
    "data_fingerprint",
]

CHECKPOINT_FORMAT = "dmcsvm-checkpoint"
CHECKPOINT_VERSION = 2
"""Version written: 2 adds a checksum of every array and the data's fingerprint; 1 is still read."""
_GROUP = re.compile(r"^ckpt-(\d+)\.zarr$")


def parse_every(every):
    """``(rounds, seconds)`` from ``checkpoint_every``: an int of rounds or a string ``"30s"``.

    Raises
    ------
    ValueError
        For anything else (the message names the value).
    """
    if isinstance(every, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*s\s*", every)
        if m and float(m.group(1)) > 0:
            return None, float(m.group(1))
    elif not isinstance(every, bool) and isinstance(every, (int, np.integer)) and every >= 1:
        return int(every), None
    raise ValueError(
        f"checkpoint_every must be a number of rounds >= 1 or seconds like '30s', got {every!r}"
    )


def _jsonable(v):
    """Settings values as plain JSON (numbers, strings, bools, None; others by repr)."""
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if np.isfinite(v) else repr(v)
    return repr(v)


def _rng_state(rng):
    if rng is None:
        return None
    if isinstance(rng, np.random.Generator):
        return {"kind": "Generator", "state": rng.bit_generator.state}
    if isinstance(rng, np.random.RandomState):
        name, keys, pos, has_gauss, cached = rng.get_state()
        return {
            "kind": "RandomState",
            "state": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
        }
    raise ValueError(f"cannot checkpoint a random state of type {type(rng).__name__}")


def restore_rng(rng, saved):
    """Set ``rng`` (Generator or RandomState) to a state saved in a checkpoint."""
    if saved is None:
        return rng
    if saved["kind"] == "Generator":
        rng.bit_generator.state = saved["state"]
    else:
        name, keys, pos, has_gauss, cached = saved["state"]
        rng.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    return rng


# ---------------------------------------------------------------------------------- writing


class Checkpointer:
    """Writes checkpoints of a solve every ``every_rounds`` rounds and/or ``every_seconds``.

    Its ``__call__(rounds, state)`` fits :func:`dmcsvm.coordinators.crammer_singer.solve`'s
    ``on_round(rounds, B)`` hook: pass the :class:`CoordinatorState` itself, or bind one first
    with :meth:`bind` (then the ``B`` that ``solve`` passes is ignored in favour of the state).

    Parameters
    ----------
    directory : str or os.PathLike
        Where the checkpoint groups go (created when missing).
    every_rounds : int, optional
        Write when this many rounds passed since the last checkpoint.
    every_seconds : float, optional
        Write when this much time passed since the last checkpoint.
    settings : dict, optional
        Settings recorded with every checkpoint (compared on resume).
    keep : int, default=1
        Complete checkpoints kept (the newest).
    """

    def __init__(self, directory, every_rounds=None, every_seconds=None, settings=None, keep=1):
        if every_rounds is None and every_seconds is None:
            raise ValueError("Checkpointer needs every_rounds or every_seconds")
        self.directory = os.path.abspath(os.fspath(directory))
        self.every_rounds = every_rounds
        self.every_seconds = every_seconds
        self.settings = {k: _jsonable(v) for k, v in (settings or {}).items()}
        self.keep = max(1, int(keep))
        self.state = None
        self.assign = None
        self.rng = None
        self.extra = {}
        self.n_features = None
        self.executor = None
        self.sparse = False
        self.x_dtype = np.float64
        self._last_rounds = None
        self._last_time = time.monotonic()
        self.n_written = 0

    def bind(
        self,
        state,
        *,
        n_features,
        sparse,
        x_dtype=np.float64,
        assign=None,
        rng=None,
        extra=None,
        start_rounds=None,
        executor=None,
    ):
        """Attach the coordinator state (and optionally the assignment, the RNG, and the executor
        whose partitions save their own state beside each checkpoint) to checkpoint."""
        self.state = state
        self.executor = executor
        self.n_features, self.sparse, self.x_dtype = int(n_features), bool(sparse), x_dtype
        self.assign, self.rng, self.extra = assign, rng, dict(extra or {})
        self._last_rounds = state.rounds if start_rounds is None else start_rounds
        self._last_time = time.monotonic()
        return self

    def __call__(self, rounds, state=None):
        st = state if hasattr(state, "bank") else self.state
        if st is None:
            raise ValueError("Checkpointer has no CoordinatorState: call bind() or pass the state")
        last = self._last_rounds if self._last_rounds is not None else 0
        due = (self.every_rounds is not None and rounds - last >= self.every_rounds) or (
            self.every_seconds is not None
            and time.monotonic() - self._last_time >= self.every_seconds
        )
        if due:
            self.write(rounds, st)

    def write(self, rounds, state):
        """Write one checkpoint of ``state`` after ``rounds`` rounds, atomically."""
        import zarr

        os.makedirs(self.directory, exist_ok=True)
        B = state.B
        ids = state.support().astype(np.int64)
        Xsv = state.bank.stack(ids, self.n_features, self.sparse, self.x_dtype)
        name = f"ckpt-{int(rounds):09d}.zarr"
        final = os.path.join(self.directory, name)
        tmp = tempfile.mkdtemp(dir=self.directory, prefix=f".{name}.tmp-")
        try:
            os.chmod(tmp, default_mode(directory=True))  # not mkdtemp's private 0700
            g = zarr.open_group(tmp, mode="w", zarr_format=3)
            sums: dict = {}
            _put(g, "ids", ids, sums)
            _put(g, "B", np.ascontiguousarray(B[ids], dtype=np.float64), sums)
            self._put_rows(g, "X", Xsv, sums)
            if self.assign is not None:
                _put(g, "assign", np.asarray(self.assign, dtype=np.int64), sums)
            # the pending round message (its ids, XB, dB, shrink_margin and the working set's
            # scores), or None
            pending = getattr(state, "pending", None)
            part_bounds = None
            if getattr(pending, "ids", None) is not None and self.executor is not None:
                _put(g, "pending_ids", np.asarray(pending.ids, dtype=np.int64), sums)
                _put(g, "pending_dB", np.asarray(pending.dB, dtype=np.float64), sums)
                self._put_rows(g, "pending_X", pending.XB, sums)
                if pending.scores is not None:  # the working set's scores (RoundMessage.scores)
                    sc = pending.scores
                    _put(g, "pending_scores_ids", np.asarray(sc["ids"], dtype=np.int64), sums)
                    _put(g, "pending_scores_F", np.asarray(sc["F"], dtype=np.float64), sums)
                # every partition writes its own state into the group (in parallel, on its
                # worker): the coordinator never holds the n x P scores
                part_bounds = [
                    [int(lo), int(hi)] for _, lo, hi in self.executor.call("save_state", tmp)
                ]
            hist = state.history
            keys = list(hist)
            if keys:  # one (rounds x keys) array: one write, not one a key
                _put(
                    g,
                    "history",
                    np.column_stack([np.asarray(hist[k], dtype=np.float64) for k in keys]),
                    sums,
                )
            g.attrs.update(
                {
                    "format": CHECKPOINT_FORMAT,
                    "format_version": CHECKPOINT_VERSION,
                    "rounds": int(rounds),
                    "n": int(B.shape[0]),
                    "P": int(B.shape[1]),
                    "n_features": self.n_features,
                    "sparse": self.sparse,
                    "x_dtype": np.dtype(self.x_dtype).str,
                    "settings": self.settings,
                    "rng": _rng_state(self.rng),
                    "history_keys": keys,
                    "extra": json.loads(json.dumps(self.extra, default=_jsonable)),
                    "checksums": sums,
                    "partition_bounds": part_bounds,
                    "pending_shrink_margin": _jsonable(pending.shrink_margin)
                    if part_bounds is not None
                    else None,
                    "written_at": time.time(),
                }
            )
            if os.path.exists(final):
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        _write_text_atomic(os.path.join(self.directory, "LATEST"), name + "\n")
        self._prune(name)
        self._last_rounds = int(rounds)
        self._last_time = time.monotonic()
        self.n_written += 1
        return final

    def _put_rows(self, g, name, X, sums):
        """X rows as one dense array ``name`` or the CSR triplet ``name_data/_indices/_indptr``."""
        if self.sparse:
            Xc = sp.csr_matrix(X)
            _put(g, f"{name}_data", Xc.data, sums)
            _put(g, f"{name}_indices", Xc.indices.astype(np.int64), sums)
            _put(g, f"{name}_indptr", Xc.indptr.astype(np.int64), sums)
        else:
            _put(g, name, np.ascontiguousarray(X), sums)

    def _prune(self, newest):
        groups = sorted(f for f in os.listdir(self.directory) if _GROUP.match(f))
        older = [g for g in groups if g != newest]
        for g in older[: max(0, len(groups) - self.keep)]:
            shutil.rmtree(os.path.join(self.directory, g), ignore_errors=True)


def _put(g, name, a, checksums=None):
    a = np.ascontiguousarray(a)
    arr = g.create_array(
        name,
        shape=a.shape,
        dtype=a.dtype,
        chunks=tuple(max(1, s) for s in a.shape),
        config={"write_empty_chunks": True},
    )
    if a.size:
        arr[...] = a
    if checksums is not None:
        checksums[name] = int(_crc(a))


def _write_text_atomic(path, text):
    with atomic_file(path) as fh:
        fh.write(text)


# ---------------------------------------------------------------------------------- reading


@dataclass
class Checkpoint:
    """A validated checkpoint (see :func:`load_checkpoint`)."""

    path: str
    rounds: int
    n: int
    P: int
    n_features: int
    sparse: bool
    ids: np.ndarray
    B: np.ndarray
    X: object
    history: dict
    settings: dict
    rng: dict | None = None
    assign: np.ndarray | None = None
    extra: dict = field(default_factory=dict)
    #: the batch chosen in the checkpointed round and not yet sent: ids, XB, dB, shrink_margin
    pending: dict | None = None
    #: rows of each partition whose state file is in the group (None: none were saved)
    partition_bounds: list | None = None


def _latest_group(directory):
    latest = os.path.join(directory, "LATEST")
    if os.path.isfile(latest):
        with open(latest) as fh:
            name = fh.read().strip()
        if _GROUP.match(name) and os.path.isdir(os.path.join(directory, name)):
            return os.path.join(directory, name)
    groups = sorted(f for f in os.listdir(directory) if _GROUP.match(f))
    if groups:  # LATEST lost or stale: the newest complete group (complete ones are renamed in)
        return os.path.join(directory, groups[-1])
    return None


def has_checkpoint(directory) -> bool:
    """Whether ``directory`` holds at least one complete checkpoint."""
    directory = os.fspath(directory)
    return os.path.isdir(directory) and _latest_group(directory) is not None


def load_checkpoint(directory) -> Checkpoint:
    """Read and validate the newest checkpoint in ``directory``.

    Raises
    ------
    ValueError
        When the directory holds no checkpoint, a foreign group, a newer format version, or
        arrays whose shapes disagree with the attributes.
    """
    import zarr

    directory = os.path.abspath(os.fspath(directory))
    if not os.path.isdir(directory):
        raise ValueError(f"{directory}: no checkpoint (the directory does not exist)")
    path = _latest_group(directory)
    if path is None:
        raise ValueError(f"{directory}: no checkpoint in this directory")
    try:
        g = zarr.open_group(path, mode="r")
        a = dict(g.attrs)
    except Exception as e:
        raise ValueError(f"{path} is not a dmcsvm checkpoint: {e}") from None
    if a.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not a dmcsvm checkpoint (format {a.get('format')!r})")
    v = a.get("format_version")
    if v not in (1, CHECKPOINT_VERSION):
        raise ValueError(
            f"{path} has checkpoint format_version {v!r}; this dmcsvm reads "
            f"versions 1 and {CHECKPOINT_VERSION}"
        )
    sums = a.get("checksums")
    if v >= 2 and not isinstance(sums, dict):
        raise ValueError(f"{path} is not a valid dmcsvm checkpoint: its checksums are missing")

    def arr(name):
        try:
            node = g[name]
        except KeyError:
            raise ValueError(f"{path} is missing array {name!r}") from None
        try:
            out = np.asarray(node[...])
        except Exception as e:  # noqa: BLE001 - codec errors of a damaged chunk
            raise ValueError(
                f"{path}: array {name!r} cannot be read (damaged: {type(e).__name__}: {e})"
            ) from None
        if sums is not None and int(_crc(out)) != sums.get(name):
            raise ValueError(
                f"{path}: array {name!r} fails its checksum (a chunk file is missing or damaged)"
            )
        return out

    try:
        n, P, d, sparse = int(a["n"]), int(a["P"]), int(a["n_features"]), bool(a["sparse"])
        rounds = int(a["rounds"])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"{path} is missing its n/P/n_features/sparse/rounds attributes") from None
    ids = arr("ids")
    B = arr("B")
    k = ids.shape[0]
    if B.shape != (k, P):
        raise ValueError(f"{path}: B has shape {B.shape}, expected ({k}, {P})")
    if k and (ids.min() < 0 or ids.max() >= n or np.any(np.diff(ids) <= 0)):
        raise ValueError(f"{path}: support ids are not increasing ids in [0, {n})")

    def rows(name, count):
        if sparse:
            return sp.csr_matrix(
                (arr(f"{name}_data"), arr(f"{name}_indices"), arr(f"{name}_indptr")),
                shape=(count, d),
            )
        out = arr(name)
        if out.shape != (count, d):
            raise ValueError(f"{path}: {name} has shape {out.shape}, expected ({count}, {d})")
        return out

    X = rows("X", k)
    pending = None
    bounds = a.get("partition_bounds")
    if bounds is not None:
        pids = arr("pending_ids")
        pdB = arr("pending_dB")
        if pdB.shape != (pids.shape[0], P) or (pids.size and (pids.min() < 0 or pids.max() >= n)):
            raise ValueError(f"{path}: the pending batch has ids or dB of the wrong shape")
        margin = a.get("pending_shrink_margin")
        pending = {
            "ids": pids,
            "XB": rows("pending_X", pids.shape[0]),
            "dB": pdB,
            "shrink_margin": float(margin) if margin is not None else np.inf,
        }
        if "pending_scores_ids" in g:  # (optional: the working set's scores came with it)
            sids, sF = arr("pending_scores_ids"), arr("pending_scores_F")
            bad_ids = sids.size and (sids.min() < 0 or sids.max() >= n)
            if sF.shape != (sids.shape[0], P) or bad_ids:
                raise ValueError(f"{path}: the pending scores have ids or F of the wrong shape")
            pending["scores"] = {"ids": sids, "F": sF}
    keys = list(a.get("history_keys", []))
    history = {}
    if keys:
        H = arr("history")
        if H.ndim != 2 or H.shape[1] != len(keys):
            raise ValueError(f"{path}: history has shape {H.shape} for {len(keys)} keys")
        history = {k: H[:, j].tolist() for j, k in enumerate(keys)}
    assign = arr("assign") if "assign" in g else None
    if assign is not None and assign.shape != (n,):
        raise ValueError(f"{path}: assign has shape {assign.shape}, expected ({n},)")
    return Checkpoint(
        path=path,
        rounds=rounds,
        n=n,
        P=P,
        n_features=d,
        sparse=sparse,
        ids=ids,
        B=B,
        X=X,
        history=history,
        settings=dict(a.get("settings") or {}),
        rng=a.get("rng"),
        assign=assign,
        extra=dict(a.get("extra") or {}),
        pending=pending,
        partition_bounds=[tuple(b) for b in bounds] if bounds else None,
    )


def data_fingerprint(X, y_idx) -> str:
    """A hash (blake2b, 128 bits, hex) of the training rows and labels, read in row blocks.

    Arrays and CSR matrices hash their values; a zarr store its rows chunk by chunk (every chunk
    checked as any read is); a dask array its graph token (computing it would cost a pass over
    the cluster's data).  Two data sets of the same shape but other values, other row order or
    permuted columns give different fingerprints."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for block in label_blocks(y_idx):
        h.update(block.tobytes())

    def add(block):
        if sp.issparse(block):
            c = sp.csr_matrix(block)
            for part in (c.indptr.astype(np.int64), c.indices.astype(np.int64), c.data):
                h.update(np.ascontiguousarray(part).tobytes())
        else:
            h.update(np.ascontiguousarray(block).tobytes())

    h.update(repr(tuple(int(s) for s in X.shape)).encode())
    if isinstance(X, np.ndarray) or sp.issparse(X):
        step = max(1, (16 << 20) // max(1, 8 * X.shape[1]))
        for lo in range(0, X.shape[0], step):
            add(X[lo : lo + step])
    elif hasattr(X, "url"):
        from .store import iter_chunks, open_store

        for _, _, Xc, _ in iter_chunks(open_store(X.url)):
            add(Xc)
    elif hasattr(X, "array"):
        from dask.base import tokenize

        h.update(tokenize(X.array).encode())
    else:
        raise ValueError(f"cannot fingerprint training data of type {type(X).__name__}")
    return h.hexdigest()


def _crc(a):
    import zlib

    return zlib.crc32(np.ascontiguousarray(a))


def labels_crc32(y_idx) -> int:
    """CRC-32 of the int64 class index, computed block by block (the same value as over the
    whole array)."""
    import zlib

    crc = 0
    for block in label_blocks(y_idx):
        crc = zlib.crc32(block, crc)
    return crc


def label_blocks(y_idx, rows=1 << 20):
    """The int64 class index in row blocks: a store's (:class:`~dmcsvm.store.class_index.
    StoreClassIndex`) is read a block at a time, never whole on the coordinator."""
    n = len(y_idx)
    if isinstance(y_idx, np.ndarray):
        yield np.ascontiguousarray(y_idx, dtype=np.int64)
        return
    for a in range(0, n, rows):
        yield np.ascontiguousarray(y_idx[a : min(a + rows, n)], dtype=np.int64)
