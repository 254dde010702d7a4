"""The per-round history is bounded (docs/design.md, 'The coordinator's size'): at most
``HISTORY_LIMIT`` rows whatever the number of rounds, thinned by halves keeping the first and newest
round, and the fit it describes does not depend on the bound."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits

from dmcsvm import MulticlassSVC, MultiPrototypeSVC
from dmcsvm.checkpoint import load_checkpoint
from dmcsvm.coordinators import history as hmod
from dmcsvm.coordinators.history import RoundHistory

# batches of 100: 66 rounds to converge on these 300 rows (2,550 with batches of 20)
KW = dict(C=10.0, gamma=0.05, tol=1e-5, n_jobs=1)
OPTS = {"gap_tol": 0.0, "batch_size": 100}


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:300] / 16.0, y[:300]


def test_thinning_keeps_the_first_and_newest_rows_within_the_limit():
    h = RoundHistory(("round", "x"), limit=10)
    for r in range(57):
        h.append({"round": r, "x": 2.0 * r, "ignored": 1})
        assert h.n_rows <= 10
        assert h["round"][0] == 0 and h["round"][-1] == r  # first and newest always kept
        assert np.all(np.diff(h["round"]) > 0)
    assert h.n_rows + h.dropped == 57
    assert h["x"] == [2.0 * r for r in h["round"]]  # columns thinned together
    assert len(h) == 2  # a dict of its columns


def test_tags_fill_their_column():
    h = RoundHistory(("round", "epoch"), limit=100)
    h.tags["epoch"] = 3
    h.append({"round": 0})
    h.tags["epoch"] = 0
    h.append({"round": 1, "epoch": 7})
    assert h["epoch"] == [3, 0]


def test_a_limit_below_two_rows_is_refused():
    with pytest.raises(ValueError, match="^history limit must be at least 2 rows, got 1$"):
        RoundHistory(("round",), limit=1)


def test_fit_history_is_bounded_and_the_model_unchanged(digits, monkeypatch):
    X, y = digits
    full = MulticlassSVC(**KW, solver_options=OPTS).fit(X, y)
    assert full.n_iter_ > 32  # enough rounds to thin several times (twice the limit below)
    monkeypatch.setattr(hmod, "HISTORY_LIMIT", 16)
    bounded = MulticlassSVC(**KW, solver_options=OPTS).fit(X, y)
    h = bounded.history_
    assert len(h["round"]) <= 16 and len(h["dual"]) == len(h["round"])
    assert h["round"][0] == 0 and h["round"][-1] == full.history_["round"][-1]
    # the kept rows are the unbounded history's rows of those rounds
    np.testing.assert_array_equal(h["dual"], full.history_["dual"][h["round"]])
    assert bounded.n_iter_ == full.n_iter_
    np.testing.assert_array_equal(bounded.dual_coef_, full.dual_coef_)


def test_resumed_history_stays_bounded(digits, monkeypatch, tmp_path):
    X, y = digits
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # max_iter's ConvergenceWarning
        MulticlassSVC(
            **KW, solver_options=OPTS, max_iter=30, checkpoint=str(tmp_path), checkpoint_every=30
        ).fit(X, y)
    assert len(load_checkpoint(tmp_path).history["dual"]) == 30
    monkeypatch.setattr(hmod, "HISTORY_LIMIT", 8)  # a checkpoint longer than the limit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # to 34 rounds in all, not to convergence (36)
        resumed = MulticlassSVC(
            **KW, solver_options=OPTS, max_iter=34, checkpoint=str(tmp_path), resume=True
        ).fit(X, y)
    assert resumed.n_iter_ == 34
    h = resumed.history_
    assert len(h["round"]) <= 8 and h["round"][0] == 0
    assert h["round"][-1] == resumed.n_iter_ - 1


@pytest.mark.parametrize("kernel", ["rbf", "linear"])  # the rounds and the sequential path
def test_multiprototype_epochs_are_thinned_with_their_rounds(kernel, monkeypatch):
    X, y = load_digits(return_X_y=True)
    X, y = X[:200] / 16.0, y[:200]
    kw = dict(
        n_prototypes=2,
        C=1.0,
        kernel=kernel,
        gamma=0.05,
        T0=2.0,
        tau=0.2,
        max_epochs=5,
        random_state=1,
        n_jobs=1,
    )
    opts = {"batch_size": 10}
    full = MultiPrototypeSVC(**kw, solver_options=opts).fit(X, y)
    assert len(full.history_["round"]) > 12
    monkeypatch.setattr(hmod, "HISTORY_LIMIT", 12)
    bounded = MultiPrototypeSVC(**kw, solver_options=opts).fit(X, y)
    h = bounded.history_
    assert len(h["epoch"]) == len(h["round"]) <= 12
    # each kept row is the unbounded history's row of that round (sequential path: pass count)
    where = {r: i for i, r in enumerate(full.history_["round"])}
    rows = [where[r] for r in h["round"]]
    assert rows[0] == 0 and rows[-1] == len(full.history_["round"]) - 1
    np.testing.assert_array_equal(h["epoch"], full.history_["epoch"][rows])
    np.testing.assert_array_equal(h["primal"], full.history_["primal"][rows])
    np.testing.assert_array_equal(bounded.dual_coef_, full.dual_coef_)


def test_smo_history_is_bounded_and_the_model_unchanged(digits, monkeypatch):
    from dmcsvm import BinarySVC

    X, y = digits
    yb = (y >= 5).astype(int)
    kw = dict(C=10.0, gamma=0.05, tol=1e-4, n_jobs=1)
    opts = {"batch_size": 4}
    full = BinarySVC(**kw, solver_options=opts).fit(X, yb)
    assert len(full.history_["round"]) > 10
    monkeypatch.setattr(hmod, "HISTORY_LIMIT", 10)
    bounded = BinarySVC(**kw, solver_options=opts).fit(X, yb)
    h = bounded.history_
    assert len(h["round"]) <= 10 and h["round"][0] == 0
    assert h["round"][-1] == full.history_["round"][-1]
    np.testing.assert_array_equal(h["objective"], full.history_["objective"][h["round"]])
    np.testing.assert_array_equal(bounded.dual_coef_, full.dual_coef_)
