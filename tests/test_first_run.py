"""The demo's numba warm-up: a background thread of the coordinator
compiles (or loads) the model's numba code on a few training rows while the LocalCluster starts,
without touching the model the demo then trains."""

from __future__ import annotations

from sklearn.datasets import load_digits

from dmcsvm import MulticlassSVC
from dmcsvm.cli.demo import start_warmup


def test_warmup_thread_compiles_without_touching_the_model():
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    model = MulticlassSVC(C=10.0, n_jobs=2, client="local")
    before = model.get_params()
    t = start_warmup(model, X, y, rows=60)
    assert t.daemon and t.name == "dmcsvm-numba-warmup"
    t.join(timeout=300)
    assert not t.is_alive()
    assert model.get_params() == before and not hasattr(model, "classes_")
    # the code the warm-up compiled is what the real fit uses: no new specialization
    from dmcsvm.numerics import passes, pattern

    funcs = {"run_passes": passes.run_passes, "scan_rows": pattern.scan_rows}
    sigs = {name: len(f.signatures) for name, f in funcs.items()}
    MulticlassSVC(C=10.0, n_jobs=1).fit(X[:300], y[:300])
    assert {n: len(f.signatures) for n, f in funcs.items()} == sigs
    assert all(v >= 1 for v in sigs.values())


def test_train_with_local_workers_compiles_before_the_cluster_starts(tmp_path, monkeypatch):
    """``dmcsvm train --local-workers`` compiles on the store's first rows before its
    LocalCluster (whose scheduler runs in this process) starts, as the demo does; rows of one
    class are relabelled for it (only the code matters)."""
    import distributed
    import numpy as np

    from dmcsvm.cli import _warmup, main
    from dmcsvm.store import write_arrays

    X, y = load_digits(return_X_y=True)
    order = np.argsort(y, kind="stable")  # the first 200 rows are all of class 0
    write_arrays(tmp_path / "d.zarr", X[order] / 16.0, y[order])
    events, seen = [], {}

    def warmup(model, Xw, yw, rows=200):
        events.append("warm-up")
        seen.update(n=len(Xw), classes=np.unique(yw).tolist())

    class NoCluster:
        def __init__(self, **kw):
            events.append("cluster")
            raise RuntimeError("no cluster in this test")

    monkeypatch.setattr(_warmup, "warm_up", warmup)
    monkeypatch.setattr(distributed, "LocalCluster", NoCluster)
    assert (
        main(
            [
                "train",
                str(tmp_path / "d.zarr"),
                "-o",
                str(tmp_path / "m.npz"),
                "--local-workers",
                "2",
            ]
        )
        == 1
    )
    assert events == ["warm-up", "cluster"]
    assert seen["n"] == 200 and seen["classes"] == [0, 1]
    assert not (tmp_path / "m.npz").exists()
