"""scikit-learn's estimator checks on every estimator, in several solver configurations.

Every check applies and passes except the few listed, with the reason, in
``_expected_failed_checks`` (strict xfail, so a check listed there must really fail).

The linear and polynomial configurations carry a ``max_iter``: ``check_fit_idempotent`` trains on
uncentred data (``loc=100``, 2 features, random labels).  Without a bias the kernel matrix is then
nearly rank one (condition number ~1e6) and the dual decomposition converges extremely slowly
(~100k rounds reach less than 10 % of the optimal dual); the unbounded default ``max_iter=-1`` would
run for minutes.  The check only needs two identical fits, which a bounded run still gives.

``check_sample_weight_equivalence_*`` compares a weighted fit with a fit on repeated rows to
``rtol=1e-7``: both must be the optimum, not two points within ``tol`` of it, so those checks run
each configuration with ``tol=1e-10``, no round limit and float64 kernel values (float32 ones,
the default, round every value at 6e-8 and the optimum moves by ~1e-6; scikit-learn runs its
own LinearSVC check with ``tol=1e-12`` for the same reason, and lists SVC, whose kernel cache
is float, as failing it).
"""

from sklearn.base import clone
from sklearn.utils.estimator_checks import parametrize_with_checks

from dmcsvm import (
    BinarySVC,
    MulticlassSVC,
    MultiPrototypeSVC,
    OneVsOneSVC,
    OneVsRestSVC,
    ScatterSVC,
)

ESTIMATORS = [
    MulticlassSVC(),
    MulticlassSVC(
        n_jobs=2,
        max_iter=200,
        solver_options={
            "optimizer": "all_pairs",
            "pattern_selection": "amg",
            "threshold": "log",
            "batch_size": 1,
        },
    ),
    MulticlassSVC(
        kernel="linear",
        n_jobs=1,
        max_iter=2000,
        solver_options={
            "optimizer": "fixed_point",
            "pattern_selection": "kkt",
            "threshold": "max",
            "batch_size": 16,
        },
    ),
    MulticlassSVC(
        kernel="poly",
        degree=3,
        coef0=1.0,
        n_jobs=2,
        max_iter=150,
        solver_options={
            "optimizer": "opt_kkt",
            "pattern_selection": "bmg",
            "threshold": "exp",
            "batch_size": 8,
        },
    ),
    MultiPrototypeSVC(n_prototypes=2, max_epochs=20, n_jobs=2, max_iter=300),
    MultiPrototypeSVC(n_prototypes=1, kernel="rbf", gamma="scale", n_jobs=1),
    ScatterSVC(),
    ScatterSVC(
        test_rule=2,
        n_jobs=2,
        solver_options={"pair_selection": "mvp", "batch_size": 8, "class_batch": 2},
    ),
    BinarySVC(),
    BinarySVC(kernel="linear", n_jobs=2, max_iter=2000, solver_options={"batch_size": 2}),
    OneVsRestSVC(n_jobs=2),
    OneVsOneSVC(
        kernel="poly",
        degree=2,
        coef0=1.0,
        n_jobs=1,
        max_iter=2000,
        solver_options={"batch_size": 4},
    ),
]


# checks over ~5 s on a quiet 2-core machine, marked ``slow`` by conftest.py (pairs of substrings of
# the test id): the sparse-input checks fit every scipy sparse format, and on their random labels
# the batch_size=1 configuration (~1400 rounds to converge) and the opt_kkt polynomial one do not
# converge.  Both are bounded (max_iter=200 and 150) with the same outcome of every check as
# unbounded: 400 -> 200 rounds took that configuration's checks from 29.9 to 24.4 s at -n 3,
# 300 -> 150 the polynomial one's from 26.6 to 19.2 s
SLOW_IDS = [
    ("'batch_size':1,", "check_estimator_sparse_array"),
    ("'batch_size':1,", "check_estimator_sparse_matrix"),
    ("kernel='poly'", "'optimizer':'opt_kkt'", "check_estimator_sparse_"),
]


def _expected_failed_checks(estimator):
    """``check_class_weight_classifiers`` (class 0 weighted 1000, the others 1e-4, on noisy blobs
    around the origin; at least 87 % of test points must be predicted as class 0) is the only
    check expected to fail, for two models whose ``class_weight`` cannot mean that:

    * a linear Crammer–Singer machine has no bias: its class regions are cones at the origin,
      and the optimum predicts class 0 for 54 % / 60 % of the test points (2 / 3 classes), as
      LIBLINEAR does (``LinearSVC(multi_class='crammer_singer', fit_intercept=False)``: the
      same 0.54 / 0.60);
    * ScatterSVC's weights scale the caps ``mu_i`` of the class-mean weights (Jenssen et al.
      Eq. 6): a heavy class may concentrate its mean on few points, a light one is pushed to
      its centroid; no class's region grows with its weight.

    ``check_sample_weight_equivalence_*`` (integer weights vs repeated rows) fails for
    MultiPrototypeSVC with more than one prototype per class, because they are different models:
    a row of weight 3 has one assignment to a prototype of its class (one slack in Eq. 8), its
    three copies have three assignments, each drawn on its own by Eq. 17.  With one prototype
    per class (a convex problem) the check applies and passes.

    Every other check passes (strict xfail: an entry here must really fail)."""
    why = {
        "check_class_weight_classifiers": "class_weight does not favour a class in this "
        "model (see _expected_failed_checks)"
    }
    if isinstance(estimator, MultiPrototypeSVC) and estimator.n_prototypes != 1:
        reason = (
            "repeated rows are separately assigned patterns, a weighted row is one "
            "(see _expected_failed_checks)"
        )
        return {
            "check_sample_weight_equivalence_on_dense_data": reason,
            "check_sample_weight_equivalence_on_sparse_data": reason,
        }
    if isinstance(estimator, ScatterSVC):
        return why
    if isinstance(estimator, MulticlassSVC) and estimator.kernel == "linear":
        return why
    return {}


#: settings of the sample-weight equivalence checks (see the module docstring)
_EXACT = {"tol": 1e-10, "max_iter": -1, "kernel_dtype": "float64"}
_EXACT_OPTIONS = {"gap_tol": 0.0}


def _check_name(check):
    return getattr(getattr(check, "func", check), "__name__", "")


@parametrize_with_checks(
    ESTIMATORS, expected_failed_checks=_expected_failed_checks, xfail_strict=True
)
def test_sklearn_compatible(estimator, check):
    if _check_name(check).startswith("check_sample_weight_equivalence"):
        estimator = clone(estimator).set_params(
            **{k: v for k, v in _EXACT.items() if k in estimator.get_params()}
        )
        options = estimator._solver_options()
        estimator.set_params(
            solver_options={
                **(estimator.solver_options or {}),
                **{k: v for k, v in _EXACT_OPTIONS.items() if k in options},
            }
        )
    check(estimator)
