"""The demo's numba warm-up (issue 17, a fast first run): a background thread of the coordinator
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
    from dmcsvm.numerics import pattern
    sigs = {name: len(getattr(pattern, name).signatures) for name in ("solve_working_set", "scan_rows")}
    MulticlassSVC(C=10.0, n_jobs=1).fit(X[:300], y[:300])
    assert {n: len(getattr(pattern, n).signatures) for n in sigs} == sigs
    assert all(v >= 1 for v in sigs.values())
