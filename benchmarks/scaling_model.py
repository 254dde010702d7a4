"""A scaling model of dmcsvm's batched rounds, as plain functions.

A fit is ``R`` rounds; a round is serial on the coordinator and parallel over the partitions:

    T_round = T_coord + T_comm + max_p T_part

    T_coord = s0 + s1 * b P + s2 * b^2 P (+ s_step * steps * b * P)    batch solve (history_
              + b^2 * kern(d)                                           t_solve minus K_BB), K_BB,
              + m0 + m1 * ncand * (P + 7) + m2 * nnew * d               merge of the replies
    T_part  = n_a/Np * [ ncomp * kern(d) + ncach * k_c                 kernel columns / cache copies
                         + b * P * k_u + P * k_s ]                       score GEMM, selection scan
              + n/Np * P * k_o + t_p0                                   objective pass over all rows
    kern(d) = k_e + k_f * d                                             kernel entry (rbf, float32)
    T_comm  = in-process: th0 (thread hand-off)
              Dask:       c0 + c_call * Np + RTT + bytes / BW
              bytes     = Np * msg + sum(replies),  msg = b * (4 d + 8 + 12 * nnz_frac * P)
                          reply = ncand * (8 P + 7 * 8) + nnew * 4 d    (summed over partitions)
              packed rows (density rho of nonzeros): 4 d -> d * min(4, 4 / d + 6 rho), plus the
              CPU of packing (k_pack + k_unpack per dense entry sent, one leaf's own rows)

``b`` patterns per batch, ``P`` prototypes (classes), ``d`` features, ``n`` rows, ``n_a`` active
rows (shrinking), ``Np = W * c`` partitions (one per core, the estimator's default),
``ncomp``/``ncach`` kernel columns computed / taken from the cache, ``ncand`` candidates the
partitions report (``min(Np * b, n_viol)``: each reports up to ``b``), ``nnew`` of them with an X
row the coordinator does not hold yet.  The constants are seconds on one core of the measuring
machine; the benchmark (bench_scaling.py) measures them and fits the per-round trajectory from
history_.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass
class Costs:
    # partition, per unit (one core, one BLAS thread)
    k_e: float = 1e-9  # kernel entry, element-wise part (s / entry)
    k_f: float = 1e-11  # kernel entry, per feature (s / (entry * d))
    k_c: float = 2e-10  # cached kernel entry copied into the round's block (s / entry)
    k_u: float = 1e-10  # score update GEMM (s / (row * b * P))
    k_s: float = 5e-9  # selection scan of an active row (s / (row * P))
    k_o: float = 1e-9  # objective pass over every row (s / (row * P))
    t_p0: float = 1e-4  # partition fixed cost per round (s)
    # coordinator, serial
    s0: float = 1e-4  # per round (s)
    s1: float = 1e-6  # per batch pattern and prototype (s / (b P))
    s2: float = 1e-9  # per b^2 P (one-pass solve: each solved pattern updates the batch's scores)
    s_step: float = 0.0  # per inner step * b * P (a greedy working-set solve), 0 if unknown
    m0: float = 1e-4  # merge per round (s)
    m1: float = 1e-9  # merge per candidate number (s)
    m2: float = 1e-9  # merge per new X value (s)
    # communication
    th0: float = 1e-4  # in-process: thread pool hand-off per round (s)
    c0: float = 1e-3  # Dask: fixed per round (s)
    c_call: float = 1e-3  # Dask: per partition call, serial on the coordinator (s)
    bw_local: float = 1e9  # bytes/s of the measured (loopback) transport
    # X rows as their nonzeros on the wire (engine/row_packing.py): CPU beyond the dense path's
    k_pack: float = 0.0  # pack + pickle against pickle (s / dense entry)
    k_unpack: float = 0.0  # unpickle + unpack against unpickle (s / dense entry)
    scale: dict = field(default_factory=dict)  # calibration factors applied (kernel, update, scan)

    def to_dict(self):
        return asdict(self)


def kern(c: Costs, d: float) -> float:
    """Seconds per kernel entry computed (rbf, float32)."""
    return c.k_e + c.k_f * d


def t_part(c: Costs, n, n_a, Np, b, P, d, ncomp, ncach):
    """Slowest partition's work in a round (balanced partitions)."""
    ra = n_a / Np
    return (
        ra * (ncomp * kern(c, d) + ncach * c.k_c + b * P * c.k_u + P * c.k_s)
        + n / Np * P * c.k_o
        + c.t_p0
    )


def t_solve(c: Costs, b, P, d, steps=None):
    """Coordinator's batch solve incl. K_BB (what history_['t_solve'] measures, less
    bookkeeping)."""
    base = c.s0 + c.s1 * b * P + c.s2 * b * b * P + b * b * kern(c, d)
    if steps is not None and c.s_step:
        base = base + c.s_step * steps * b * P
    return base


def t_merge(c: Costs, ncand, nnew, P, d):
    return c.m0 + c.m1 * ncand * (P + 7) + c.m2 * nnew * d


def x_entry_bytes(d, density=None, itemsize=4) -> float:
    """Bytes per X entry on the wire: dense (``density`` None), or packed when that is smaller
    (a 4-byte row pointer per row; per nonzero a 16-bit column number, 32-bit past 65535
    features, and the value; :func:`dmcsvm.engine.row_packing.packed_nbytes`)."""
    if density is None:
        return float(itemsize)
    packed = 4.0 / d + density * ((2 if d < 2**16 else 4) + itemsize)
    return min(float(itemsize), packed)


def msg_bytes(b, P, d, nnz_frac=0.15, xbytes=4, held_frac=0.0):
    """A round message: the batch's X rows (but the share ``held_frac`` the workers bank, each
    sent as a 4-byte position), ids and the nonzeros of dB."""
    return b * ((1.0 - held_frac) * xbytes * d + 4 * held_frac + 8 + 12 * nnz_frac * P)


def reply_bytes(ncand, nnew, P, d, xbytes=4):
    return ncand * (8 * P + 7 * 8) + nnew * xbytes * d


def t_pack(c: Costs, b, d, nnew, held_frac, density):
    """CPU that packed X rows add to a round's critical path (0 when they travel dense): the
    coordinator packs the batch rows it sends and unpacks the candidates' rows it gets; a worker
    unpacks the batch rows before its partitions start; a group packs its own candidates' rows
    while its children's subtrees still run (WorkerGroup._own_wire), so only a leaf's packing
    is in series (charged as if that leaf held all ``nnew``: an upper bound)."""
    if density is None or x_entry_bytes(d, density) >= 4:
        return 0.0
    sent = b * (1.0 - held_frac) * d
    return (c.k_pack + c.k_unpack) * (sent + nnew * d)


def t_comm(
    c: Costs,
    mode,
    calls,
    b,
    P,
    d,
    ncand,
    nnew,
    rtt=0.0,
    bw=None,
    nnz_frac=0.15,
    tree=0,
    held_frac=0.0,
    density=None,
):
    """Communication of a round, split: ``calls`` (per-call cost, serial on the coordinator),
    ``bytes`` (one message copy per call plus the replies through the coordinator's link),
    ``fixed`` (c0 + one round-trip time).  In-process: the thread hand-off only.  ``tree`` > 0:
    a binary broadcast / reduction tree of that depth (each node forwards the message to two
    children and merges their candidate lists): every level costs two calls, two message
    copies, two replies of ``ncand`` candidates and one round trip, in series.  ``density``:
    the share of nonzero X entries, the rows travel packed when that is smaller (``pack``: the
    CPU it adds, :func:`t_pack`); None: dense."""
    if mode == "inprocess":
        return {"calls": 0.0, "bytes": 0.0, "fixed": c.th0, "pack": 0.0}
    bw = bw or c.bw_local
    xb = x_entry_bytes(d, density)
    pack = t_pack(c, b, d, nnew, held_frac, density)
    if tree:
        lvl = 2 * msg_bytes(b, P, d, nnz_frac, xb, held_frac) + 2 * reply_bytes(
            ncand, nnew, P, d, xb
        )
        return {
            "calls": 2 * c.c_call * tree,
            "bytes": tree * lvl / bw,
            "fixed": c.c0 + tree * rtt,
            "pack": pack,
        }
    nbytes = calls * msg_bytes(b, P, d, nnz_frac, xb, held_frac) + reply_bytes(
        ncand, nnew, P, d, xb
    )
    return {"calls": c.c_call * calls, "bytes": nbytes / bw, "fixed": c.c0 + rtt, "pack": pack}


def round_parts(
    c: Costs,
    mode,
    n,
    n_a,
    Np,
    b,
    P,
    d,
    ncomp,
    ncach,
    ncand,
    nnew,
    rtt=0.0,
    bw=None,
    steps=None,
    nnz_frac=0.15,
    calls=None,
    tree=0,
    held_frac=0.0,
    density=None,
):
    """The terms of one round (seconds): coord_solve, coord_merge, comm_calls, comm_bytes,
    comm_fixed, comm_pack, part.  ``calls``: actor calls per round (default one per partition);
    ``held_frac``: the share of the batch rows the workers bank (not sent); ``density``: packed
    X rows (:func:`t_comm`)."""
    cm = t_comm(
        c,
        mode,
        Np if calls is None else calls,
        b,
        P,
        d,
        ncand,
        nnew,
        rtt,
        bw,
        nnz_frac,
        tree,
        held_frac,
        density,
    )
    return {
        "coord_solve": t_solve(c, b, P, d, steps),
        "coord_merge": t_merge(c, ncand, nnew, P, d),
        "comm_calls": cm["calls"],
        "comm_bytes": cm["bytes"],
        "comm_fixed": cm["fixed"],
        "comm_pack": cm["pack"],
        "part": t_part(c, n, n_a, Np, b, P, d, ncomp, ncach),
    }


TERMS = (
    "coord_solve",
    "coord_merge",
    "comm_calls",
    "comm_bytes",
    "comm_fixed",
    "comm_pack",
    "part",
)


def predict_fit(
    c: Costs,
    traj: dict,
    mode,
    Np,
    n,
    P,
    d,
    rtt=0.0,
    bw=None,
    n_scale=1.0,
    calls=None,
    cand_cap=None,
    tree=0,
    bank=False,
    density=None,
):
    """Fit time and its split over a trajectory (arrays per round: n_active, batch, ncomp,
    ncach, n_viol, new_frac; optional ncand, steps).  ``n_scale`` multiplies row counts (n,
    n_active, violators) for a larger problem with the same normalized trajectory.  ``calls``:
    actor calls per round; each call's source reports up to ``b_max`` candidates.  ``bank``:
    the batch rows the workers bank are left out of the messages (``traj['held_frac']``);
    ``density``: X rows packed on the wire (:func:`t_comm`)."""
    tot = dict.fromkeys(TERMS, 0.0)
    steps = traj.get("steps")
    sources = Np if calls is None else calls
    for r in range(len(traj["batch"])):
        b = traj["batch"][r]
        nviol = traj["n_viol"][r] * n_scale
        # every partition (source) reports up to b_max candidates (n_candidates = batch_size)
        ncand = min(sources * traj["b_max"], nviol)
        if cand_cap is not None:
            ncand = min(ncand, cand_cap)
        if n_scale == 1.0 and "ncand" in traj and Np == traj.get("Np") and calls is None:
            ncand = traj["ncand"][r]
        nnew = ncand * traj["new_frac"][r]
        parts = round_parts(
            c,
            mode,
            n * n_scale,
            traj["n_active"][r] * n_scale,
            Np,
            b,
            P,
            d,
            traj["ncomp"][r],
            traj["ncach"][r],
            ncand,
            nnew,
            rtt,
            bw,
            None if steps is None else steps[r],
            calls=calls,
            tree=tree,
            held_frac=traj["held_frac"][r] if bank else 0.0,
            density=density,
        )
        for k, v in parts.items():
            tot[k] += v
    tot["total"] = sum(tot[k] for k in TERMS)
    return tot


def project(
    c: Costs,
    traj: dict,
    W,
    cores,
    n,
    P,
    d,
    rounds,
    rtt,
    bw,
    n_meas,
    per_worker=False,
    cand_cap=None,
    tree=False,
    bank=False,
    density=None,
):
    """Projected fit time on W workers x ``cores`` cores (one partition per core) for a problem of
    ``n`` rows, with the normalized trajectory of a measured run (n_meas rows) stretched to
    ``rounds`` rounds.  ``per_worker``: the design change of scaling.md (one call, one message
    copy and one merged top-b candidate list per worker instead of per partition); ``cand_cap``:
    at most this many candidates reach the coordinator per round (e.g. 2 b, each worker sending
    its top ``2 b / W``); ``tree``: workers forward the message and merge the replies along a
    binary tree (depth ceil(log2 W) + 1), so the coordinator makes two calls per round;
    ``density``: X rows packed on the wire when smaller.  Returns the split (seconds)."""
    scale = n / n_meas
    tot = predict_fit(
        c,
        traj,
        "dask",
        W * cores,
        n_meas,
        P,
        d,
        rtt=rtt,
        bw=bw,
        n_scale=scale,
        calls=W if per_worker else None,
        cand_cap=cand_cap,
        tree=int(np.ceil(np.log2(max(W, 1)))) + 1 if tree else 0,
        bank=bank,
        density=density,
    )
    f = rounds / len(traj["batch"])
    return {k: v * f for k, v in tot.items()}
