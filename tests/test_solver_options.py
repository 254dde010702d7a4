"""``solver_options``: one dict of the solver's internals per estimator, checked with exact
messages, defaults in one place (dmcsvm.solver_options), part of get_params / clone, and the
parameter names of dmcsvm 0.2 still taken (constructor, set_params, command line) with a
FutureWarning and read from model files and checkpoints."""

from __future__ import annotations

import json
import re
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_iris
from sklearn.utils._param_validation import InvalidParameterError

from dmcsvm import (
    BinarySVC,
    MulticlassSVC,
    MultiPrototypeSVC,
    OneVsOneSVC,
    OneVsRestSVC,
    ScatterSVC,
)
from dmcsvm.coordinators.crammer_singer import SolverSettings
from dmcsvm.model_io import load_model, save_model
from dmcsvm.param_history import MOVED
from dmcsvm.solver_options import DEFAULTS, OPTIONS

ALL = [MulticlassSVC, MultiPrototypeSVC, ScatterSVC, BinarySVC, OneVsRestSVC, OneVsOneSVC]


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return X, y


def test_every_estimator_has_its_options_in_the_one_table():
    names = {o.name for o in OPTIONS}
    for cls in ALL:
        assert set(DEFAULTS[cls.__name__]) <= names
        assert "solver_options" in cls().get_params()
        doc = " ".join(cls.__doc__.split())
        for k, v in DEFAULTS[cls.__name__].items():  # the docstring shows each default
            assert re.search(rf"- ``{k}`` \([^\n]*?; default ``{re.escape(repr(v))}``\)", doc), (
                cls,
                k,
            )


def test_solver_settings_read_the_same_defaults():
    from dmcsvm.estimators._engine import AUTO_BATCH_MIN

    s, d = SolverSettings(), DEFAULTS["MulticlassSVC"]
    # batch_size None: sized by the data in fit, never below what the settings take alone
    assert d["batch_size"] is None and s.batch_size == AUTO_BATCH_MIN
    assert (
        s.inner_steps,
        s.selection,
        s.optimizer,
        s.gap_tol,
        s.batch_sweeps,
        s.threshold,
        s.threshold_fraction,
    ) == (
        d["inner_steps"],
        d["pattern_selection"],
        d["optimizer"],
        d["gap_tol"],
        d["batch_sweeps"],
        d["threshold"],
        d["threshold_fraction"],
    )


def test_one_name_per_meaning():
    assert "pattern_selection" in DEFAULTS["MulticlassSVC"]
    assert "pattern_selection" in DEFAULTS["MultiPrototypeSVC"]
    for name in ("ScatterSVC", "BinarySVC", "OneVsRestSVC", "OneVsOneSVC"):
        assert "pair_selection" in DEFAULTS[name] and "pattern_selection" not in DEFAULTS[name]
    assert all("selection" not in d for d in DEFAULTS.values())


@pytest.mark.parametrize(
    "cls, options, err, msg",
    [
        (
            MulticlassSVC,
            {"batch_size": 0},
            InvalidParameterError,
            "The 'batch_size' entry of MulticlassSVC's solver_options must be an int in the range "
            "[1, inf) or None. Got 0 instead.",
        ),
        (
            MulticlassSVC,
            {"pattern_selection": "wss2"},
            InvalidParameterError,
            "The 'pattern_selection' entry of MulticlassSVC's solver_options must be a str among "
            "{'kkt', 'amg', 'bmg'}. Got 'wss2' instead.",
        ),
        (
            OneVsRestSVC,
            {"batch_size": 1},
            InvalidParameterError,
            "The 'batch_size' entry of OneVsRestSVC's solver_options must be an int in the range "
            "[2, inf). Got 1 instead.",
        ),
        (
            ScatterSVC,
            {"pair_selection": "bmg"},
            InvalidParameterError,
            "The 'pair_selection' entry of ScatterSVC's solver_options must be a str among "
            "{'mvp', 'wss2'}. Got 'bmg' instead.",
        ),
        (
            MulticlassSVC,
            {"n_partitions": True},
            InvalidParameterError,
            "The 'n_partitions' entry of MulticlassSVC's solver_options must be an int in the "
            "range [1, inf) or None. Got True instead.",
        ),
        (
            MulticlassSVC,
            {"selection": "kkt"},
            ValueError,
            "MulticlassSVC's solver_options has no key 'selection' "
            "(it is called 'pattern_selection' now); its keys are 'batch_size', "
            "'pattern_selection', 'gap_tol', 'optimizer', "
            "'threshold', 'threshold_fraction', 'n_partitions', 'batch_sweeps', 'inner_steps', "
            "'linear_solver', 'data_in_memory', 'disk_cache_size', 'cache_dir'",
        ),
        (
            BinarySVC,
            {"class_batch": 3},
            ValueError,
            "BinarySVC's solver_options has no key 'class_batch'; its keys are 'pair_selection', "
            "'batch_size', 'n_partitions'",
        ),
        (
            MulticlassSVC,
            [("batch_size", 10)],
            InvalidParameterError,
            "The 'solver_options' parameter of MulticlassSVC must be an instance of 'dict' "
            "or None. Got [('batch_size', 10)] instead.",
        ),
    ],
)
def test_bad_options_say_which_and_why(iris, cls, options, err, msg):
    X, y = iris
    if cls is BinarySVC:
        X, y = X[y < 2], y[y < 2]
    with pytest.raises(err, match=re.escape(msg) + "$"):
        cls(solver_options=options).fit(X, y)


def test_options_are_a_plain_parameter(iris):
    X, y = iris
    options = {"batch_size": 50, "n_partitions": 2}
    m = MulticlassSVC(solver_options=options)
    assert m.get_params()["solver_options"] is options
    c = clone(m)
    assert c.get_params()["solver_options"] == options
    m.fit(X, y)
    assert options == {"batch_size": 50, "n_partitions": 2}  # never changed
    c.set_params(solver_options={"batch_size": 1000})
    assert c.solver_options == {"batch_size": 1000}


def test_former_names_warn_and_fit_the_same_model(iris):
    X, y = iris
    with pytest.warns(
        FutureWarning,
        match=re.escape(
            "MulticlassSVC(selection=...) is deprecated since 0.3.0 and will be removed in "
            "0.4.0: pass solver_options={'pattern_selection': ...} instead (renamed "
            "'pattern_selection')"
        ),
    ):
        old = MulticlassSVC(selection="kkt", batch_size=30, solver_options={"batch_size": 40})
    assert old.solver_options == {"pattern_selection": "kkt", "batch_size": 40}
    new = MulticlassSVC(solver_options={"pattern_selection": "kkt", "batch_size": 40})
    np.testing.assert_array_equal(old.fit(X, y).dual_coef_, new.fit(X, y).dual_coef_)
    with pytest.warns(
        FutureWarning,
        match=re.escape(
            "OneVsOneSVC(batch_size=...) is deprecated since 0.3.0 and will be removed in "
            "0.4.0: pass solver_options={'batch_size': ...} instead"
        ),
    ):
        m = OneVsOneSVC().set_params(batch_size=16, C=2.0)
    assert m.solver_options == {"batch_size": 16} and m.C == 2.0
    with pytest.warns(FutureWarning, match=r"MultiPrototypeSVC\(solver=\.\.\.\)"):
        assert MultiPrototypeSVC(solver="rounds").solver_options == {"linear_solver": "rounds"}


def test_an_unknown_keyword_is_a_type_error():
    with pytest.raises(
        TypeError,
        match=re.escape("ScatterSVC.__init__() got an unexpected keyword argument 'optimizer'"),
    ):
        ScatterSVC(optimizer="exact")


def test_defaults_construct_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for cls in ALL:
            clone(cls(solver_options={}))


def _flatten_to_0_2(path, name):
    """Rewrite a saved model as dmcsvm 0.2 wrote it: every solver option a parameter of its own
    under its 0.2 name, runtime ones included (n_partitions)."""
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(bytes(arrays["meta"]).decode())
    params = meta["model"]["params"]
    assert params.pop("solver_options") is None
    old_of = {new: old for old, new in MOVED[name].items()}
    for k, v in DEFAULTS[name].items():
        if k in old_of:
            params[old_of[k]] = v
    params["n_partitions"] = 3
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **arrays)


@pytest.mark.parametrize("cls", [MulticlassSVC, OneVsRestSVC])
def test_model_files_with_the_former_names_load(iris, tmp_path, cls):
    X, y = iris
    est = cls(n_jobs=1).fit(X, y)
    path = tmp_path / "m.npz"
    save_model(est, path)
    _flatten_to_0_2(path, cls.__name__)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # loading names no deprecation
        back = load_model(path)
    moved = set(MOVED[cls.__name__].values())
    want = {
        k: v
        for k, v in DEFAULTS[cls.__name__].items()
        if k in moved
        and k not in ("n_partitions", "data_in_memory", "disk_cache_size", "cache_dir")
    }
    assert back.solver_options == want  # runtime n_partitions dropped
    np.testing.assert_array_equal(back.decision_function(X), est.decision_function(X))


def test_checkpoints_with_the_former_names_resume(iris, tmp_path):
    """A checkpoint of dmcsvm 0.2 recorded the solver options as parameters (selection=...):
    today's fit with the same options resumes from it."""
    import zarr

    from dmcsvm.checkpoint import has_checkpoint

    X, y = iris
    ck = tmp_path / "ck"
    kw = dict(checkpoint=str(ck), checkpoint_every=1, max_iter=3, n_jobs=1)
    with pytest.warns(Warning):
        MulticlassSVC(**kw, solver_options={"batch_size": 8}).fit(X, y)  # max_iter: warns
    assert has_checkpoint(str(ck))
    for path in ck.glob("ckpt-*.zarr"):
        g = zarr.open_group(str(path), mode="r+")
        meta = dict(g.attrs)
        settings = meta["settings"]
        settings["selection"] = settings.pop("pattern_selection")
        for k in ("inner_steps", "linear_solver"):  # options 0.2 did not have
            settings.pop(k)
        g.attrs["settings"] = settings
    m = MulticlassSVC(**dict(kw, max_iter=-1, resume=True), solver_options={"batch_size": 8})
    m.fit(X, y)
    assert m.converged_
    with pytest.raises(
        ValueError,
        match=r"was written with other settings or data: "
        r"batch_size=8 \(now 9\)",
    ):
        MulticlassSVC(**dict(kw, resume=True), solver_options={"batch_size": 9}).fit(X, y)
