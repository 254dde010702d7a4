"""Checkpoints: what is written equals the solver's state, writes are atomic, a resumed run ends
with the same model as an uninterrupted one (identical predictions on train and test data, dual
within 1e-6 relative, coefficients within 1e-4 * C; measured: 4e-12 and 3e-6 * C on this
problem), and resuming with other settings or data fails with a message naming the difference."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_digits

from dmcsvm import MulticlassSVC
from dmcsvm.checkpoint import Checkpointer, load_checkpoint, parse_every
from dmcsvm.coordinators.crammer_singer import CoordinatorState
from dmcsvm.coordinators.resume import resume_state

# batches of 80: 120 rounds to converge on these 300 rows, 107 from float32 (2,550 with batches of
# 20); the interrupted runs stop after 37, 40 and 57
KW = dict(C=10.0, gamma=0.05, tol=1e-5, n_jobs=1)
OPTS = {"gap_tol": 0.0, "batch_size": 80}


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    return X[:300], y[:300], X[300:600], y[300:600]


@pytest.fixture(scope="module")
def full(digits):
    Xtr, ytr, _, _ = digits
    return MulticlassSVC(**KW, solver_options=OPTS).fit(Xtr, ytr)


def _interrupted(X, y, directory, rounds, every=5, **extra):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the ConvergenceWarning of max_iter
        return MulticlassSVC(
            **{**KW, **extra},
            solver_options=OPTS,
            max_iter=rounds,
            checkpoint=str(directory),
            checkpoint_every=every,
        ).fit(X, y)


def _B(est, n):
    B = np.zeros((n, len(est.classes_)))
    B[est.support_] = est.dual_coef_.T
    return B


def assert_same_model(a, b, Xs, C):
    for X in Xs:
        assert np.array_equal(a.predict(X), b.predict(X))
    da, db = a.history_["dual"][-1], b.history_["dual"][-1]
    assert abs(da - db) <= 1e-6 * abs(da)
    n = Xs[0].shape[0]
    assert np.abs(_B(a, n) - _B(b, n)).max() <= 1e-4 * C


def test_checkpoint_holds_the_solver_state(digits, tmp_path):
    Xtr, ytr, _, _ = digits
    part = _interrupted(Xtr, ytr, tmp_path, rounds=37, every=1)
    ck = load_checkpoint(tmp_path)
    assert ck.rounds == 37 == part.n_iter_
    assert np.array_equal(ck.ids, part.support_)
    assert np.array_equal(ck.B, part.dual_coef_.T)
    assert np.array_equal(ck.X, Xtr[ck.ids])
    assert np.array_equal(ck.history["dual"], part.history_["dual"])
    assert ck.settings["C"] == KW["C"] and ck.settings["estimator"] == "MulticlassSVC"
    # only the newest complete group is kept, LATEST names it, no temporary directory remains
    assert sorted(os.listdir(tmp_path)) == ["LATEST", "ckpt-000000037.zarr"]
    assert (tmp_path / "LATEST").read_text().strip() == "ckpt-000000037.zarr"


def test_a_resume_takes_the_pending_rounds_working_set_scores(digits, tmp_path):
    """float64 kernel values send the working set's scores with each round (at this tol
    float32 ones do not: crammer_singer.sends_scores); the checkpoint keeps those of the pending
    round, and the resumed fit is the uninterrupted one, coefficient for coefficient."""
    Xtr, ytr, _, _ = digits
    kw = dict(KW, kernel_dtype="float64")
    full = MulticlassSVC(**kw, solver_options=OPTS).fit(Xtr, ytr)
    _interrupted(Xtr, ytr, tmp_path, rounds=20, every=1, kernel_dtype="float64")
    ck = load_checkpoint(tmp_path)
    sc = ck.pending["scores"]  # (the working set it came from holds every moved row)
    assert sc["F"].shape == (sc["ids"].shape[0], len(full.classes_))
    assert np.isin(ck.pending["ids"], sc["ids"]).all()
    resumed = MulticlassSVC(
        **kw, solver_options=OPTS, checkpoint=str(tmp_path), checkpoint_every=10**6, resume=True
    ).fit(Xtr, ytr)
    assert resumed.n_iter_ == full.n_iter_
    assert np.array_equal(resumed.history_["dual"], full.history_["dual"])
    assert np.array_equal(resumed.dual_coef_, full.dual_coef_)


def test_resume_gives_the_same_model(digits, full, tmp_path):
    Xtr, ytr, Xte, _ = digits
    part = _interrupted(Xtr, ytr, tmp_path, rounds=57, every=5)
    assert load_checkpoint(tmp_path).rounds == 55  # rounds 56-57 are lost with the process
    resumed = MulticlassSVC(
        **KW, solver_options=OPTS, checkpoint=str(tmp_path), checkpoint_every=10**6, resume=True
    ).fit(Xtr, ytr)
    assert resumed.converged_ and part.n_iter_ == 57
    assert len(resumed.history_["dual"]) == resumed.n_iter_  # history continues the old one
    assert np.array_equal(resumed.history_["dual"][:55], part.history_["dual"][:55])
    assert_same_model(full, resumed, [Xtr, Xte], KW["C"])


def _store_run(digits, tmp_path):
    """A store of the digits, the model trained on it, and a checkpoint of a run of it cut
    after 40 rounds: ``(store, model, checkpoint directory)``."""
    from dmcsvm.store import write_arrays

    Xtr, ytr, _, _ = digits
    store = tmp_path / "d.zarr"
    write_arrays(store, Xtr, ytr, rows_per_chunk=128)
    ref = MulticlassSVC(**KW, solver_options=OPTS).fit(str(store))
    ck = tmp_path / "ck"
    _interrupted(str(store), None, ck, rounds=40, every=10)
    return store, ref, ck


@pytest.mark.slow
def test_resume_from_a_store(digits, full, tmp_path):
    Xtr, _, Xte, _ = digits
    store, ref, ck = _store_run(digits, tmp_path)
    resumed = MulticlassSVC(
        **KW, solver_options=OPTS, checkpoint=str(ck), checkpoint_every=10**6, resume=True
    ).fit(str(store))
    assert_same_model(ref, resumed, [Xtr.astype(np.float32), Xte.astype(np.float32)], KW["C"])


@pytest.mark.slow
def test_resume_accepts_other_runtime_settings(digits, tmp_path):
    """Where the data and the column cache live (runtime_params) is not part of a checkpoint: a
    run resumes with another cache_dir, disk_cache_size and data_in_memory and ends as the
    uninterrupted run."""
    from dmcsvm.runtime_params import RESUME_MAY_CHANGE, RUNTIME_PARAMS

    assert {"cache_dir", "disk_cache_size", "data_in_memory"} <= RUNTIME_PARAMS <= RESUME_MAY_CHANGE
    Xtr, _, Xte, _ = digits
    store, ref, ck = _store_run(digits, tmp_path)
    (tmp_path / "cache").mkdir()
    resumed = MulticlassSVC(
        **KW,
        checkpoint=str(ck),
        checkpoint_every=10**6,
        resume=True,
        solver_options={
            **OPTS,
            "cache_dir": str(tmp_path / "cache"),
            "disk_cache_size": 1.0,
            "data_in_memory": False,
        },
    ).fit(str(store))
    assert load_checkpoint(ck).rounds == 40
    assert_same_model(ref, resumed, [Xtr.astype(np.float32), Xte.astype(np.float32)], KW["C"])


def test_resume_refuses_other_settings_or_data(digits, tmp_path):
    Xtr, ytr, _, _ = digits
    _interrupted(Xtr, ytr, tmp_path, rounds=10, every=5)
    with pytest.raises(
        ValueError,
        match=r"was written with other settings or data: C=10.0 "
        r"\(now 3.0\)",
    ):
        MulticlassSVC(
            **{**KW, "C": 3.0}, solver_options=OPTS, checkpoint=str(tmp_path), resume=True
        ).fit(Xtr, ytr)
    y2 = ytr.copy()
    y2[:2] = y2[1::-1] if y2[0] != y2[1] else (y2[:2] + 1) % 10
    with pytest.raises(ValueError, match=r"labels_crc32="):
        MulticlassSVC(**KW, solver_options=OPTS, checkpoint=str(tmp_path), resume=True).fit(Xtr, y2)
    X2 = Xtr.copy()
    X2 += 0.5
    with pytest.raises(
        ValueError,
        match=r"was written for other training data \(data "
        r"fingerprint [0-9a-f]{32}, this data [0-9a-f]{32}\): "
        r"refusing to resume onto it$",
    ):
        MulticlassSVC(**KW, solver_options=OPTS, checkpoint=str(tmp_path), resume=True).fit(X2, ytr)
    # runtime settings (threads, cache, round limit) may change on resume
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = MulticlassSVC(
            **{**KW, "n_jobs": 2, "cache_size": 10},
            solver_options=OPTS,
            checkpoint=str(tmp_path),
            resume=True,
            max_iter=12,
        ).fit(Xtr, ytr)
    assert est.n_iter_ == 12  # max_iter counts the rounds before the checkpoint too


def test_resume_without_checkpoint_starts_fresh(digits, full, tmp_path):
    Xtr, ytr, _, _ = digits
    with pytest.warns(UserWarning, match="no checkpoint in .*: starting from scratch"):
        est = MulticlassSVC(
            **KW,
            solver_options=OPTS,
            checkpoint=str(tmp_path / "new"),
            checkpoint_every=10**6,
            resume=True,
        ).fit(Xtr, ytr)
    assert np.array_equal(est.dual_coef_, full.dual_coef_)
    with pytest.raises(ValueError, match=r"resume=True needs checkpoint"):
        MulticlassSVC(**KW, solver_options=OPTS, resume=True).fit(Xtr, ytr)


def test_checkpointer_triggers_and_interrupted_writes(tmp_path):
    state = CoordinatorState.fresh(5, 3)
    state.B[1] = [1.0, -0.5, -0.5]
    state.bank.add(np.array([1]), np.arange(8.0).reshape(2, 4)[1:])
    ck = Checkpointer(tmp_path, every_rounds=3).bind(state, n_features=4, sparse=False)
    for r in range(1, 8):
        ck(r)
    assert ck.n_written == 2 and load_checkpoint(tmp_path).rounds == 6
    # a crash in the middle of a write leaves a temporary directory: ignored, LATEST unchanged
    os.makedirs(tmp_path / ".ckpt-000000009.zarr.tmp-x")
    assert load_checkpoint(tmp_path).rounds == 6
    # LATEST lost: the newest complete group is found
    os.unlink(tmp_path / "LATEST")
    got = load_checkpoint(tmp_path)
    assert got.rounds == 6 and np.array_equal(got.B, [[1.0, -0.5, -0.5]])
    st, msg = resume_state(got)
    assert np.array_equal(st.B.toarray(), state.B.toarray()) and st.rounds == 6
    assert np.array_equal(msg.ids, [1]) and np.array_equal(msg.XB, [[4.0, 5.0, 6.0, 7.0]])
    timed = Checkpointer(tmp_path / "t", every_seconds=0.0).bind(state, n_features=4, sparse=False)
    timed(1)
    assert timed.n_written == 1


def test_rng_and_assignment_survive(tmp_path):
    state = CoordinatorState.fresh(4, 2)
    rng = np.random.default_rng(7)
    rng.random(3)
    assign = np.array([0, 1, 1, 0])
    Checkpointer(tmp_path, every_rounds=1).bind(
        state, n_features=2, sparse=False, rng=rng, assign=assign
    )(1)
    expected = rng.random(4)
    from dmcsvm.checkpoint import restore_rng

    ck = load_checkpoint(tmp_path)
    assert np.array_equal(ck.assign, assign)
    assert np.array_equal(restore_rng(np.random.default_rng(0), ck.rng).random(4), expected)


def test_bad_checkpoints_and_settings(tmp_path):
    with pytest.raises(ValueError, match=r"no checkpoint \(the directory does not exist\)"):
        load_checkpoint(tmp_path / "none")
    with pytest.raises(ValueError, match=r"no checkpoint in this directory"):
        load_checkpoint(tmp_path)
    import zarr

    g = zarr.open_group(str(tmp_path / "ckpt-000000001.zarr"), mode="w")
    g.attrs["format"] = "something-else"
    with pytest.raises(ValueError, match=r"is not a dmcsvm checkpoint \(format 'something-else'"):
        load_checkpoint(tmp_path)
    g.attrs.update({"format": "dmcsvm-checkpoint", "format_version": 9})
    with pytest.raises(
        ValueError, match=r"checkpoint format_version 9; this dmcsvm reads versions 1 and 2$"
    ):
        load_checkpoint(tmp_path)
    assert parse_every(5) == (5, None) and parse_every("2.5s") == (None, 2.5)
    for bad in (0, "soon", 1.5, True):
        with pytest.raises(ValueError, match=r"checkpoint_every must be a number of rounds"):
            parse_every(bad)
