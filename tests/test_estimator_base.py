"""One shape for every estimator: the shared base class, declared parameter
constraints, keyword-only constructors and the one "where it runs" docstring text."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from dmcsvm import (
    BinarySVC,
    MulticlassSVC,
    MultiPrototypeSVC,
    OneVsOneSVC,
    OneVsRestSVC,
    ScatterSVC,
)
from dmcsvm.cli._params import param_defaults, param_docs
from dmcsvm.estimators._base import OUT_OF_CORE_DOC, WHERE_IT_RUNS_DOC, SVMEstimator

ESTIMATORS = [MulticlassSVC, MultiPrototypeSVC, ScatterSVC, BinarySVC, OneVsRestSVC, OneVsOneSVC]
OUT_OF_CORE = ("checkpoint", "checkpoint_every", "resume")

# a value outside every constraint of the parameter (per estimator where they differ)
BAD = {
    "C": -1.0,
    "kernel": "laplacian",
    "gamma": "bogus",
    "degree": 2.5,
    "coef0": np.inf,
    "optimizer": "newton",
    "pattern_selection": "random",
    "pair_selection": "random",
    "threshold": "cosine",
    "threshold_fraction": 1.5,
    "inner_steps": -1.0,
    "linear_solver": "fast",
    "tol": 0.0,
    "gap_tol": -0.1,
    "cache_size": -1,
    "max_iter": 0,
    "batch_size": 0,
    "batch_sweeps": 0,
    "shrinking": "yes",
    "verbose": "loud",
    "probability": "yes",
    "random_state": "seed",
    "n_jobs": 0,
    "client": 42,
    "n_workers": 0,
    "threads_per_worker": 0,
    "memory_limit": -1,
    "n_partitions": 0,
    "checkpoint": 3,
    "checkpoint_every": 0,
    "resume": "yes",
    "data_in_memory": "yes",
    "disk_cache_size": -1,
    "cache_dir": 3,
    "warm_start": "yes",
    "class_weight": "balance",
    "n_prototypes": 0,
    "T0": -1.0,
    "tau": 1.0,
    "max_epochs": -1,
    "fast_linear": "yes",
    "test_rule": 3,
    "class_batch": 0,
    "kernel_dtype": "float16",
    "decision_function_shape": "ova",
    "solver_options": "fast",
}
BAD_FOR = {
    ScatterSVC: {"mu": "half", "batch_size": 1},
    BinarySVC: {"batch_size": 1},
    OneVsRestSVC: {"batch_size": 1},
    OneVsOneSVC: {"batch_size": 1},
}

X3 = np.random.default_rng(0).normal(size=(12, 2))
Y3 = np.arange(12) % 3


def _cases():
    for cls in ESTIMATORS:
        for name in sorted(cls().get_params()):
            yield pytest.param(cls, name, False, id=f"{cls.__name__}-{name}")
        for name in sorted(cls()._solver_options()):
            yield pytest.param(cls, name, True, id=f"{cls.__name__}-solver_options-{name}")


@pytest.mark.parametrize("cls,name,option", list(_cases()))
def test_bad_value_of_every_parameter_names_it_and_the_estimator(cls, name, option):
    own = BAD_FOR.get(cls, {})
    bad = own[name] if name in own else BAD[name]
    X, y = (X3, Y3 % 2) if cls is BinarySVC else (X3, Y3)
    what = f"entry of {cls.__name__}'s solver_options" if option else f"parameter of {cls.__name__}"
    with pytest.raises(
        InvalidParameterError,
        match=f"^The '{name}' {what} must be .* Got {re.escape(repr(bad))} instead.$",
    ):
        cls(**({"solver_options": {name: bad}} if option else {name: bad})).fit(X, y)


@pytest.mark.parametrize(
    "cls,params,message",
    [
        (
            MulticlassSVC,
            {"C": 0},
            "The 'C' parameter of MulticlassSVC must be a float in the range (0.0, inf). "
            "Got 0 instead.",
        ),
        (
            OneVsOneSVC,
            {"max_iter": -2},
            (
                "The 'max_iter' parameter of OneVsOneSVC must be an int in the range [1, inf) "
                "or -1. Got -2 instead."
            ),
        ),
        (
            MultiPrototypeSVC,
            {"solver_options": {"linear_solver": "fast"}},
            (
                "The 'linear_solver' entry of MultiPrototypeSVC's solver_options must be a str "
                "among {'auto', 'sequential', 'rounds'}. Got 'fast' instead."
            ),
        ),
        (
            ScatterSVC,
            {"n_jobs": 0},
            (
                "The 'n_jobs' parameter of ScatterSVC must be an int in the range (-inf, -1], "
                "an int in the range [1, inf) or None. Got 0 instead."
            ),
        ),
        (
            BinarySVC,
            {"kernel": "cosine"},
            (
                "The 'kernel' parameter of BinarySVC must be a str among {'linear', 'poly', 'rbf', "
                "'sigmoid'}. Got 'cosine' instead."
            ),
        ),
        (
            MulticlassSVC,
            {"kernel": "cosine"},
            (
                "The 'kernel' parameter of MulticlassSVC must be a str among "
                "{'linear', 'poly', 'rbf', 'sigmoid', 'precomputed'} or a callable. "
                "Got 'cosine' instead."
            ),
        ),
    ],
)
def test_exact_messages(cls, params, message):
    with pytest.raises(ValueError) as e:  # InvalidParameterError is a ValueError too
        cls(**params).fit(X3, Y3)
    assert str(e.value) == message


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_bools_are_not_numbers_but_numpy_numbers_are(cls):
    """A bool is refused where a number is meant (dmcsvm's rule before the constraints);
    numpy integers and floats are numbers."""
    with pytest.raises(InvalidParameterError, match="'max_iter' parameter"):
        cls(max_iter=True)._validate_params()
    with pytest.raises(InvalidParameterError, match="'tol' parameter"):
        cls(tol=False)._validate_params()
    cls(
        tol=np.float32(1e-3),
        max_iter=np.int64(5),
        cache_size=np.int32(10),
        n_jobs=np.int8(1),
        degree=np.int64(2),
        coef0=np.float64(1.0),
        gamma=np.float32(0.5),
        probability=np.bool_(False),
    )._validate_params()
    cls()._validate_params()  # every default is allowed


def test_values_accepted_as_before():
    MulticlassSVC(
        checkpoint_every="30s",
        memory_limit="2GB",
        client="local",
        n_workers=2,
        threads_per_worker=1,
        n_jobs=-1,
        class_weight={0: 2.0},
        solver_options={
            "data_in_memory": False,
            "disk_cache_size": 0,
            "threshold_fraction": 0,
            "gap_tol": 0,
        },
    )._validate_params()
    MultiPrototypeSVC(
        n_prototypes=[1, 2, 3],
        T0=0,
        max_epochs=0,
        solver_options={"batch_size": None, "batch_sweeps": None},
    )._validate_params()
    MultiPrototypeSVC(n_prototypes=np.array([2, 2]))._validate_params()
    ScatterSVC(mu=0.5, test_rule=np.int64(2), class_weight="balanced")._validate_params()
    ScatterSVC(mu="auto")._validate_params()


def test_cross_parameter_check_keeps_its_message():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "linear_solver='sequential' needs a linear kernel ('linear' or 'poly' of degree 1)"
        ),
    ):
        MultiPrototypeSVC(
            kernel="rbf", max_epochs=1, solver_options={"linear_solver": "sequential"}
        ).fit(X3, Y3)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_positional_construction_is_refused(cls):
    with pytest.raises(TypeError):
        cls(1.0)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_params_signature_and_constraints_agree(cls):
    sig = inspect.signature(cls.__init__).parameters
    # ``**former``: the parameter names of dmcsvm 0.2, taken with a FutureWarning
    assert [n for n in sig if sig[n].kind is inspect.Parameter.VAR_KEYWORD] == ["former"]
    assert "former" not in inspect.signature(cls).parameters  # what help() shows
    names = [n for n in sig if n not in ("self", "former")]
    assert all(sig[n].kind is inspect.Parameter.KEYWORD_ONLY for n in names)
    assert set(cls().get_params()) == set(names)
    assert set(names) <= set(cls._parameter_constraints)
    base = SVMEstimator._parameter_constraints
    # shared constraints, but the kernels MulticlassSVC adds (precomputed, callable)
    widened = {"kernel"} if cls is MulticlassSVC else set()
    assert all(cls._parameter_constraints[k] is v for k, v in base.items() if k not in widened)
    # the CLI derives its options from the signature and the docstring
    assert param_defaults(cls) == cls().get_params()
    docs = param_docs(cls)
    for name in (
        "client",
        "n_jobs",
        "solver_options",
        "memory_limit",
        "cache_size",
        "verbose",
        "class_weight",
        "random_state",
    ):
        assert name in docs, (cls.__name__, name)


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_docstrings_share_the_where_it_runs_text(cls):
    assert WHERE_IT_RUNS_DOC in cls.__doc__
    assert "%(" not in cls.__doc__
    has_out_of_core = set(OUT_OF_CORE) <= set(cls().get_params())
    if has_out_of_core:
        assert OUT_OF_CORE_DOC in cls.__doc__
    else:  # say why not, in the class docstring
        assert re.search(
            r"Checkpoints and the out-of-core options .* are not offered: ",
            " ".join(cls.__doc__.split()),
        )
        assert not set(OUT_OF_CORE) & set(cls().get_params())


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_tags(cls):
    tags = cls().__sklearn_tags__()
    assert tags.input_tags.sparse
    assert tags.estimator_type == "classifier"
    assert tags.classifier_tags.multi_class is (cls is not BinarySVC)
