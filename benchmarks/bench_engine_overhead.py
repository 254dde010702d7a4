"""Cost of running dmcsvm's rounds on Dask: in-process threads vs LocalCluster actors.

The same ``MulticlassSVC(C=10, gamma=1)`` (defaults otherwise: ``batch_size=1000``, exact
optimizer, BMG + MEAN, shrinking, 200 MB cache) is trained on letter four ways in one run:

* ``inprocess``: ``client=None, n_jobs=2`` (two row partitions on a thread pool);
* ``actor``: ``client=`` a ``LocalCluster(n_workers=2, threads_per_worker=1, processes=True)``
  client, the estimator's default Dask path (:class:`~dmcsvm.engine.dask.DaskExecutor`
  in actor mode: one client-to-worker call per partition per round, sent straight to the worker:
  the executor checks at start that the client reaches the workers directly);
* ``actor_relayed``: the same actors with ``DaskExecutor(client, direct=False)``: every call and
  reply relayed through the scheduler's ``proxy`` handler, which is what a ``Client`` left at its
  default ``direct_to_workers=None`` does with actor calls (and what this executor did before it
  checked for a direct route); the benchmark swaps that executor in through the harness's
  executor hook (``_harness.executor_hook``; no engine code is changed);
* ``actor_notrim``: actors on a second LocalCluster whose workers do not get Dask's
  ``MALLOC_TRIM_THRESHOLD_=65536`` (``distributed.nanny.pre-spawn-environ``), i.e. glibc's
  default malloc as in the in-process run: with the threshold set, glibc hands every freed large
  block back to the OS, so each round's fresh kernel / Gram blocks are page-faulted in again.

Data: UCI letter, first 15000 rows train / last 5000 test, features scaled to [-1, 1] with the
training min/max, float32.  The cluster is started once (its start-up time is reported apart);
numba is warmed up (an untimed small fit in every mode, so the workers load their caches too)
before anything is timed; every timed fit is repeated ``--repeat`` times (modes interleaved so
that background load hits them alike) and min / median are reported.

Per-round split, from ``history_`` (summed over rounds, divided by the rounds):

* ``t_round``: the coordinator's wall time of a round;
* ``t_solve``: the coordinator's batch solve and selection bookkeeping (after the replies merged);
* ``t_parts``: the slowest partition's own work (``Partition.step`` timed on its worker);
  ``t_kernel`` / ``t_update`` / ``t_select``: its kernel columns, score GEMM and selection scan
  (each the slowest partition's);
* ``comm`` = ``t_round - t_solve - t_parts``: communication + scheduling (+ the coordinator's
  merge of the replies and any load imbalance hidden in the max).  A thin wrapper around the
  executor also times ``executor.step`` alone (``t_step``), so ``comm`` splits into
  ``transport`` = ``t_step - t_parts`` and ``merge`` = ``t_round - t_solve - t_step``, and counts
  the bytes of the arrays in every message and reply.

A probe then measures the round trip of each Dask mode without partition work: a call of a
partition method that ignores a message-shaped payload and returns a reply-shaped dict of
``b`` candidates (b = 0 / 100 / 1000 / 3000), which separates the fixed per-round latency from the
size-dependent part, and the time to serialize a message and a reply with Dask's serializer.
Two floors below dmcsvm put those numbers in scale: a blocking TCP ping-pong with two child
processes carrying the same bytes (no Dask), and Dask's own ``identity`` RPC to both workers.
A contention probe replays the default batch's round without dmcsvm (the coordinator's and the
partitions' measured busy times, the round's bytes) on 1 and on 2 workers, which shows what the
third busy process on a 2-core box costs each reply.

Goals (engine issue): fit-time ratio LocalCluster / in-process <= 1.25 and communication +
scheduling < 10 % of the round time at the default batch size.

Outputs: ``--out`` (JSON, default ``results/engine_overhead.json``), ``engine_overhead.md`` and
``engine_overhead.png`` (stacked per-round split) next to it.

Usage::

    # ~20 s: 1000 rows, 40 rounds, batches 1000,200
    python benchmarks/bench_engine_overhead.py --quick
    # letter 15000, batches 1000,100,3000
    python benchmarks/bench_engine_overhead.py
"""

from __future__ import annotations

import dataclasses
import pickle
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _data  # noqa: E402
import _report
from _harness import executor_hook  # noqa: E402

from dmcsvm import MulticlassSVC  # noqa: E402
from dmcsvm.engine.dask import DaskExecutor  # noqa: E402
from dmcsvm.engine.messages import CSReply, RoundMessage  # noqa: E402
from dmcsvm.engine.partition import Partition, PartitionSettings  # noqa: E402
from dmcsvm.numerics import pattern as pt  # noqa: E402

MODES = ("inprocess", "actor", "actor_relayed", "actor_notrim")
LABELS = {
    "inprocess": "in-process (2 threads)",
    "actor": "LocalCluster, actors",
    "actor_relayed": "LocalCluster, actors relayed by the scheduler",
    "actor_notrim": "LocalCluster (no MALLOC_TRIM_THRESHOLD_), actors",
}
SHORT = {
    "inprocess": "in-process",
    "actor": "actors",
    "actor_relayed": "actors,\nrelayed",
    "actor_notrim": "actors,\nno malloc trim",
}
C, GAMMA, N_JOBS, N_WORKERS = 10.0, 1.0, 2, 2
#: estimator parameters beyond the defaults (set in main: the on-disk column tier is switched off
#: for in-memory data unless --disk-cache-default, see the module docstring)
EXTRA_PARAMS: dict = {}
#: rounds of the one fit with the default on-disk column tier (slow: only its first rounds)
DISK_ROUNDS = 40
SPLIT_KEYS = ("t_round", "t_solve", "t_parts", "t_kernel", "t_update", "t_select")


# ------------------------------------------------------------------------------------------------
# executor wrapper: times executor.step and counts the bytes each round moves
# ------------------------------------------------------------------------------------------------


def _nbytes(obj) -> int:
    """Bytes of the numpy arrays (8 per Python scalar) in a message / reply."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if dataclasses.is_dataclass(obj):  # round messages and replies
        return sum(_nbytes(getattr(obj, f.name)) for f in dataclasses.fields(obj))
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    if hasattr(obj, "data") and hasattr(obj, "indices"):  # CSR
        return int(obj.data.nbytes + obj.indices.nbytes + obj.indptr.nbytes)
    return 8


class _Recorder:
    """Delegates to an executor; records per round the wall time of ``step`` and the bytes sent
    (the message once per partition: every partition gets its own copy) and received."""

    def __init__(self, executor):
        self._ex = executor
        self.t_step, self.bytes_out, self.bytes_in, self.wire_out = [], [], [], []
        self.dB_nnz, self.dB_size, self.cand_X_bytes = 0, 0, []
        self.t_start = None

    def __getattr__(self, name):
        return getattr(self._ex, name)

    def start(self, *args, **kw):
        t = time.perf_counter()
        self._ex.start(*args, **kw)
        self.t_start = time.perf_counter() - t
        return self

    def step(self, msg):
        t = time.perf_counter()
        sent = getattr(self._ex, "bytes_sent", None)
        replies = self._ex.step(msg)
        self.t_step.append(time.perf_counter() - t)
        self.bytes_out.append(_nbytes(msg) * len(replies))
        self.bytes_in.append(sum(_nbytes(r) for r in replies))
        # what an actor round actually sends, as the executor counted it while packing (no
        # second pickling inside the timed round); none in-process
        if sent is not None:
            self.wire_out.append(self._ex.bytes_sent - sent)
        self.cand_X_bytes.append(sum(_nbytes(r.cand_X) for r in replies))
        dB = getattr(msg, "dB", None)
        if dB is not None:
            self.dB_nnz += int(np.count_nonzero(dB))
            self.dB_size += int(dB.size)
        return replies

    def call(self, *args):
        return self._ex.call(*args)

    def close(self):
        return self._ex.close()


def _executor_mode(mode, recorders):
    """Make ``MulticlassSVC.fit`` use a recorded executor; ``mode='actor_relayed'`` swaps the
    executor the estimator builds for one whose calls the scheduler relays (benchmark only)."""

    def wrap(ex, est):
        if mode == "actor_relayed":
            ex = DaskExecutor(ex.client, est.n_partitions, direct=False)
        rec = _Recorder(ex)
        recorders.append(rec)
        return rec

    return executor_hook(wrap)


def _fit(mode, client, X, y, batch_size, max_iter=-1):
    """One ``MulticlassSVC.fit``; returns (estimator, fit seconds, recorder, warnings)."""
    recs = []
    est = MulticlassSVC(
        C=C,
        gamma=GAMMA,
        n_jobs=N_JOBS,
        max_iter=max_iter,
        client=None if mode == "inprocess" else client,
        solver_options={"batch_size": batch_size},
        **EXTRA_PARAMS,
    )
    with _executor_mode(mode, recs), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t = time.perf_counter()
        est.fit(X, y)
        t_fit = time.perf_counter() - t
    return est, t_fit, recs[0], [str(x.message) for x in w]


# ------------------------------------------------------------------------------------------------
# one timed fit -> record
# ------------------------------------------------------------------------------------------------


def _record(est, t_fit, rec, warn, Xte, yte):
    h = est.history_
    R = int(len(h["t_round"]))
    sums = {k: float(np.sum(h[k])) for k in SPLIT_KEYS}
    t_step = float(np.sum(rec.t_step[:R]))
    sums["comm"] = sums["t_round"] - sums["t_solve"] - sums["t_parts"]
    sums["transport"] = t_step - sums["t_parts"]
    sums["merge"] = sums["t_round"] - sums["t_solve"] - t_step
    pred = est.predict(Xte)
    return {
        "fit_s": t_fit,
        "solve_s": float(h["elapsed"][-1]),  # first round start .. last round end
        "executor_start_s": rec.t_start,  # scatter rows + create partitions
        "rounds": R,
        "converged": bool(est.converged_),
        "accuracy": float(np.mean(pred == yte)),
        "n_support": int(est.support_.shape[0]),
        "final_dual": float(h["dual"][-1]),
        "elapsed_at_round_40": float(h["elapsed"][min(DISK_ROUNDS, R) - 1]),
        "sum_s": sums,
        "per_round_ms": {k: 1e3 * v / R for k, v in sums.items()},
        "comm_share": sums["comm"] / sums["t_round"],
        "bytes_per_round": {
            "to_partitions": float(np.mean(rec.bytes_out[:R])),
            "from_partitions": float(np.mean(rec.bytes_in[:R])),
            "max_total": float(np.max(np.add(rec.bytes_out[:R], rec.bytes_in[:R]))),
            "cand_X_from_partitions": float(np.mean(rec.cand_X_bytes[:R])),
            "packed_to_partitions": float(np.mean(rec.wire_out[:R])) if rec.wire_out else None,
        },
        "direct_route": getattr(rec._ex, "direct", None),
        "dB_nonzero_fraction": rec.dB_nnz / max(rec.dB_size, 1),
        "warnings": warn,
        "_pred": pred,
        "_coef": est.dual_coef_,
        "_support": est.support_,
    }


def _disk_default_fit(Xtr, ytr, Xte, yte, max_iter):
    """One in-process fit at the default batch size with the estimator's *default*
    ``disk_cache_size`` (the on-disk column tier), its first ``max_iter`` rounds only, to compare
    with the same rounds of the memory-only runs."""
    saved = dict(EXTRA_PARAMS)
    EXTRA_PARAMS.clear()
    try:
        est, t_fit, rec, warn = _fit("inprocess", None, Xtr, ytr, 1000, max_iter)
    finally:
        EXTRA_PARAMS.update(saved)
    r = _record(est, t_fit, rec, warn, Xte, yte)
    stats = getattr(est, "engine_stats_", None)
    out = {k: v for k, v in r.items() if not k.startswith("_")}
    out["disk_cache_size"] = est.get_params().get("disk_cache_size")
    out["engine_stats"] = stats
    print(f"in-process with the default disk_cache_size: fit {t_fit:.2f} s", flush=True)
    return out


def _summary(recs):
    fits = [r["fit_s"] for r in recs]
    best = recs[int(np.argmin(fits))]
    out = {k: v for k, v in best.items() if not k.startswith("_")}
    out["fit_s_all"] = fits
    out["fit_s_min"] = min(fits)
    out["fit_s_median"] = statistics.median(fits)
    out["solve_s_all"] = [r["solve_s"] for r in recs]
    out["comm_share_all"] = [r["comm_share"] for r in recs]
    out["split_from"] = "the repeat with the smallest fit time"
    return out


def _agreement(ref, other):
    same_support = np.array_equal(ref["_support"], other["_support"])
    return {
        "same_predictions": bool(np.array_equal(ref["_pred"], other["_pred"])),
        "n_pred_differ": int(np.count_nonzero(ref["_pred"] != other["_pred"])),
        "same_rounds": ref["rounds"] == other["rounds"],
        "same_support": bool(same_support),
        "max_abs_coef_diff": float(np.max(np.abs(ref["_coef"] - other["_coef"])))
        if same_support
        else None,
        "accuracy_diff_points": 100 * (other["accuracy"] - ref["accuracy"]),
    }


# ------------------------------------------------------------------------------------------------
# round-trip probe: fixed latency vs payload size, without partition work
# ------------------------------------------------------------------------------------------------


class ProbePartition(Partition):
    """A partition that can answer a round without working: :meth:`probe` ignores its payload
    and returns a reply with ``n`` candidates."""

    def probe(self, payload, n, packed=False):
        if packed:  # the message came as one pickled blob; answer with one too
            pickle.loads(payload)
            return pickle.dumps(self.probe(None, n), protocol=5)
        crow = np.arange(min(n, self.F.shape[0]))
        return CSReply(
            part=self.part_id,
            cand_ids=(crow + self.lo).astype(np.int64),
            cand_V=self.kdiag[crow].copy(),
            cand_psi=self.kdiag[crow].copy(),
            cand_F=self.F[crow],
            cand_X=self.X[crow],
            cand_new=np.ones(crow.shape[0], dtype=bool),
            cand_kdiag=self.kdiag[crow],
            cand_yp=self.yp[crow],
            cand_cls=self.cls[crow],
        )


def _payload(b, d, P, rng):
    """A round message of a batch of ``b`` patterns (the arrays the coordinator sends)."""
    return RoundMessage(
        ids=rng.integers(0, 10**5, b).astype(np.int64),
        XB=rng.uniform(-1, 1, (b, d)).astype(np.float32),
        dB=rng.normal(size=(b, P)),
        shrink_margin=0.1,
    )


def _echo_child(port, reply_bytes):
    """Raw-socket floor (child process): answer every length-prefixed message with
    ``reply_bytes`` bytes, until a negative length arrives."""
    import socket
    import struct

    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reply = struct.pack("q", reply_bytes) + b"r" * reply_bytes
    while True:
        n = struct.unpack("q", _recv_exact(s, 8))[0]
        if n < 0:
            break
        _recv_exact(s, n)
        s.sendall(reply)


def _recv_exact(s, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        got += s.recv_into(view[got:])
    return buf


def floors(client, sizes, iters, msg_bytes, reply_bytes):
    """What a round trip costs below dmcsvm: (a) a blocking TCP ping-pong between this process
    and 2 child processes carrying the same bytes as an actor round (the OS and loopback
    floor, no Dask); (b) Dask's own ``identity`` RPC to both workers, from this thread as a
    round waits (no payload, no actor).  Median ms."""
    import asyncio
    import multiprocessing as mp
    import socket
    import struct

    out = {"tcp_pingpong_ms": {}, "dask_rpc_identity_ms": None}
    for b in sizes:
        ls = socket.socket()
        ls.bind(("127.0.0.1", 0))
        ls.listen()
        ctx = mp.get_context("spawn")
        procs = [
            ctx.Process(target=_echo_child, args=(ls.getsockname()[1], reply_bytes[b]))
            for _ in range(N_WORKERS)
        ]
        for pr in procs:
            pr.start()
        conns = [ls.accept()[0] for _ in procs]
        msg = struct.pack("q", msg_bytes[b]) + b"m" * msg_bytes[b]
        for c in conns:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ts = []
        for i in range(iters * 5 + 10):
            t = time.perf_counter()
            for c in conns:
                c.sendall(msg)
            for c in conns:
                _recv_exact(c, struct.unpack("q", _recv_exact(c, 8))[0])
            if i >= 10:
                ts.append(time.perf_counter() - t)
        for c in conns:
            c.sendall(struct.pack("q", -1))
        for pr in procs:
            pr.join()
        ls.close()
        out["tcp_pingpong_ms"][str(b)] = 1e3 * statistics.median(ts)
    workers = sorted(client.scheduler_info()["workers"])[:N_WORKERS]

    async def both():
        await asyncio.gather(*[client.rpc(w).identity() for w in workers])

    ts = []
    for i in range(iters * 5 + 10):
        t = time.perf_counter()
        client.sync(both)
        if i >= 10:
            ts.append(time.perf_counter() - t)
    out["dask_rpc_identity_ms"] = 1e3 * statistics.median(ts)
    return out


def _spin(ms):
    """Single-threaded numpy work for ``ms`` milliseconds (a stand-in for a round's work)."""
    a = np.full((160, 160), 0.5, dtype=np.float32)
    t = time.perf_counter()
    while time.perf_counter() - t < ms / 1e3:
        a @ a


class BusyEcho:
    """Round-shaped probe actor: spins for the partition's share of a round, then answers with a
    reply of the real round's size (stamped with when its work began and ended)."""

    def __init__(self, reply_bytes):
        self.reply = b"r" * int(reply_bytes)

    def step(self, blob, ms):
        t0 = time.time()
        _spin(ms)
        return t0, time.time(), self.reply


def contention_probe(per_round, iters):
    """The default batch's round replayed without dmcsvm: this process spins ``t_solve`` (the
    coordinator), then each of 1 or 2 single-thread workers spins ``t_parts`` (its partition)
    and answers with the round's reply bytes.  Overhead = round wall - the slower worker's spin.
    With 2 workers the coordinator and both workers are busy on 2 cores around every reply."""
    from distributed import Client, LocalCluster
    from threadpoolctl import threadpool_limits

    msg = b"m" * int(per_round["msg_bytes"])
    out = {
        "t_solve_ms": per_round["t_solve_ms"],
        "t_parts_ms": per_round["t_parts_ms"],
        "msg_bytes": per_round["msg_bytes"],
        "reply_bytes": per_round["reply_bytes"],
        "overhead_ms": {},
    }
    with threadpool_limits(1):
        for nw in (1, 2):
            with (
                LocalCluster(
                    n_workers=nw, threads_per_worker=1, processes=True, dashboard_address=None
                ) as cl,
                Client(cl, direct_to_workers=True) as c,
            ):
                ws = sorted(c.scheduler_info()["workers"])
                acts = [
                    c.submit(BusyEcho, per_round["reply_bytes"], workers=[w], actor=True).result()
                    for w in ws
                ]
                ts = []
                for i in range(iters * 4 + 10):
                    _spin(per_round["t_solve_ms"])
                    t = time.time()
                    futs = [act.step(msg, per_round["t_parts_ms"]) for act in acts]
                    rs = [f.result() for f in futs]
                    te = time.time()
                    if i >= 10:
                        ts.append(te - t - max(r[1] - r[0] for r in rs))
                out["overhead_ms"][str(nw)] = 1e3 * statistics.median(ts)
    return out


def probe(client, X, y, sizes, iters):
    """Median round-trip time (ms) of ``executor.call('probe', payload, b)`` per mode and size,
    and Dask's (de)serialization time of a message and a reply of each size."""
    from distributed.protocol import deserialize_bytes, serialize_bytes

    m = int(y.max()) + 1
    P, d = m, X.shape[1]
    n = min(X.shape[0], 2 * max(sizes) + 2)
    ps = PartitionSettings(
        kernel={"name": "rbf", "gamma": GAMMA, "degree": 3, "coef0": 0.0},
        C=C,
        selection=pt.SELECTIONS["bmg"],
        tol=1e-3,
        n_candidates=1000,
        pcls=np.arange(m),
        cache_bytes=0,
        kernel_dtype="float32",
    )
    rng = np.random.default_rng(0)
    out = {"sizes": list(sizes), "iters": iters, "round_trip_ms": {}, "serialize_ms": {}}

    def timed(fn):
        fn()  # warm connections
        ts = []
        for _ in range(iters):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return {"median_ms": 1e3 * statistics.median(ts), "min_ms": 1e3 * min(ts)}

    for mode in ("actor", "actor_relayed"):
        ex = DaskExecutor(client, N_WORKERS, direct=False if mode == "actor_relayed" else None)
        ex.start(X[:n], y[:n], y[:n], ps, partition_cls=ProbePartition)
        try:
            for b in sizes:
                msg = _payload(b, d, P, rng)
                blob = pickle.dumps(msg, protocol=5)
                variants = {
                    mode: lambda: ex.call("probe", msg, b),
                    f"{mode}_packed": lambda: ex.call("probe", blob, b, True),
                }
                for name, fn in variants.items():
                    out["round_trip_ms"].setdefault(name, {})[str(b)] = timed(fn)
        finally:
            ex.close()
    # serialization of one message and one reply (Dask's serializer, as on the wire)
    part = ProbePartition(0, 0, n, X[:n], y[:n], y[:n], ps)
    for b in sizes:
        msg, rep = _payload(b, d, P, rng), part.probe(None, b)
        row = {}
        for name, obj in (("message", msg), ("reply", rep)):
            ts_s, ts_d = [], []
            for _ in range(max(3, iters // 2)):
                t = time.perf_counter()
                blob = serialize_bytes(obj)
                ts_s.append(time.perf_counter() - t)
                t = time.perf_counter()
                deserialize_bytes(blob)
                ts_d.append(time.perf_counter() - t)
            row[name] = {
                "bytes": len(blob),
                "serialize_ms": 1e3 * statistics.median(ts_s),
                "deserialize_ms": 1e3 * statistics.median(ts_d),
            }
        out["serialize_ms"][str(b)] = row
    out["floors"] = floors(
        client,
        sizes,
        iters,
        {b: out["serialize_ms"][str(b)]["message"]["bytes"] for b in sizes},
        {b: out["serialize_ms"][str(b)]["reply"]["bytes"] for b in sizes},
    )
    return out


# ------------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------------


def plot(results, batch_sizes, path):
    """One panel per batch size, one stacked bar per mode: t_round = t_solve + t_parts + comm, the
    partition part split in proportion to the slowest partition's kernel / update / select."""
    plt = _report.pyplot()
    fig, axes = plt.subplots(
        1, len(batch_sizes), figsize=(4.6 * len(batch_sizes), 5.0), squeeze=False
    )
    segs = (
        ("t_solve", "coordinator solve", "#4c72b0"),
        ("t_kernel", "partition: kernel columns", "#8172b2"),
        ("t_update", "partition: score GEMM", "#ccb974"),
        ("t_select", "partition: selection scan", "#64b5cd"),
        ("comm", "communication + scheduling", "#c44e52"),
    )
    for ax, b in zip(axes[0], batch_sizes, strict=False):
        x = np.arange(len(MODES))
        bottom = np.zeros(len(MODES))
        rows = [results[str(b)][mode]["per_round_ms"] for mode in MODES]
        for key, name, color in segs:
            vals = []
            for r in rows:
                if key in ("t_kernel", "t_update", "t_select"):
                    tot = r["t_kernel"] + r["t_update"] + r["t_select"]
                    vals.append(r["t_parts"] * r[key] / tot if tot > 0 else 0.0)
                else:
                    vals.append(max(r[key], 0.0))
            ax.bar(x, vals, bottom=bottom, color=color, label=name, width=0.7)
            bottom += np.array(vals)
        for i, r in enumerate(rows):
            ax.text(
                i,
                bottom[i],
                f"comm {100 * r['comm'] / r['t_round']:.0f}%",
                ha="center",
                va="bottom",
                fontsize=8,
                color="#c44e52",
            )
        ax.set_xticks(x, [SHORT[mdl] for mdl in MODES], fontsize=8)
        ax.set_title(f"batch_size={b} ({results[str(b)]['inprocess']['rounds']} rounds)")
        ax.set_ylim(0, bottom.max() * 1.12)
    axes[0][0].set_ylabel("ms per round (mean over rounds)")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle(
        "dmcsvm on letter, per-round time split: in-process vs LocalCluster (2 workers)\n"
        "(partition part split in proportion to the slowest partition's items)",
        fontsize=10,
    )
    fig.tight_layout()
    _report.save_figure(fig, path, dpi=100)


def _fmt_packed(n):
    return "-" if n is None else _fmt_b(n)


def _fmt_b(n):
    return f"{n / 1e3:.0f} kB" if n < 1e6 else f"{n / 1e6:.2f} MB"


def markdown(out) -> str:
    res, bs = out["results"], out["batch_sizes"]
    L = [
        "# dmcsvm engine overhead: in-process vs Dask LocalCluster (actors)",
        "",
        _report.machine_line(out)
        + f"  dask/distributed {out['distributed']}.  "
        + _report.load_line(out),
        "",
        f"Data: {out['data']}.  Model: `MulticlassSVC(C={C:g}, gamma={GAMMA:g}, "
        f"batch_size=b, n_jobs={N_JOBS}"
        + "".join(f", {k}={v!r}" for k, v in out["model"]["extra_params"].items())
        + ")`, defaults otherwise.  Cluster: LocalCluster("
        f"n_workers={N_WORKERS}, threads_per_worker=1, processes=True), started once in "
        f"{out['cluster_startup_s']:.2f} s (not in any fit time).  {out['repeat']} timed fits "
        f"per cell (modes interleaved) after untimed warm-up fits in every mode.",
        "",
        *(
            [f"**Partial results**: the run was cut short after batch sizes {bs}.", ""]
            if not out.get("complete", True)
            else []
        ),
        *(
            [
                "**Quick smoke run** (`--quick`: few rows, rounds capped at "
                f"max_iter={out['max_iter']}): checks the script, not a measurement.",
                "",
            ]
            if out["quick"]
            else []
        ),
        "## Fit time",
        "",
        "| batch | mode | fit s min | fit s median | solve s | setup s | rounds | ratio min | "
        "ratio median | accuracy % | SVs |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for b in bs:
        ref = res[str(b)]["inprocess"]
        for mode in MODES:
            r = res[str(b)][mode]
            L.append(
                f"| {b} | {LABELS[mode]} | {r['fit_s_min']:.2f} | {r['fit_s_median']:.2f} | "
                f"{r['solve_s']:.2f} | {r['executor_start_s']:.3f} | {r['rounds']} | "
                f"{r['fit_s_min'] / ref['fit_s_min']:.2f} | "
                f"{r['fit_s_median'] / ref['fit_s_median']:.2f} | "
                f"{100 * r['accuracy']:.2f} | {r['n_support']} |"
            )
    L += [
        "",
        "ratio = fit time / in-process fit time at the same batch size; setup = "
        "`executor.start` (scatter rows, create partitions); solve = first round start to last "
        "round end.",
        "",
        "## Per-round split (ms per round, mean over rounds; fastest repeat)",
        "",
        "| batch | mode | t_round | t_solve | t_parts | t_kernel | t_update | t_select | "
        "comm | comm % | transport | merge | bytes out / round | packed out / round | "
        "bytes in / round |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for b in bs:
        for mode in MODES:
            r = res[str(b)][mode]
            q = r["per_round_ms"]
            L.append(
                f"| {b} | {mode} | {q['t_round']:.2f} | {q['t_solve']:.2f} | "
                f"{q['t_parts']:.2f} | {q['t_kernel']:.2f} | {q['t_update']:.2f} | "
                f"{q['t_select']:.2f} | {q['comm']:.2f} | {100 * r['comm_share']:.1f} | "
                f"{q['transport']:.2f} | {q['merge']:.2f} | "
                f"{_fmt_b(r['bytes_per_round']['to_partitions'])} | "
                f"{_fmt_packed(r['bytes_per_round'].get('packed_to_partitions'))} | "
                f"{_fmt_b(r['bytes_per_round']['from_partitions'])} |"
            )
    L += [
        "",
        "comm = t_round - t_solve - t_parts (communication + scheduling + merging the replies "
        "+ the wait for the slower partition beyond its own time); transport = "
        "`executor.step` wall - t_parts; merge = concatenating the replies on the coordinator. "
        "Bytes: numpy payload of the messages (once per partition) and of the replies; packed "
        "out: the frames an actor round sends (`pack_message`: dB as its nonzeros when that is "
        "smaller), as the executor counts them; in-process sends no packed frames.",
        "",
    ]
    pr = out.get("probe")
    if pr:
        rt = pr["round_trip_ms"]
        L += [
            "## Round trip without partition work (probe)",
            "",
            "A partition method that ignores a message of b patterns (ids, X rows, dB) and "
            "returns a reply-shaped dict of b candidates, called on both partitions as a round "
            f"does (median of {pr['iters']} calls, ms).  *packed*: message and reply sent as "
            "one pickled blob each instead of a dict of arrays; "
            "*relayed*: actor calls through the scheduler (`direct=False`).",
            "",
            "| b | actor | actor packed | actor packed, relayed | "
            "message bytes | reply bytes | (de)serialize msg + reply |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for b in pr["sizes"]:
            v = [
                rt[k][str(b)]["median_ms"] if str(b) in rt.get(k, {}) else float("nan")
                for k in ("actor", "actor_packed", "actor_relayed_packed")
            ]
            sz = pr["serialize_ms"][str(b)]
            ser = sum(sz[k]["serialize_ms"] + sz[k]["deserialize_ms"] for k in ("message", "reply"))
            L.append(
                f"| {b} | "
                + " | ".join(f"{x:.2f}" for x in v)
                + f" | {_fmt_b(sz['message']['bytes'])} | {_fmt_b(sz['reply']['bytes'])} | "
                f"{ser:.3f} |"
            )
        L.append("")
        fl = pr.get("floors")
        if fl:
            L += [
                "Below Dask, the same two-partition round trip as a blocking TCP ping-pong "
                "between this process and two child processes carrying the same bytes (the OS "
                "and loopback floor): "
                + ", ".join(f"b={b}: {fl['tcp_pingpong_ms'][str(b)]:.3f} ms" for b in pr["sizes"])
                + f"; Dask's own `identity` RPC to both workers (no actor, no payload): "
                f"{fl['dask_rpc_identity_ms']:.2f} ms.",
                "",
            ]
        ct = pr.get("contention")
        if ct:
            ov = ct["overhead_ms"]
            L += [
                "The default batch's round replayed without dmcsvm (this process spins "
                f"{ct['t_solve_ms']:.1f} ms as the coordinator, then each single-thread worker "
                f"spins {ct['t_parts_ms']:.1f} ms as its partition and answers with "
                f"{_fmt_b(ct['reply_bytes'])}; message {_fmt_b(ct['msg_bytes'])}): the actor "
                f"round's overhead is {ov['1']:.2f} ms with 1 worker and {ov['2']:.2f} ms with "
                "2.  With 2 workers the coordinator and both workers are busy on the 2 cores "
                "around every reply.",
                "",
            ]
    dd = out.get("inprocess_with_default_disk_cache")
    if dd:
        mem = res.get("1000", {}).get("inprocess")
        L += [
            "## The default on-disk column tier",
            "",
            f"The runs above pass `disk_cache_size=0` (kernel columns in the memory LRU only). "
            f"With the estimator's default (`disk_cache_size={dd['disk_cache_size']!r}`) the "
            f"first {dd['rounds']} rounds of an in-process fit at batch 1000 took "
            f"{dd['solve_s']:.2f} s "
            + (f"(memory only, fastest repeat: {mem['elapsed_at_round_40']:.2f} s) " if mem else "")
            + f"with t_kernel {dd['sum_s']['t_kernel']:.2f} s summed over "
            f"{dd['rounds']} rounds; partition stats: "
            + "; ".join(
                f"part {s_['part']}: in_memory={s_.get('in_memory')}, disk writes "
                f"{s_.get('disk_writes')}, disk bytes written "
                f"{_fmt_b(s_.get('disk_bytes_written') or 0)}"
                for s_ in (dd.get("engine_stats") or [])
            )
            + ".",
            "",
        ]
    L += ["## Goals", ""]
    for k, g in out["goals"].items():
        L.append(
            f"- {k}: {g['value']:.3f} (target {g['target']}) -> "
            f"{'met' if g['met'] else '**NOT met**'}"
        )
    L += [
        "",
        "## Agreement between the three ways",
        "",
        "| batch | mode vs in-process | same predictions | same rounds | same SVs | "
        "max abs coef diff | accuracy diff (points) |",
        "|---:|---|---|---|---|---:|---:|",
    ]
    for b in bs:
        for mode in MODES[1:]:
            a = out["agreement"][str(b)][mode]
            cd = "-" if a["max_abs_coef_diff"] is None else f"{a['max_abs_coef_diff']:.2e}"
            L.append(
                f"| {b} | {mode} | {a['same_predictions']} ({a['n_pred_differ']} differ) | "
                f"{a['same_rounds']} | {a['same_support']} | {cd} | "
                f"{a['accuracy_diff_points']:+.2f} |"
            )
    L += ["", "## Actors: direct and relayed", "", out["verdict"], ""]
    return "\n".join(L)


def verdict(out) -> str:
    res, bs = out["results"], out["batch_sizes"]
    parts = []
    for b in bs:
        a, f = res[str(b)]["actor"], res[str(b)]["actor_relayed"]
        R = a["rounds"]
        parts.append(
            f"b={b}: direct {a['fit_s_min']:.2f} s vs relayed {f['fit_s_min']:.2f} s "
            f"(relayed {100 * (f['fit_s_min'] / a['fit_s_min'] - 1):+.0f} %), comm "
            f"{a['per_round_ms']['comm']:.2f} vs {f['per_round_ms']['comm']:.2f} ms/round "
            f"over {R} rounds"
        )
    txt = "Fit time (min over repeats) and communication per round: " + "; ".join(parts) + "."
    pr = out.get("probe")
    if pr:
        rt = pr["round_trip_ms"]
        txt += (
            "  Without partition work (probe) a round costs "
            + "; ".join(
                f"b={b}: {rt['actor'][str(b)]['median_ms']:.2f} ms direct, "
                f"{rt['actor_relayed'][str(b)]['median_ms']:.2f} ms relayed"
                for b in pr["sizes"]
            )
            + "."
        )
    txt += (
        "  Messages per round: an actor call is one request client -> worker (the batch message) "
        "and one response worker -> client (the reply), per partition, with no scheduler "
        "involved when the client reaches the workers directly (the executor checks at start; "
        "relayed, each goes client -> scheduler -> worker and back, two hops each way, which "
        "is what a default `Client(direct_to_workers=None)` does with actor calls)."
    )
    return txt


def goals(out):
    b = str(out["default_batch"])
    r = out["results"].get(b)
    if r is None:
        return {}
    ratio = r["actor"]["fit_s_median"] / r["inprocess"]["fit_s_median"]
    share = r["actor"]["comm_share"]
    ratio2 = r["actor_notrim"]["fit_s_median"] / r["inprocess"]["fit_s_median"]
    return {
        "fit_ratio_localcluster_notrim_actor_over_inprocess_median_le_1.25 (not the default)": {
            "target": 1.25,
            "value": ratio2,
            "met": ratio2 <= 1.25,
        },
        "fit_ratio_localcluster_actor_over_inprocess_median_le_1.25": {
            "target": 1.25,
            "value": ratio,
            "met": ratio <= 1.25,
        },
        "comm_share_actor_lt_0.10": {"target": 0.10, "value": share, "met": share < 0.10},
    }


# ------------------------------------------------------------------------------------------------


def main(argv=None):
    p = _report.parser(__doc__, "engine_overhead.json", data_dir=True)
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 1000 training rows, 40 rounds, batches 1000,200, 1 repeat, short probe",
    )
    p.add_argument("--n-train", type=int, default=None, help="training rows (default all 15000)")
    p.add_argument("--batch-sizes", default=None, help="comma separated (default 1000,100,3000)")
    p.add_argument("--repeat", type=int, default=None, help="timed fits per cell (default 2)")
    p.add_argument("--no-probe", action="store_true")
    p.add_argument(
        "--disk-cache-default",
        action="store_true",
        help="keep the estimator's default disk_cache_size (default: 0 = memory LRU only)",
    )
    a = p.parse_args(argv)
    has_disk = "disk_cache_size" in MulticlassSVC().get_params()
    if has_disk and not a.disk_cache_default:
        EXTRA_PARAMS["disk_cache_size"] = 0
    if a.quick:
        n_train, batch_sizes, repeat, probe_sizes, iters, max_iter = (
            1000,
            [1000, 200],
            1,
            [0, 1000],
            5,
            40,
        )
    else:
        n_train, batch_sizes, repeat, probe_sizes, iters, max_iter = (
            15000,
            [1000, 100, 3000],
            2,
            [0, 100, 1000, 3000],
            30,
            -1,
        )
    n_train = a.n_train or n_train
    batch_sizes = [int(b) for b in a.batch_sizes.split(",")] if a.batch_sizes else batch_sizes
    repeat = a.repeat or repeat

    import dask
    import distributed
    from distributed import Client, LocalCluster

    run = _report.Run(
        __file__, "engine overhead: in-process vs LocalCluster actors", _report.settings_of(a)
    )
    Xtr, ytr, Xte, yte = _data.load_letter(a.data_dir)
    Xtr, ytr = Xtr[:n_train].astype(np.float32), ytr[:n_train]
    Xte = Xte.astype(np.float32)

    # numba warm-up in this process
    Xw, yw = _data.stratified_subset(Xtr, ytr, min(300, n_train // 2), random_state=1)
    _fit("inprocess", None, Xw, yw, 100)

    tc = time.perf_counter()
    cluster = LocalCluster(
        n_workers=N_WORKERS, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    client = Client(cluster)
    client.wait_for_workers(N_WORKERS)
    startup = time.perf_counter() - tc
    print(f"LocalCluster up in {startup:.2f} s", flush=True)
    # a second cluster whose workers keep glibc's default malloc trimming: Dask's nanny sets
    # MALLOC_TRIM_THRESHOLD_=65536 in every worker (distributed.nanny.pre-spawn-environ)
    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ", {}) or {})
    environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
        cluster2 = LocalCluster(
            n_workers=N_WORKERS, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
    client2 = Client(cluster2)
    client2.wait_for_workers(N_WORKERS)
    clients = {"inprocess": None, "actor": client, "actor_relayed": client, "actor_notrim": client2}
    results, agreement = {}, {}
    pr = disk_default = None
    meta = {
        "distributed": distributed.__version__,
        "data": f"UCI letter, first {n_train} rows train / last {Xte.shape[0]} test, "
        f"[-1,1] scaling with the training min/max of the first 15000 rows, float32",
        "model": {
            "C": C,
            "gamma": GAMMA,
            "n_jobs": N_JOBS,
            "other": "MulticlassSVC defaults",
            "extra_params": dict(EXTRA_PARAMS),
        },
        "cluster": {
            "n_workers": N_WORKERS,
            "threads_per_worker": 1,
            "processes": True,
            "worker_environ_default": dask.config.get("distributed.nanny.pre-spawn-environ"),
            "worker_environ_notrim": environ,
        },
        "cluster_startup_s": startup,
        "quick": bool(a.quick),
        "max_iter": max_iter,
        "repeat": repeat,
        "batch_sizes": batch_sizes,
        "default_batch": 1000,
    }
    try:
        for mode in MODES[1:]:  # numba warm-up on the workers
            _fit(mode, clients[mode], Xw, yw, 100)
        for b in batch_sizes:
            recs = {mode: [] for mode in MODES}
            for rep in range(repeat):
                for mode in MODES:
                    est, t_fit, rec, warn = _fit(mode, clients[mode], Xtr, ytr, b, max_iter)
                    recs[mode].append(_record(est, t_fit, rec, warn, Xte, yte))
                    r = recs[mode][-1]
                    print(
                        f"b={b} rep={rep} {mode:9s} fit {t_fit:6.2f} s  rounds {r['rounds']}  "
                        f"comm {100 * r['comm_share']:.1f} %  acc {100 * r['accuracy']:.2f}",
                        flush=True,
                    )
            results[str(b)] = {mode: _summary(recs[mode]) for mode in MODES}
            agreement[str(b)] = {
                mode: _agreement(recs["inprocess"][0], recs[mode][0]) for mode in MODES[1:]
            }
            _output(a, run, meta, results, agreement, pr, disk_default, final=False)
        pr = None if a.no_probe else probe(client, Xtr, ytr, probe_sizes, iters)
        ref = results.get("1000", {}).get("actor")
        if pr is not None and ref is not None:
            q = ref["per_round_ms"]
            pr["contention"] = contention_probe(
                {
                    "t_solve_ms": q["t_solve"],
                    "t_parts_ms": q["t_parts"],
                    "msg_bytes": ref["bytes_per_round"]["packed_to_partitions"] / N_WORKERS,
                    "reply_bytes": ref["bytes_per_round"]["from_partitions"] / N_WORKERS,
                },
                iters,
            )
        disk_default = (
            _disk_default_fit(Xtr, ytr, Xte, yte, DISK_ROUNDS)
            if EXTRA_PARAMS and "1000" in results
            else None
        )
    finally:
        for obj in (client2, cluster2, client, cluster):
            obj.close()

    out = _output(a, run, meta, results, agreement, pr, disk_default, final=True)
    print(markdown(out))
    outp = Path(a.out)
    print(
        f"wrote {outp}, {outp.with_suffix('.md')}, {outp.with_suffix('.png')} "
        f"({out['script_runtime_s']:.1f} s)"
    )
    return out


def _output(a, run, meta, results, agreement, pr, disk_default, final):
    """Assemble and write the JSON / markdown / PNG (also after every batch size, so that a run
    cut short leaves what it measured; ``complete`` says whether every batch size ran)."""
    out = run.envelope(
        results,
        **dict(
            meta,
            complete=final,
            batch_sizes=[b for b in meta["batch_sizes"] if str(b) in results],
            agreement=agreement,
            probe=pr,
            inprocess_with_default_disk_cache=disk_default,
        ),
    )
    out["goals"] = goals(out)
    out["verdict"] = verdict(out)
    outp = _report.write(out, a.out, markdown(out))
    plot(results, out["batch_sizes"], outp.with_suffix(".png"))
    return out


if __name__ == "__main__":
    main()
