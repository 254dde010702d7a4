"""Round messages with and without the workers' row banks: fewer bytes per round.

Each Dask worker banks the X rows of the batches it applied, and a round's message leaves out the
batch rows every worker holds (``DaskExecutor(bank_rows=True)``, the default).  This fits the same
problem on one LocalCluster of one-thread workers, the rounds down the tree (or direct calls),
with ``bank_rows`` on and off, interleaved, and reports per setting the fit time, the bytes of the
round messages the coordinator sent, the batch rows sent and held, and whether the two fits end
on the same dual bit for bit (they must: only the transport differs).

    python benchmarks/bench_bank_rows.py [--workers 8] [--n 32000] [--d 784] [--tree auto]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report  # noqa: E402
from _harness import blobs, executor_hook  # noqa: E402


def fit_with(client, X, y, batch, **executor):
    """One MulticlassSVC fit on ``client`` with the DaskExecutor's attributes ``executor`` set
    (e.g. ``bank_rows``, ``tree``): the executor's counters and the model's last dual."""
    from dmcsvm import MulticlassSVC

    made = []

    def wrap(ex, est):
        for k, v in executor.items():
            setattr(ex, k, v)
        made.append(ex)
        return ex

    with executor_hook(wrap):
        t = time.perf_counter()
        clf = MulticlassSVC(
            C=10.0, gamma="scale", client=client, solver_options={"batch_size": batch}
        ).fit(X, y)
        wall = time.perf_counter() - t
    ex = made[-1]
    return {
        **executor,
        "fit_s": wall,
        "rounds": int(clf.n_iter_),
        "bytes_sent": int(ex.bytes_sent),
        "bytes_received": int(ex.bytes_received),
        "rows_sent": int(ex.rows_sent),
        "rows_held": int(ex.rows_held),
        "tree": bool(ex.uses_tree()),
        "dual": float(clf.history_["dual"][-1]),
        "coef_sum": float(np.abs(clf.dual_coef_).sum()),
        "n_sv": int(len(clf.support_)),
    }


def fit(client, X, y, bank, tree, batch):
    """One fit with ``bank_rows`` and ``tree`` set (:func:`fit_with`)."""
    return fit_with(client, X, y, batch, bank_rows=bank, tree=tree)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--n", type=int, default=16000)
    ap.add_argument("--d", type=int, default=256)
    ap.add_argument("--P", type=int, default=10)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--tree", default="true", choices=("true", "false", "auto"))
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=str(_report.RESULTS_DIR / "bank_rows.json"))
    a = ap.parse_args(argv)
    from distributed import Client, LocalCluster

    from dmcsvm import MulticlassSVC

    tree = {"true": True, "false": False, "auto": "auto"}[a.tree]
    run = _report.Run(
        __file__, "round messages with and without the workers' row banks", _report.settings_of(a)
    )
    X, y = blobs(a.n, a.d, a.P)
    X = X.astype("float32")  # float32 rows, as the library streams them
    MulticlassSVC(C=10, n_jobs=1, solver_options={"batch_size": 50}).fit(
        X[:300], y[:300]
    )  # compile here first
    res = []
    with (
        LocalCluster(
            n_workers=a.workers, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        MulticlassSVC(C=10, client=client, solver_options={"batch_size": 50}).fit(
            X[:300], y[:300]
        )  # warm workers
        for rep in range(a.repeat):
            for bank in (True, False) if rep % 2 == 0 else (False, True):
                r = fit(client, X, y, bank, tree, a.batch)
                r["repeat"] = rep
                res.append(r)
                print(
                    f"bank_rows={bank!s:5}: {r['fit_s']:.2f} s, {r['rounds']} rounds, "
                    f"{r['bytes_sent'] / 1e6:.1f} MB sent, rows sent {r['rows_sent']} / held "
                    f"{r['rows_held']}",
                    flush=True,
                )
    on = [r for r in res if r["bank_rows"]]
    off = [r for r in res if not r["bank_rows"]]
    summary = {
        "same_dual": len({r["dual"] for r in res}) == 1,
        "fit_s_min": {"bank": min(r["fit_s"] for r in on), "no_bank": min(r["fit_s"] for r in off)},
        "bytes_sent": {"bank": on[0]["bytes_sent"], "no_bank": off[0]["bytes_sent"]},
        "held_share": on[0]["rows_held"] / max(on[0]["rows_held"] + on[0]["rows_sent"], 1),
    }
    print(summary)
    _report.write(run.envelope({"fits": res, "summary": summary}), a.out)


if __name__ == "__main__":
    main()
