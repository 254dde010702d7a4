"""Scaling model of dmcsvm's rounds: measure the parts, fit, validate, project.

What runs, in one process (``--quick`` shrinks every size):

1. Per-unit costs on one core (BLAS held at one thread, as partitions run): an rbf float32
   kernel block ``K(X_part, X_B)`` for d = 16..784 (-> ``k_e + k_f d`` per entry), a cached-column
   copy, the score GEMM ``F += K @ dB`` for P = 10/26/100, the selection scan (``scan_rows``) for
   the same P, the coordinator's merge of Np replies of c candidates, the thread-pool hand-off.
2. Fits of ``MulticlassSVC(C=10, batch_size=b)`` on synthetic Gaussian blobs (and a letter subset
   unless ``--quick``): in-process 1 and 2 threads, LocalCluster 1 and 2 workers (one thread
   each), ``--repeat`` times, interleaved, with ``os.getloadavg()`` before and after each.  A
   thin wrapper around the executor (installed by wrapping ``make_executor``; no library code
   changes) records per round the candidates the partitions reported, how many carried a new X
   row, the reply and message bytes and the time of ``executor.step``.
3. A Dask round-trip probe: ``DaskExecutor`` on tiny partitions (50 rows, so no work) with
   Np = 1, 2, 4, 8 partitions on the 2-worker cluster, empty messages and b = 1000 messages:
   fixed cost per round ``c0``, per partition call ``c_call``, bytes/s of the loopback transport.
4. The model (``scaling_model.py``): per-unit constants from (1), the coordinator's batch solve
   ``t_solve(b, P)`` fitted on history_ of the 1-thread fit (non-negative least squares on
   ``[1, b, b^2 P]``, K_BB subtracted; ``steps`` used when history_ has such a key), the partition
   constants scaled by one factor per term so that the 1-thread fit's measured sums are matched
   (the same run that is then predicted), and its prediction of the other fits, both over the
   1-thread run's trajectory (rounds, active rows, batch sizes, cache hits: what a user would
   have) and over each run's own trajectory (separates round-count changes from per-round error).
5. Projections for letter-sized, MNIST8M-sized and 50 M x 100 problems on 8 / 32 / 128 workers x
   16 cores at 10 Gb/s and 0.1 ms, with the assumptions listed in the output.

Outputs ``results/scaling.{json,md,png}``.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import _report
import scaling_model as sm  # noqa: E402
from _data import DEFAULT_DATA_DIR, load_letter  # noqa: E402
from _harness import best, blobs, executor_hook, load, med, timeit  # noqa: E402

from dmcsvm.engine.messages import HeldIds  # noqa: E402

#: current: one actor call, one message copy and up to b candidates per partition (W x 16 of them;
#: the executor before WorkerGroup; model only now);
#: per_worker: one call / message copy / top-b candidate list per worker (its 16 partitions behind
#: one actor; implemented: DaskExecutor(tree=False)); per_worker_2b: the same with each worker
#: sending its top 2b/W (2b in all; model only); tree: the message forwarded and the replies merged
#: along a binary tree of workers, each node passing on its subtree's top b (implemented:
#: DaskExecutor(tree=True), the default from TREE_MIN_GROUPS workers on); tree_bank: the tree with
#: the batch rows every worker banks left out of the message (implemented: DaskExecutor's
#: bank_rows, the default; the share held per round comes from the trajectory's ``held``);
#: tree_bank_packed: and the X rows sent as their nonzeros when that is smaller (implemented:
#: the executor always packs, losslessly; only for a problem with a measured density, below)
DESIGNS = ("current", "per_worker", "per_worker_2b", "tree", "tree_bank", "tree_bank_packed")

#: the Dask fits measured here: key -> (cluster, DaskExecutor options, model options)
DASK_RUNS = {
    "dask1": ("1x1", {}, {}),
    "dask2": ("2x1", {}, {}),
    # one worker with two threads: its two partitions behind one WorkerGroup
    "dask1x2": ("1x2", {}, {"calls": 1}),
    # two workers down the tree (root -> child): the model charges 2 calls per level
    "dask2_tree": ("2x1", {"tree": True}, {"tree": 2}),
}
EXECUTOR_KW: dict = {}  # options set on the next DaskExecutor (install_recorder)
_HOOKS = contextlib.ExitStack()  # the recorders installed for the rest of the run


# ----------------------------------------------------------------------------- 1. unit costs
def unit_costs(quick):
    from threadpoolctl import threadpool_limits

    from dmcsvm.engine.messages import CSReply
    from dmcsvm.engine.messages import merge as merge_replies
    from dmcsvm.kernels import KernelSpec, kernel_block, row_norms_sq
    from dmcsvm.numerics import pattern as pt

    rng = np.random.default_rng(1)
    out = {"load_before": load()}
    na, b = (4096, 128) if quick else (8192, 256)
    rep = 3 if quick else 5
    spec = KernelSpec("rbf", 0.05, 3, 0.0)
    with threadpool_limits(1):
        kr = []
        for d in (16, 64, 256, 784):
            Xa = rng.standard_normal((na, d)).astype(np.float32)
            Xb = rng.standard_normal((b, d)).astype(np.float32)
            nb = row_norms_sq(Xa)
            outb = np.empty((b, na), dtype=np.float32)
            t = timeit(lambda: kernel_block(spec, Xb, Xa, out=outb, norms_b=nb), rep)
            kr.append({"d": d, "s": t, "s_per_entry": t / (na * b)})
        A = np.array([[1.0, r["d"]] for r in kr])
        y = np.array([r["s_per_entry"] for r in kr])
        k_e, k_f = np.linalg.lstsq(A, y, rcond=None)[0]
        out["kernel"] = kr
        out["k_e"], out["k_f"] = float(max(k_e, 1e-12)), float(max(k_f, 1e-14))
        # cached columns copied into the round's K^T block
        cols = [rng.standard_normal(na).astype(np.float32) for _ in range(b)]
        KT = np.empty((b, na), dtype=np.float32)

        def copy():
            for j, c in enumerate(cols):
                KT[j] = c

        out["k_c"] = timeit(copy, rep) / (na * b)
        # update GEMM and selection scan
        ur, sr = [], []
        for P in (10, 26, 100):
            K = rng.random((na, b), dtype=np.float32)
            dB = np.zeros((b, P))
            dB[np.arange(b), rng.integers(0, P, b)] = 0.1
            F = np.zeros((na, P))

            def upd():
                F[...] += K @ dB.astype(np.float32)

            t = timeit(upd, rep)
            ur.append({"P": P, "s": t, "s_per_unit": t / (na * b * P)})
            Bm = np.zeros((na, P))
            Fm = rng.normal(0, 0.5, (na, P))
            yp = rng.integers(0, P, na).astype(np.int64)
            pcls = np.arange(P, dtype=np.int64)
            kd = np.ones(na)
            act = np.arange(na, dtype=np.int64)
            calm = np.zeros(na, dtype=np.int64)
            V, psi = np.empty(na), np.empty(na)
            sel = pt.SELECTIONS["bmg"]
            t = timeit(
                lambda: pt.scan_rows(
                    sel, Bm, Fm, yp, yp, pcls, kd, 10.0, 1e-3, act, 1.0, calm, V, psi
                ),
                rep,
                warm=2,
            )
            t_obj = timeit(lambda: pt.objective_parts(Bm, Fm, yp, yp, pcls), rep, warm=2)
            sr.append(
                {
                    "P": P,
                    "s": t,
                    "s_obj": t_obj,
                    "s_per_unit": (t - t_obj) / (na * P),
                    "s_obj_per_unit": t_obj / (na * P),
                }
            )
        out["update"], out["scan"] = ur, sr
        out["k_u"] = float(np.median([r["s_per_unit"] for r in ur]))
        out["k_s"] = float(np.median([max(r["s_per_unit"], 1e-12) for r in sr]))
        out["k_o"] = float(np.median([r["s_obj_per_unit"] for r in sr]))
        # coordinator's merge of the replies: Np x c candidates, P scores, d features, half new
        mr = []
        for P, d in ((10, 32), (26, 16), (10, 784)):
            for Np, c in (
                ((2, 500), (8, 500), (32, 250)) if quick else ((2, 1000), (8, 1000), (32, 1000))
            ):
                reps = []
                for k in range(Np):
                    new = rng.random(c) < 0.5
                    reps.append(
                        CSReply(
                            part=k,
                            cand_ids=np.arange(c) + k * c,
                            cand_V=rng.random(c),
                            cand_psi=rng.random(c),
                            cand_F=rng.random((c, P)),
                            cand_X=rng.random((int(new.sum()), d), dtype=np.float32),
                            cand_new=new,
                            cand_kdiag=np.ones(c),
                            cand_yp=np.zeros(c, np.int64),
                            cand_cls=np.zeros(c, np.int64),
                            max_V=1.0,
                            sum_V=1.0,
                            max_psi=1.0,
                            n_viol=c,
                            n_active=c,
                            n_rows=c,
                        )
                    )
                blobs_ = [pickle.dumps(r, protocol=5) for r in reps]

                # what the coordinator does with a Dask round's replies: unpickle, merge, argsort
                def merge():
                    agg = merge_replies([pickle.loads(x) for x in blobs_])
                    agg.cand_xrow()
                    np.argsort(-agg.cand_V, kind="stable")

                t = timeit(merge, rep)
                mr.append(
                    {
                        "P": P,
                        "d": d,
                        "Np": Np,
                        "c": c,
                        "ncand": Np * c,
                        "nnew": int(sum(int(r.cand_new.sum()) for r in reps)),
                        "s": t,
                    }
                )
        A = np.array([[1.0, r["ncand"] * (r["P"] + 7), r["nnew"] * r["d"]] for r in mr])
        y = np.array([r["s"] for r in mr])
        from scipy.optimize import nnls

        m, _ = nnls(A, y)
        out["merge"] = mr
        out["m0"], out["m1"], out["m2"] = (float(v) for v in m)
    # thread pool hand-off of an in-process round (2 threads, no work)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        out["th0"] = timeit(lambda: list(pool.map(lambda _: None, range(2))), 50, warm=5)
    out["load_after"] = load()
    return out


def micro_costs(uc):
    """The model's constants measured by :func:`unit_costs` (the rest keep their defaults)."""
    return sm.Costs(
        **{k: uc[k] for k in ("k_e", "k_f", "k_c", "k_u", "k_s", "k_o", "m0", "m1", "m2", "th0")}
    )


# ----------------------------------------------------------------------------- 2. fits
class Recorder:
    """Wraps an executor: per round the time of step, candidates, new X rows, bytes."""

    def __init__(self, inner, log):
        self._inner, self._log = inner, log
        self._seen = HeldIds()  # ids whose X the Dask workers bank (as DaskExecutor)

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def step(self, msg):
        t = time.perf_counter()
        reps = self._inner.step(msg)
        dt = time.perf_counter() - t
        ncand = sum(int(r.cand_ids.shape[0]) for r in reps)
        # SMO replies have no cand_new (their rows are always sent)
        nnew = sum(int(np.count_nonzero(getattr(r, "cand_new", ()))) for r in reps)
        rb = sum(sum(v.nbytes for v in vars(r).values() if isinstance(v, np.ndarray)) for r in reps)
        mb = sum(v.nbytes for v in vars(msg).values() if isinstance(v, np.ndarray))
        dB = getattr(msg, "dB", None)
        nnz = float(np.count_nonzero(dB) / dB.size) if dB is not None and dB.size else 0.0
        # batch rows a Dask worker already banks (left out of the message: pack_message)
        have = self._seen.rows(msg)
        held = 0 if have is None else int(np.count_nonzero(have))
        self._seen.applied(msg)
        self._log.append(
            {
                "t_step": dt,
                "ncand": ncand,
                "nnew": nnew,
                "reply_bytes": rb,
                "msg_bytes": mb,
                "nnz_frac": nnz,
                "held": held,
            }
        )
        return reps


def install_recorder():
    """Record the rounds of every fit from here to the end of the run (the harness's executor
    hook); returns the list each fit appends its round log to."""
    logs = []

    def wrap(ex, est):
        for k, v in EXECUTOR_KW.items():
            setattr(ex, k, v)
        log = []
        logs.append(log)
        return Recorder(ex, log)

    _HOOKS.enter_context(executor_hook(wrap))
    return logs


def one_fit(X, y, b, C, mode, n, client=None, logs=None, gamma="scale", executor_kw=None):
    """One timed fit; ``executor_kw``: options set on its DaskExecutor (install_recorder)."""
    from dmcsvm import MulticlassSVC

    kw = dict(C=C, gamma=gamma, solver_options={"batch_size": b, "disk_cache_size": 0})
    if mode == "inprocess":
        kw["n_jobs"] = n
    else:
        kw["client"] = client
    clf = MulticlassSVC(**kw)
    l0 = load()
    EXECUTOR_KW.clear()
    EXECUTOR_KW.update(executor_kw or {})
    try:
        t = time.perf_counter()
        clf.fit(X, y)
        wall = time.perf_counter() - t
    finally:
        EXECUTOR_KW.clear()
    h = {k: np.asarray(v, dtype=float).tolist() for k, v in clf.history_.items()}
    rec = logs[-1] if logs else []
    stats = clf.engine_stats_
    bytes_sent = None
    return {
        "mode": mode,
        "n": n,
        "fit_s": wall,
        "rounds": int(clf.n_iter_),
        "n_sv": int(clf.support_.shape[0]),
        "load_before": l0,
        "load_after": load(),
        "history": h,
        "rec": list(rec),
        "Np": len(stats),
        "bytes_sent": bytes_sent,
        "dual": float(h["dual"][-1]),
    }


def trajectory(run, b_max):
    """Per-round state of a measured run in the model's terms (from history_ and the recorder)."""
    h = run["history"]
    R = len(h["batch"])
    comp = np.diff(np.r_[0.0, h["rows_computed"]])
    cach = np.diff(np.r_[0.0, h["rows_cached"]])
    Np = run["Np"]
    rec = run["rec"][:R] if run["rec"] else []
    ncand = (
        np.array([r["ncand"] for r in rec], float)
        if len(rec) == R
        else np.minimum(np.array(h["n_viol"]), Np * b_max)
    )
    nnew = np.array([r["nnew"] for r in rec], float) if len(rec) == R else ncand * 0.5
    # the batch applied in round r is the one chosen in round r - 1 (sent with round r's message)
    bprev = np.r_[0.0, np.array(h["batch"][:-1], float)]
    t = {
        "batch_chosen": np.array(h["batch"], float),
        "batch": bprev,
        "n_active": np.array(h["n_active"], float),
        "n_viol": np.array(h["n_viol"], float),
        "ncomp": comp / Np,
        "ncach": cach / Np,
        "ncand": ncand,
        "new_frac": np.where(ncand > 0, nnew / np.maximum(ncand, 1), 0.0),
        "b_max": b_max,
        "Np": Np,
    }
    if len(rec) == R and all("held" in r for r in rec):
        # the share of each round's batch rows that the workers bank (not sent again)
        t["held_frac"] = np.array([r["held"] for r in rec], float) / np.maximum(bprev, 1)
    if "steps" in h:
        t["steps"] = np.array(h["steps"], float)
    return t


def fit_coordinator(costs, runs, d, P):
    """s0, s1, s2 (and s_step) from history_['t_solve'] of the given runs, K_BB subtracted."""
    from scipy.optimize import nnls

    rows, ys = [], []
    for item in runs:
        run, d, P = item if isinstance(item, tuple) else (item, d, P)
        h = run["history"]
        steps = h.get("steps")
        for r, (b, ts) in enumerate(zip(h["batch"], h["t_solve"], strict=False)):
            kbb = b * b * sm.kern(costs, d) if b else 0.0
            feat = [1.0, b * P, b * b * P]
            if steps is not None:
                feat.append(steps[r] * b * P)
            rows.append(feat)
            ys.append(max(ts - kbb, 0.0))
    A, y = np.array(rows), np.array(ys)
    coef, _ = nnls(A, y)
    costs.s0, costs.s1, costs.s2 = (float(v) for v in coef[:3])
    if A.shape[1] > 3:
        costs.s_step = float(coef[3])
    pred = A @ coef
    return {
        "r2": float(1 - np.sum((y - pred) ** 2) / max(np.sum((y - y.mean()) ** 2), 1e-30)),
        "sum_meas": float(y.sum()),
        "sum_fit": float(pred.sum()),
        "features": ["1", "b P", "b^2 P"] + (["steps b P"] if A.shape[1] > 3 else []),
        "n_rounds": int(len(y)),
    }


def calibrate_parts(costs, run, d, P, n):
    """One factor per partition term so the model matches the run's summed t_kernel / t_update /
    t_select (the slowest partition per round; the run calibrated is 1 partition)."""
    tr = trajectory(run, run["b_max"])
    h = run["history"]
    Np = run["Np"]
    na = tr["n_active"] / Np
    kern_pred = float(np.sum(na * (tr["ncomp"] * sm.kern(costs, d) + tr["ncach"] * costs.k_c)))
    upd_pred = float(np.sum(na * tr["batch"] * P * costs.k_u))
    scan_pred = float(np.sum(na * P * costs.k_s + n / Np * P * costs.k_o))
    meas = {k: float(np.sum(h[k])) for k in ("t_kernel", "t_update", "t_select", "t_parts")}
    flop = float(np.sum(na * tr["ncomp"] * costs.k_f * d))
    f = {
        "kernel": max(meas["t_kernel"] - flop, 0.0) / max(kern_pred - flop, 1e-12),
        "update": meas["t_update"] / max(upd_pred, 1e-12),
        "scan": meas["t_select"] / max(scan_pred, 1e-12),
    }
    costs.k_e *= f["kernel"]  # per-entry overheads; the per-feature (GEMM) part stays
    costs.k_c *= f["kernel"]
    costs.k_u *= f["update"]
    costs.k_s *= f["scan"]
    costs.k_o *= f["scan"]
    R = len(h["batch"])
    costs.t_p0 = max(
        0.0, (meas["t_parts"] - meas["t_kernel"] - meas["t_update"] - meas["t_select"]) / R
    )
    costs.scale = {k: round(v, 3) for k, v in f.items()}
    return {
        "factors": f,
        "measured": meas,
        "predicted_micro": {"kernel": kern_pred, "update": upd_pred, "scan": scan_pred},
    }


# ----------------------------------------------------------------------------- 3. Dask probe
def dask_probe(client, quick, d=32, P=10):
    from dmcsvm.engine.dask import DaskExecutor
    from dmcsvm.engine.messages import RoundMessage
    from dmcsvm.engine.partition import PartitionSettings
    from dmcsvm.kernels import KernelSpec
    from dmcsvm.numerics import pattern as pt

    rng = np.random.default_rng(2)
    res = []
    reps = 10 if quick else 20
    for Np in (1, 2, 4, 8):
        n = 50 * Np
        X = rng.standard_normal((n, d)).astype(np.float32)
        y = rng.integers(0, P, n).astype(np.int64)
        s = PartitionSettings(
            kernel=KernelSpec("rbf", 0.05, 3, 0.0).to_dict(),
            C=10.0,
            selection=pt.SELECTIONS["bmg"],
            tol=1e-3,
            n_candidates=10,
            pcls=np.arange(P, dtype=np.int64),
            shrinking=False,
            kernel_dtype="float32",
        )
        # the executor as fits use it: one call per worker, each worker's partitions behind one
        # actor (the per-partition actors this probe once measured are gone), called directly
        ex = DaskExecutor(client, n_partitions=Np, recover=False, tree=False).start(X, y, y, s)
        try:
            t_empty = timeit(lambda: ex.step(RoundMessage()), reps, warm=3)
            c0_cpu = time.process_time()
            for _ in range(reps):
                ex.step(RoundMessage())
            cpu_empty = (time.process_time() - c0_cpu) / reps
            b = 1000
            msg = RoundMessage(
                ids=np.arange(b, dtype=np.int64) + 10**6,
                XB=rng.standard_normal((b, d)).astype(np.float32),
                dB=np.where(rng.random((b, P)) < 0.15, 1e-9, 0.0),
                shrink_margin=1.0,
            )
            b0 = ex.bytes_sent
            t_msg = timeit(lambda: ex.step(msg), reps, warm=2)
            per_msg = (ex.bytes_sent - b0) / (reps + 2)
        finally:
            ex.close()
        res.append(
            {
                "Np": Np,
                "t_empty": t_empty,
                "cpu_empty": cpu_empty,
                "t_msg_b1000": t_msg,
                "wire_bytes": per_msg,
                "load": load(),
            }
        )
    A = np.array([[1.0, r["Np"]] for r in res])
    c0, c_call = np.linalg.lstsq(A, np.array([r["t_empty"] for r in res]), rcond=None)[0]
    c0c, c_call_cpu = np.linalg.lstsq(A, np.array([r["cpu_empty"] for r in res]), rcond=None)[0]
    extra = np.array([(r["t_msg_b1000"] - r["t_empty"]) for r in res])
    byts = np.array([r["wire_bytes"] for r in res])
    bw = float(np.sum(byts) / max(np.sum(extra), 1e-9))
    return {
        "runs": res,
        "c0": float(max(c0, 0.0)),
        "c_call": float(max(c_call, 0.0)),
        "c0_cpu": float(max(c0c, 0.0)),
        "c_call_cpu": float(max(c_call_cpu, 0.0)),
        "bw_local": bw,
    }


# ----------------------------------------------------------------------------- driver
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes (~1-2 min)")
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA_DIR))
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--out", default=str(_report.RESULTS_DIR / "scaling.json"))
    ap.add_argument("--no-letter", action="store_true")
    ap.add_argument(
        "--external",
        metavar="SCHEDULER",
        help="only time Dask fits of the blobs problem on this scheduler's workers "
        "(e.g. workers in network namespaces) and add them, with the model's "
        "prediction, to the JSON given by --out (which a full run wrote)",
    )
    ap.add_argument(
        "--bw-mbit",
        type=float,
        default=None,
        help="--external: the link's bandwidth (Mbit/s) for the prediction",
    )
    ap.add_argument("--tag", default="external")
    ap.add_argument(
        "--reference",
        default=None,
        help="with --reproject: project with --out's constants over this result "
        "file's trajectory (e.g. a --node run against results/scaling.json)",
    )
    ap.add_argument(
        "--reproject",
        action="store_true",
        help="recompute the projections of --out from its constants (no measuring)",
    )
    ap.add_argument(
        "--packing",
        action="store_true",
        help="measure the MNIST digits' density and the CPU of packing X rows "
        "(packing_costs) into --out, then project again (design "
        "tree_bank_packed)",
    )
    ap.add_argument(
        "--held",
        action="store_true",
        help="re-run --out's reference fit (in process, deterministic) to record the "
        "batch rows the workers bank each round, then project again",
    )
    ap.add_argument(
        "--node",
        action="store_true",
        help="validate on one many-core machine: in-process fits on --threads and "
        "LocalCluster fits on --workers one-thread workers, direct and tree",
    )
    ap.add_argument("--threads", default="1,2,4,8,16")
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--node-n", type=int, default=64000)
    ap.add_argument("--node-d", type=int, default=32)
    a = ap.parse_args(argv)
    if a.node:
        return node(a)
    if a.held:
        return held_shares(a.out)
    if a.packing:
        return measure_packing(a.out, a.data_dir)
    if a.reproject and a.reference:
        return reproject_with(a.out, a.reference)
    if a.reproject:
        return reproject(a.out)
    if a.external:
        return external(a)
    quick = a.quick
    repeat = a.repeat or (1 if quick else 2)
    b_max = a.batch_size or (200 if quick else 500)
    run = _report.Run(
        __file__,
        "scaling model of a round: unit costs, validation, projection",
        _report.settings_of(a, ("data_dir", "out", "external", "bw_mbit", "tag")),
    )
    out = {}  # the envelope's results
    print("unit costs ...", flush=True)
    uc = unit_costs(quick)
    out["unit_costs"] = uc
    costs = micro_costs(uc)
    out["costs_micro"] = costs.to_dict()

    datasets = []
    n_bl = 2500 if quick else 8000
    Xb, yb = blobs(n_bl, 32, 10)
    datasets.append(("blobs", Xb, yb, 10.0, "scale"))
    if not quick and not a.no_letter:
        Xl, yl, _, _ = load_letter(a.data_dir)
        datasets.append(("letter6000", Xl[:6000].astype(np.float32), yl[:6000], 10.0, 1.0))

    from distributed import Client, LocalCluster

    logs = install_recorder()
    from dmcsvm import MulticlassSVC

    # numba warm-up, untimed
    MulticlassSVC(C=10, n_jobs=1, solver_options={"batch_size": 50}).fit(Xb[:300], yb[:300])
    print("clusters ...", flush=True)
    cl = {}
    for W, T in ((1, 1), (2, 1), (1, 2)):
        t = time.perf_counter()
        cluster = LocalCluster(
            n_workers=W, threads_per_worker=T, processes=True, dashboard_address=None
        )
        cl[f"{W}x{T}"] = (cluster, Client(cluster))
        out[f"cluster{W}x{T}_start_s"] = time.perf_counter() - t
        MulticlassSVC(C=10, client=cl[f"{W}x{T}"][1], solver_options={"batch_size": 50}).fit(
            Xb[:300], yb[:300]
        )
    out["datasets"] = {}
    for name, X, y, C, gamma in datasets:
        n, d = X.shape
        P = int(np.unique(y).shape[0])
        print(f"fits on {name} ({n} x {d}, {P} classes) ...", flush=True)
        runs = {}
        for _rep in range(repeat):
            for key in ("inprocess1", "inprocess2", *DASK_RUNS):
                mode = "inprocess" if key.startswith("inprocess") else "dask"
                k = int(key[-1]) if mode == "inprocess" else 0
                client = cl[DASK_RUNS[key][0]][1] if mode == "dask" else None
                r = one_fit(
                    X,
                    y,
                    b_max,
                    C,
                    mode,
                    k,
                    client,
                    logs,
                    gamma,
                    DASK_RUNS[key][1] if mode == "dask" else None,
                )
                r["b_max"] = b_max
                runs.setdefault(key, []).append(r)
                print(
                    f"  {key}: {r['fit_s']:.2f} s, {r['rounds']} rounds, load {r['load_before']}",
                    flush=True,
                )
        out["datasets"][name] = {"n": n, "d": d, "P": P, "runs": runs}
    print("dask probe ...", flush=True)
    out["probe"] = dask_probe(cl["2x1"][1], quick)
    for cluster, client in cl.values():
        client.close()
        cluster.close()

    # ------------------------------------------------------------------ model fit + validation
    costs.c0, costs.c_call, costs.bw_local = (out["probe"][k] for k in ("c0", "c_call", "bw_local"))
    validate(out, costs, b_max, {k: v[2] for k, v in DASK_RUNS.items()})
    fastest = lambda rs: min(rs, key=lambda r: r["fit_s"])  # noqa: E731
    # the coordinator's t_solve(b, P) for the projections: pooled over every data set's fastest
    # 1-thread fit (two values of P when letter runs)
    out["coord_fit"] = fit_coordinator(
        costs,
        [(fastest(ds["runs"]["inprocess1"]), ds["d"], ds["P"]) for ds in out["datasets"].values()],
        None,
        None,
    )
    name0 = datasets[0][0]
    ds0 = out["datasets"][name0]
    base = fastest(ds0["runs"]["inprocess1"])
    out["costs"] = costs.to_dict()
    out["costs_dask_here"] = out["calibration"][name0]["costs_dask"]

    out["projection"], out["projection_sensitivity"] = projections(
        out, costs, base, ds0["n"], b_max
    )
    slim(out)
    out = run.envelope(out, quick=quick, repeat=repeat, batch_size=b_max)
    _report.write(out, a.out)
    print(f"wrote {a.out} ({out['script_runtime_s']:.0f} s)")
    report(out, Path(a.out))


def node(a):
    """``--node``: the validation on one many-core machine (a stand-in for a cluster node, where
    processes do not share two cores): in-process fits on 1..max threads and LocalCluster fits
    on 1..max one-thread workers, called directly and down the tree, on a blobs problem sized so
    that partitions dominate a round; the Dask probe on that machine; the model calibrated on its
    1-thread and 1-worker fits predicting the rest; the projections with its constants.  Writes
    ``--out`` after every fit, so a run cut short keeps what it measured."""
    from distributed import Client, LocalCluster

    threads = [int(v) for v in a.threads.split(",")]
    workers = [int(v) for v in a.workers.split(",")]
    repeat = a.repeat or 2
    b_max = a.batch_size or 1000
    run = _report.Run(
        __file__,
        "scaling model validated on one many-core node",
        _report.settings_of(a, ("data_dir", "out", "external", "bw_mbit", "tag")),
    )
    out = {"node": {"threads": threads, "workers": workers, "n": a.node_n, "d": a.node_d}}

    def save():
        _report.write(run.envelope(out, repeat=repeat, batch_size=b_max), a.out)

    print("unit costs ...", flush=True)
    uc = unit_costs(a.quick)
    out["unit_costs"] = uc
    costs = micro_costs(uc)
    out["costs_micro"] = costs.to_dict()
    save()
    X, y = blobs(a.node_n, a.node_d, 10)
    n, d = X.shape
    logs = install_recorder()
    from dmcsvm import MulticlassSVC

    MulticlassSVC(C=10, n_jobs=1, solver_options={"batch_size": 50}).fit(
        X[:300], y[:300]
    )  # numba warm-up
    runs = {}
    out["datasets"] = {"blobs": {"n": n, "d": d, "P": 10, "runs": runs}}
    model_kw = {}

    def fit(key, mode, k, client=None, kw=None):
        r = one_fit(X, y, b_max, 10.0, mode, k, client, logs, executor_kw=kw)
        r["b_max"] = b_max
        runs.setdefault(key, []).append(r)
        print(
            f"  {key}: {r['fit_s']:.2f} s, {r['rounds']} rounds, Np {r['Np']}, "
            f"load {r['load_before']}",
            flush=True,
        )
        save()

    print(f"fits on blobs ({n} x {d}, 10 classes), batch {b_max} ...", flush=True)
    for _rep in range(repeat):
        for T in threads:
            fit(f"inprocess{T}", "inprocess", T)
    for W in workers:
        t = time.perf_counter()
        cluster = LocalCluster(
            n_workers=W, threads_per_worker=1, processes=True, dashboard_address=None
        )
        client = Client(cluster)
        out[f"cluster{W}x1_start_s"] = time.perf_counter() - t
        MulticlassSVC(C=10, client=client, solver_options={"batch_size": 50}).fit(X[:300], y[:300])
        try:
            for _rep in range(repeat):
                fit(f"dask{W}", "dask", 0, client, {"tree": False})
                model_kw[f"dask{W}"] = {}
                if W >= 2:
                    fit(f"dask{W}_tree", "dask", 0, client, {"tree": True})
                    model_kw[f"dask{W}_tree"] = {"tree": int(np.ceil(np.log2(W))) + 1}
            if W == max(workers):
                print("dask probe ...", flush=True)
                out["probe"] = dask_probe(client, a.quick)
                save()
        finally:
            client.close()
            cluster.close()
    costs.c0, costs.c_call, costs.bw_local = (out["probe"][k] for k in ("c0", "c_call", "bw_local"))
    validate(out, costs, b_max, model_kw)
    base = min(runs["inprocess1"], key=lambda r: r["fit_s"])
    out["coord_fit"] = fit_coordinator(costs, [(base, d, 10)], None, None)
    out["costs"] = costs.to_dict()
    out["costs_dask_here"] = out["calibration"]["blobs"]["costs_dask"]
    out["projection"], out["projection_sensitivity"] = projections(out, costs, base, n, b_max)
    slim(out)
    save()
    print(f"wrote {a.out}")
    report(run.envelope(out), Path(a.out))


def validate(out, costs, b_max, model_kw):
    """Per data set, the constants are fitted on that data set's fastest 1-thread fit (the repeat
    least disturbed by the other processes on the box) and then predict its other fits:
    t_solve(b, P) on history_, one factor per partition term, and for Dask the 1-worker fit's
    partition slowdown (worker process) and per-round transport.  Measured times are compared
    as min (like the calibration) and median over the repeats.  ``model_kw``: run key -> the
    model's options for that run (``calls``, ``tree`` depth)."""
    import copy

    micro = copy.deepcopy(costs)
    out["validation"], out["calibration"] = [], {}
    fastest = lambda rs: min(rs, key=lambda r: r["fit_s"])  # noqa: E731
    for name, ds in out["datasets"].items():
        cd = copy.deepcopy(micro)
        base = fastest(ds["runs"]["inprocess1"])
        cal = {
            "coord_fit": fit_coordinator(cd, [base], ds["d"], ds["P"]),
            "parts": calibrate_parts(cd, base, ds["d"], ds["P"], ds["n"]),
        }
        d1 = fastest(ds["runs"]["dask1"])
        h1, hb = d1["history"], base["history"]
        f_w = float(np.sum(h1["t_parts"]) / max(np.sum(hb["t_parts"]), 1e-9))
        cdd = copy.deepcopy(cd)
        for k in ("k_e", "k_c", "k_u", "k_s", "k_o", "t_p0"):
            setattr(cdd, k, getattr(cdd, k) * f_w)
        pd1 = sm.predict_fit(cd, trajectory(d1, b_max), "dask", 1, ds["n"], ds["P"], ds["d"])
        comm_meas = float(
            np.sum(h1["t_round"])
            - np.sum(h1["t_solve"])
            - np.sum(h1["t_parts"])
            - pd1["coord_merge"]
        )
        g = max(comm_meas - pd1["comm_bytes"], 0.0) / max(
            pd1["comm_calls"] + pd1["comm_fixed"], 1e-9
        )
        cdd.c0 *= g
        cdd.c_call *= g
        cal["dask"] = {
            "worker_part_factor": f_w,
            "comm_factor": float(g),
            "comm_measured_s": comm_meas,
        }
        cal["costs"], cal["costs_dask"] = cd.to_dict(), cdd.to_dict()
        out["calibration"][name] = cal
        tr1 = trajectory(base, b_max)
        for key, rs in ds["runs"].items():
            mode = "inprocess" if key.startswith("inprocess") else "dask"
            Np = rs[0]["Np"]
            rmin = fastest(rs)
            own = trajectory(rmin, b_max)
            dkw = model_kw.get(key, {}) if mode == "dask" else {}
            p1 = sm.predict_fit(cd, tr1, mode, Np, ds["n"], ds["P"], ds["d"], **dkw)
            p2 = sm.predict_fit(cd, own, mode, Np, ds["n"], ds["P"], ds["d"], **dkw)
            p3 = (
                sm.predict_fit(cdd, tr1, mode, Np, ds["n"], ds["P"], ds["d"], **dkw)
                if mode == "dask"
                else p1
            )
            h = rmin["history"]
            out["validation"].append(
                {
                    "data": name,
                    "run": key,
                    "Np": Np,
                    "measured_min_s": rmin["fit_s"],
                    "measured_s": med([r["fit_s"] for r in rs]),
                    "measured_all": [r["fit_s"] for r in rs],
                    "rounds": rmin["rounds"],
                    "rounds_base": base["rounds"],
                    "pred_base_traj_s": p1["total"],
                    "pred_own_traj_s": p2["total"],
                    "pred_dask_cal_s": p3["total"],
                    "pred_split_own": p2,
                    "measured_split": {
                        "coord_solve": float(np.sum(h["t_solve"])),
                        "parts": float(np.sum(h["t_parts"])),
                        "rest": float(
                            np.sum(h["t_round"]) - np.sum(h["t_solve"]) - np.sum(h["t_parts"])
                        ),
                    },
                    "t_solve_per_round_ms": 1e3 * float(np.mean(h["t_solve"])),
                    "load": [r["load_before"] for r in rs],
                    "calibrated_on": key in ("inprocess1", "dask1"),
                }
            )


PROBLEMS = [
    ("letter-sized", 15000, 16, 26),
    ("MNIST8M-sized", 8_100_000, 784, 10),
    ("50M x 100", 50_000_000, 100, 10),
]

#: problems whose X rows have a measured share of nonzeros (``--packing``: the MNIST test digits;
#: MNIST8M's rows are deformed MNIST digits, of which no copy is here: ``--packing`` also
#: measures digits deformed like them, and the sensitivity table shows those densities) for
#: tree_bank_packed
PACKED_PROBLEMS = ("MNIST8M-sized",)

#: the densities the packed MNIST8M-sized projection is also shown at (the sensitivity table)
DENSITIES = (0.25, 0.33, 0.5, 0.66)


def packing_of(out, ref=None):
    """The ``--packing`` measurement (density, k_pack, k_unpack) of ``out``, else of ``ref``."""
    return out.get("row_packing") or (ref or {}).get("row_packing")


def projections(out, costs, base, n_meas, b_max, c_call=None, packing=None, density=None):
    """Projected fits of :data:`PROBLEMS` for every design on 1/8/32/128 workers x 16 cores, and
    how the MNIST8M-sized speed-ups move with the per-call cost (the probe's coordinator CPU per
    call, its wall time per call, and the 1.63 ms CPU of the run of 2026-11-26 at load 20).

    Partition constants: the one-core unit costs at large blocks (uncalibrated: the in-fit
    factors come from small blocks and load); coordinator: t_solve fitted on history_, merge unit
    costs; per-call cost: the coordinator's CPU per actor call in the probe (``c_call``
    overrides it).  ``packing`` (:func:`packing_of`): the design ``tree_bank_packed`` for
    :data:`PACKED_PROBLEMS`, at the measured density (``density`` overrides it), with the
    measured CPU of packing."""
    import copy

    cp = copy.deepcopy(costs)
    for k in ("k_e", "k_c", "k_u", "k_s", "k_o"):
        setattr(cp, k, out["unit_costs"][k])
    if packing:
        cp.k_pack, cp.k_unpack = packing["k_pack"], packing["k_unpack"]
    cp.c_call = out["probe"]["c_call_cpu"] if c_call is None else c_call
    cp.c0 = out["probe"]["c0_cpu"]
    tr = trajectory(base, b_max)
    visits = float(np.sum(tr["batch"]) / n_meas)
    b_proj = 1000
    rtt, bw = 2 * 0.1e-3, 10e9 / 8
    # the measured trajectory with the default batch (1000) and no kernel-cache hits at scale
    trp = dict(tr)
    trp["batch"] = tr["batch"] * (b_proj / b_max)
    trp["b_max"] = b_proj
    trp["ncomp"] = trp["batch"].copy()
    trp["ncach"] = np.zeros_like(trp["batch"])
    proj = []
    for pname, n, d, P in PROBLEMS:
        rounds = max(1.0, visits * n / b_proj)
        for design in DESIGNS:
            kw = {
                "per_worker": design != "current",
                # the tree as implemented: every node passes on its subtree's top b
                "cand_cap": {"per_worker_2b": 2 * b_proj}.get(
                    design, b_proj if design.startswith("tree") else None
                ),
                "tree": design.startswith("tree"),
                "bank": design.startswith("tree_bank"),
            }
            if kw["bank"] and "held_frac" not in trp:
                continue
            if design == "tree_bank_packed":
                if not packing or pname not in PACKED_PROBLEMS:
                    continue
                kw["density"] = packing["density"] if density is None else density
            ref = sm.project(cp, trp, 1, 16, n, P, d, rounds, rtt, bw, n_meas, **kw)
            for W in (1, 8, 32, 128):
                p = sm.project(cp, trp, W, 16, n, P, d, rounds, rtt, bw, n_meas, **kw)
                serial = sum(p[k] for k in sm.TERMS if k != "part")
                proj.append(
                    {
                        "problem": pname,
                        "design": design,
                        "n": n,
                        "d": d,
                        "P": P,
                        "W": W,
                        "density": kw.get("density"),
                        "cores": 16,
                        "rounds": rounds,
                        "fit_s": p["total"],
                        "split": p,
                        "serial_share": serial / p["total"],
                        "speedup_vs_1x16": ref["total"] / p["total"],
                        "speedup_cap": ref["total"] / serial,
                    }
                )
    sens = []
    if c_call is None:
        for label, cc in (
            ("probe CPU per call", out["probe"]["c_call_cpu"]),
            ("probe wall per call", out["probe"]["c_call"]),
            ("1.63 ms (2026-11-26 run, load 20)", 1.63e-3),
        ):
            pj, _ = projections(out, costs, base, n_meas, b_max, c_call=cc, packing=packing)
            for x in pj["problems"]:
                if x["problem"] == "MNIST8M-sized" and x["W"] > 1:
                    sens.append(
                        {
                            "c_call": cc,
                            "label": label,
                            "design": x["design"],
                            "W": x["W"],
                            "speedup_vs_1x16": x["speedup_vs_1x16"],
                        }
                    )
        if packing and density is None:
            deformed = [x["density"] for x in packing.get("deformed", ())]
            for rho in sorted(set(DENSITIES) | set(deformed)):
                pj, _ = projections(
                    out, costs, base, n_meas, b_max, c_call=cp.c_call, packing=packing, density=rho
                )
                for x in pj["problems"]:
                    if (
                        x["problem"] == "MNIST8M-sized"
                        and x["design"] == "tree_bank_packed"
                        and x["W"] > 1
                    ):
                        sens.append(
                            {
                                "density": rho,
                                "label": f"density {rho}",
                                "design": x["design"],
                                "W": x["W"],
                                "speedup_vs_1x16": x["speedup_vs_1x16"],
                            }
                        )
    return (
        {
            "problems": proj,
            "rtt_s": rtt,
            "bw_Bps": bw,
            "batch": b_proj,
            "visits_per_row": visits,
            "cores": 16,
            "costs": cp.to_dict(),
        },
        sens,
    )


def reproject_with(path, reference):
    """The projections with the constants of the result file ``path`` (e.g. a ``--node`` run: its
    unit costs, Dask probe and coordinator fit) over the trajectory of ``reference`` (the run the
    published projections use), so that only the constants differ; stored in ``path`` as
    ``projection_reference_trajectory``."""
    import dataclasses

    env = json.loads(Path(path).read_text())
    out = _body(env)
    ref = _body(json.loads(Path(reference).read_text()))
    names = {f.name for f in dataclasses.fields(sm.Costs)}
    costs = sm.Costs(**{k: v for k, v in out["costs"].items() if k in names})
    ds0 = next(iter(ref["datasets"].values()))
    base = next(r for r in ds0["runs"]["inprocess1"] if r["history"])
    proj, sens = projections(
        out, costs, base, ds0["n"], base["b_max"], packing=packing_of(out, ref)
    )
    out["projection_reference_trajectory"] = {
        "reference": str(reference),
        "projection": proj,
        "sensitivity": sens,
    }
    _report.write(env, path)
    for p in proj["problems"]:
        if p["problem"] != "letter-sized":
            print(
                f"| {p['problem']} | {p['design']} | {p['W']} | {p['fit_s'] / 3600:.3g} h | "
                f"{p['speedup_vs_1x16']:.2f} | {p['serial_share']:.2f} |"
            )


def held_shares(path):
    """The reference trajectory's share of batch rows the Dask workers bank, per round: its fit
    (the first data set's fastest in-process one-thread run, which is deterministic) again with
    the recorder, checked to be the same trajectory (rounds, dual of every round), each round's
    ``held`` stored in the run's ``rec``; then the projections again (design ``tree_bank``)."""
    env = json.loads(Path(path).read_text())
    out = _body(env)
    ds0 = next(iter(out["datasets"].values()))
    base = next(r for r in ds0["runs"]["inprocess1"] if r["history"])
    X, y = blobs(ds0["n"], ds0["d"], ds0["P"])
    logs = install_recorder()
    r = one_fit(X, y, base["b_max"], 10.0, "inprocess", 1, None, logs, "scale")
    held = np.array([x["held"] for x in r["rec"]], float)
    sent = np.r_[0.0, np.array(r["history"]["batch"][:-1], float)]
    share = held / np.maximum(sent, 1)
    same = r["rounds"] == base["rounds"] and np.allclose(
        r["history"]["dual"], base["history"]["dual"], rtol=1e-5
    )
    R = len(base["rec"])
    if not same:
        # the solver's path moved since the reference was measured: its per-round shares,
        # stretched over the reference's rounds (round k of R at the same fraction of the fit)
        share = np.interp(np.linspace(0, 1, R), np.linspace(0, 1, len(share)), share)
    bref = np.r_[0.0, np.array(base["history"]["batch"][:-1], float)]
    for x, h, bb in zip(base["rec"], share, bref, strict=False):
        x["held"] = float(h * bb)
    out["held_source"] = {
        "library": _report.library_source()["git"],
        "same_trajectory": bool(same),
        "rounds_now": int(r["rounds"]),
        "rounds_reference": int(base["rounds"]),
        "held_rows": float(held.sum()),
        "batch_rows": float(sent.sum()),
    }
    print(
        f"batch rows banked by the workers: {held.sum():.0f} of {sent.sum():.0f} "
        f"({held.sum() / max(sent.sum(), 1):.1%}); {r['rounds']} rounds now, "
        f"{base['rounds']} in the reference" + ("" if same else " (shares stretched)")
    )
    _report.write(env, path)
    reproject(path)


def reproject(path):
    """Projections again from a result file's constants and kept trajectory (no measuring):
    for a change of the model or of the designs."""
    import dataclasses

    env = json.loads(Path(path).read_text())
    out = _body(env)
    names = {f.name for f in dataclasses.fields(sm.Costs)}
    costs = sm.Costs(**{k: v for k, v in out["costs"].items() if k in names})
    ds0 = next(iter(out["datasets"].values()))
    base = next(r for r in ds0["runs"]["inprocess1"] if r["history"])
    out["projection"], out["projection_sensitivity"] = projections(
        out, costs, base, ds0["n"], base["b_max"], packing=packing_of(out)
    )
    _report.write(env, path)
    report(env, Path(path))


# ----------------------------------------------------------------------------- row packing
def load_mnist_test(data_dir) -> tuple[np.ndarray, np.ndarray]:
    """The 10000 MNIST test digits (the only MNIST images in the shared data), pixels / 255 as
    float32, and their labels."""
    d = Path(data_dir) / "mnist"
    with gzip.open(d / "t10k-images-idx3-ubyte.gz") as f:
        X = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(d / "t10k-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return X.astype(np.float32) / np.float32(255.0), y.astype(np.int64)


#: deformations like MNIST8M's (InfiMNIST, Loosli, Canu & Bottou 2007: MNIST digits under
#: smooth random displacement fields and translations, stored as uint8 pixels), from the mildest
#: to the strongest: (name, elastic amplitude alpha in pixels, field smoothing sigma, largest
#: shift in pixels, largest thickening coefficient); elastic fields as in Simard et al. 2003
DEFORMATIONS = (
    ("sub-pixel shifts (up to 1 px)", 0.0, 4.0, 1.0, 0.0),
    ("elastic alpha 16 + shifts (1 px)", 16.0, 4.0, 1.0, 0.0),
    ("elastic alpha 34 + shifts (2 px) + thickening", 34.0, 4.0, 2.0, 1.0),
)


def deformed_densities(X, n=None, seed=0) -> list[dict]:
    """The share of nonzero pixels in the first ``n`` digits of ``X`` (pixels / 255; None: all)
    after each of :data:`DEFORMATIONS`, resampled bilinearly and rounded back to uint8 as MNIST8M
    stores them: resampling at sub-pixel positions spreads a stroke's edge by up to one pixel, so
    deformed digits are denser than the originals (what the packed rows' bytes depend on)."""
    from scipy import ndimage

    rng = np.random.default_rng(seed)
    imgs = np.rint(X[:n] * 255.0).reshape(-1, 28, 28)
    yy, xx = np.meshgrid(np.arange(28.0), np.arange(28.0), indexing="ij")
    out = []
    for name, alpha, sigma, shift, thick in DEFORMATIONS:
        nnz = 0
        for img in imgs:
            dy, dx = (
                ndimage.gaussian_filter(rng.uniform(-1, 1, img.shape), sigma) * alpha
                for _ in range(2)
            )
            ty, tx = rng.uniform(-shift, shift, 2)
            warped = ndimage.map_coordinates(img, [yy + dy + ty, xx + dx + tx], order=1)
            if thick:
                # thickening along the stroke's normal: the image plus a multiple of its
                # gradient magnitude (Simard's thickness tangent)
                warped = warped + rng.uniform(-thick, thick) * np.hypot(*np.gradient(warped))
            nnz += np.count_nonzero(np.clip(np.rint(warped), 0, 255))
        out.append(
            {
                "deformation": name,
                "alpha": alpha,
                "sigma": sigma,
                "shift_px": shift,
                "thickening": thick,
                "digits": int(len(imgs)),
                "density": nnz / imgs.size,
                "original_density": float(np.count_nonzero(imgs) / imgs.size),
            }
        )
    return out


def packing_costs(X, batch=1000, repeat=30, seed=0) -> dict:
    """Density, bytes and the CPU of a packed batch over a dense one (seconds per dense entry),
    min over ``repeat`` on ``batch`` random rows of ``X``."""
    from dmcsvm.engine.row_packing import PackedRows, pack_rows, unpack_rows

    rng = np.random.default_rng(seed)
    B = np.ascontiguousarray(X[rng.choice(X.shape[0], batch, replace=False)])
    p = pack_rows(B)
    assert isinstance(p, PackedRows)
    dumps = lambda v: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)  # noqa: E731
    dense_blob, packed_blob = dumps(B), dumps(p)
    t_dense_out = best(lambda: dumps(B), repeat)
    t_packed_out = best(lambda: dumps(pack_rows(B)), repeat)
    t_dense_in = best(lambda: pickle.loads(dense_blob), repeat)
    t_packed_in = best(lambda: unpack_rows(pickle.loads(packed_blob)), repeat)
    back = unpack_rows(pickle.loads(packed_blob))
    entries = B.size
    return {
        "batch": batch,
        "d": B.shape[1],
        "density": float(np.count_nonzero(X) / X.size),
        "batch_density": float(np.count_nonzero(B) / B.size),
        "dense_bytes": len(dense_blob),
        "packed_bytes": len(packed_blob),
        "bytes_ratio": len(packed_blob) / len(dense_blob),
        "bit_for_bit": bool(np.array_equal(back.view(np.uint32), B.view(np.uint32))),
        "t_dense_out_s": t_dense_out,
        "t_packed_out_s": t_packed_out,
        "t_dense_in_s": t_dense_in,
        "t_packed_in_s": t_packed_in,
        # what the model charges: the packed path's CPU beyond the dense path's, per entry
        "k_pack": max(t_packed_out - t_dense_out, 0.0) / entries,
        "k_unpack": max(t_packed_in - t_dense_in, 0.0) / entries,
    }


def measure_packing(path, data_dir):
    """``--packing``: the MNIST test digits' density and the CPU of packing their rows
    (:func:`packing_costs`, :func:`deformed_densities`), stored in ``path`` as ``row_packing``;
    then the projections again."""
    env = json.loads(Path(path).read_text())
    out = _body(env)
    X, _ = load_mnist_test(data_dir)
    out["row_packing"] = dict(
        packing_costs(X),
        deformed=deformed_densities(X),
        library=_report.library_source()["git"],
        machine=_report.machine_info(),
        load=_report.other_load(),
    )
    print(
        "row packing:",
        {k: v for k, v in out["row_packing"].items() if k not in ("machine", "library")},
    )
    _report.write(env, path)
    reproject(path)


#: per-round arrays kept in the JSON (the trajectory of the runs the model was calibrated on)
KEEP = (
    "batch",
    "n_active",
    "n_viol",
    "rows_computed",
    "rows_cached",
    "t_round",
    "t_solve",
    "t_parts",
    "t_kernel",
    "t_update",
    "t_select",
    "dual",
    "steps",
)


def _body(out):
    """What a result file measured: the envelope's ``results``, or the file itself (files written
    before the envelope kept everything at the top)."""
    return out["results"] if "datasets" in (out.get("results") or {}) else out


def slim(out):
    """Keep per-round data only for each data set's fastest 1-thread fit (what the model and
    ``--external`` read); the other runs keep their sums over rounds."""
    for ds in out["datasets"].values():
        base = min(ds["runs"]["inprocess1"], key=lambda r: r["fit_s"])
        for rs in ds["runs"].values():
            for r in rs:
                h = r["history"]
                r["history_sums"] = {
                    k: float(np.sum(h[k])) for k in KEEP if k in h and k.startswith("t_")
                }
                if r is base:
                    r["history"] = {k: [float(f"{v:.6g}") for v in h[k]] for k in KEEP if k in h}
                    r["rec"] = [
                        {k: x[k] for k in ("ncand", "nnew", "held") if k in x} for x in r["rec"]
                    ]
                else:
                    r["history"] = {}
                    r["rec"] = []


def external(a):
    """Fits on an existing cluster (e.g. two workers in their own network namespaces behind
    tbf-shaped veth links), predicted with the Dask constants calibrated by the full run."""
    from distributed import Client

    logs = install_recorder()
    path = Path(a.out)
    out = json.loads(path.read_text())
    body = _body(out)
    ds = body["datasets"]["blobs"]
    b_max = out["batch_size"]
    X, y = blobs(ds["n"], ds["d"], ds["P"])
    client = Client(a.external)
    W = len(
        client.scheduler_info(
            **(
                {"n_workers": -1}
                if "n_workers" in __import__("inspect").signature(client.scheduler_info).parameters
                else {}
            )
        )["workers"]
    )
    from dmcsvm import MulticlassSVC

    MulticlassSVC(C=10, client=client, solver_options={"batch_size": 50}).fit(X[:300], y[:300])
    runs = []
    for _ in range(a.repeat or 2):
        r = one_fit(X, y, b_max, 10.0, "dask", W, client, logs)
        r["b_max"] = b_max
        runs.append(r)
        print(f"  {a.tag}: {r['fit_s']:.2f} s, {r['rounds']} rounds, load {r['load_before']}")
    client.close()
    base = min(ds["runs"]["inprocess1"], key=lambda r: r["fit_s"])
    base["b_max"] = b_max
    cd = sm.Costs(**{k: v for k, v in body["costs_dask_here"].items()})
    bw = a.bw_mbit * 1e6 / 8 if a.bw_mbit else None
    rmed = min(runs, key=lambda r: r["fit_s"])
    pred = sm.predict_fit(
        cd, trajectory(base, b_max), "dask", rmed["Np"], ds["n"], ds["P"], ds["d"], bw=bw
    )
    pred_lo = sm.predict_fit(
        cd, trajectory(base, b_max), "dask", rmed["Np"], ds["n"], ds["P"], ds["d"]
    )
    rec = rmed["rec"]
    entry = {
        "tag": a.tag,
        "scheduler": a.external,
        "W": W,
        "bw_mbit": a.bw_mbit,
        "measured_min_s": rmed["fit_s"],
        "measured_s": med([r["fit_s"] for r in runs]),
        "measured_all": [r["fit_s"] for r in runs],
        "rounds": rmed["rounds"],
        "pred_s": pred["total"],
        "pred_split": pred,
        "pred_loopback_bw_s": pred_lo["total"],
        "wire_bytes_per_round": float(
            np.mean([x["reply_bytes"] + x["msg_bytes"] * rmed["Np"] for x in rec])
        )
        if rec
        else None,
        "measured_comm_s": float(
            np.sum(rmed["history"]["t_round"])
            - np.sum(rmed["history"]["t_solve"])
            - np.sum(rmed["history"]["t_parts"])
        ),
        "load": [r["load_before"] for r in runs],
    }
    body.setdefault("external", []).append(entry)
    _report.write(out, path)
    print(json.dumps({k: v for k, v in entry.items() if k != "pred_split"}, indent=1))


def report(out, path):
    """The summary tables as markdown on stdout (scaling.md is written by hand from them)."""
    env, out = out, _body(out)
    c = out["costs"]
    print(
        "\nconstants:",
        json.dumps({k: (f"{v:.3g}" if isinstance(v, float) else v) for k, v in c.items()}),
    )
    print("coord fit (pooled):", out["coord_fit"])
    for name, cal in out["calibration"].items():
        print(
            name,
            "t_solve fit:",
            cal["coord_fit"],
            "parts:",
            cal["parts"]["factors"],
            "dask:",
            cal["dask"],
        )
    print("probe:", {k: out["probe"][k] for k in ("c0", "c_call", "bw_local")})
    print(
        "\n| data | run | Np | rounds (base) | measured min / median s | model (unit costs) "
        "| model (own rounds) | model (Dask cal. on 1 worker) |"
    )
    for v in out["validation"]:
        print(
            f"| {v['data']} | {v['run']} | {v['Np']} | {v['rounds']} ({v['rounds_base']}) | "
            f"{v['measured_min_s']:.2f} / {v['measured_s']:.2f} | {v['pred_base_traj_s']:.2f} | "
            f"{v['pred_own_traj_s']:.2f} | "
            f"{v['pred_dask_cal_s']:.2f} |"
        )
    print("\n| problem | design | W | fit s | speed-up | cap | " + " | ".join(sm.TERMS) + " |")
    for p in out["projection"]["problems"]:
        s = p["split"]
        print(
            f"| {p['problem']} | {p['design']} | {p['W']} | {p['fit_s']:.4g} | "
            f"{p['speedup_vs_1x16']:.2f} | {p['speedup_cap']:.1f} | "
            + " | ".join(f"{s[k]:.3g}" for k in sm.TERMS)
            + " |"
        )
    try:
        plot(out, path.with_suffix(".png"), cores=(env.get("machine") or {}).get("cpu_count"))
    except Exception as e:  # noqa: BLE001 - the figure is optional
        print("plot failed:", e)


def plot(out, path, cores=None):
    plt = _report.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    ax = axes[0]
    v = out["validation"]
    labels = [f"{x['data']}\n{x['run']}" for x in v]
    xs = np.arange(len(v))
    ax.bar(xs - 0.27, [x["measured_min_s"] for x in v], 0.27, label="measured (min of repeats)")
    ax.bar(xs, [x["pred_base_traj_s"] for x in v], 0.27, label="model, 1-thread run's rounds")
    ax.bar(
        xs + 0.27,
        [x["pred_dask_cal_s"] for x in v],
        0.27,
        label="model, Dask terms calibrated on 1 worker",
    )
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, fontsize=7, rotation=30)
    ax.set_ylabel("fit s")
    ax.set_title(f"validation on this {cores or os.cpu_count()}-core machine")
    ax.legend(fontsize=7)
    ax = axes[1]
    for i, pname in enumerate(dict.fromkeys(p["problem"] for p in out["projection"]["problems"])):
        for design, ls in (
            ("current", "-"),
            ("per_worker", "--"),
            ("per_worker_2b", ":"),
            ("tree", "-."),
            ("tree_bank", (0, (1, 3))),
            ("tree_bank_packed", (0, (3, 1, 1, 1))),
        ):
            ps = [
                p
                for p in out["projection"]["problems"]
                if p["problem"] == pname and p["design"] == design
            ]
            if not ps:
                continue
            if not isinstance(ls, str):  # a dash pattern: markers drawn apart
                ax.plot(
                    [p["W"] for p in ps],
                    [p["speedup_vs_1x16"] for p in ps],
                    ls=ls,
                    marker="s",
                    color=f"C{i}",
                    label=f"{pname}, {design}",
                )
                continue
            ax.plot(
                [p["W"] for p in ps],
                [p["speedup_vs_1x16"] for p in ps],
                "o" + ls,
                color=f"C{i}",
                label=f"{pname}, {design}",
            )
    ax.plot([1, 128], [1, 128], "k:", lw=0.8, label="linear")
    ax.axhline(16, color="r", lw=0.6, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("workers x 16 cores")
    ax.set_ylabel("projected speed-up vs 1 x 16")
    ax.set_title("projection, 10 Gb/s, 0.1 ms (line style = design)", fontsize=10)
    ax.legend(fontsize=6, loc="upper left", ncol=1, framealpha=0.8)
    fig.tight_layout()
    _report.save_figure(fig, path, dpi=110)


if __name__ == "__main__":
    main()
