"""scikit-learn's estimator checks on MulticlassSVC, in several solver configurations.

Every check applies and passes; ``expected_failed_checks`` is therefore empty (strict xfail, so a
check added to it must really fail).

The linear and polynomial configurations carry a ``max_iter``: ``check_fit_idempotent`` trains on
uncentred data (``loc=100``, 2 features, random labels).  Without a bias the kernel matrix is then
nearly rank one (condition number ~1e6) and the dual decomposition converges extremely slowly
(~100k rounds reach less than 10 % of the optimal dual); the unbounded default ``max_iter=-1`` would
run for minutes.  The check only needs two identical fits, which a bounded run still gives.
"""

from sklearn.utils.estimator_checks import parametrize_with_checks

from dmcsvm import (BinarySVC, MulticlassSVC, MultiPrototypeSVC, OneVsOneSVC, OneVsRestSVC,
                    ScatterSVC)

ESTIMATORS = [
    MulticlassSVC(),
    MulticlassSVC(optimizer="all_pairs", selection="amg", threshold="log", batch_size=1,
                  n_jobs=2),
    MulticlassSVC(kernel="linear", optimizer="fixed_point", selection="kkt", threshold="max",
                  batch_size=16, n_jobs=1, max_iter=2000),
    MulticlassSVC(kernel="poly", degree=3, coef0=1.0, optimizer="opt_kkt", selection="bmg",
                  threshold="exp", batch_size=8, n_jobs=2, max_iter=1000),
    MultiPrototypeSVC(n_prototypes=2, max_epochs=20, n_jobs=2, max_iter=300),
    MultiPrototypeSVC(n_prototypes=1, kernel="rbf", gamma="scale", n_jobs=1),
    ScatterSVC(),
    ScatterSVC(test_rule=2, selection="mvp", batch_size=8, class_batch=2, n_jobs=2),
    BinarySVC(),
    BinarySVC(kernel="linear", batch_size=2, n_jobs=2, max_iter=2000),
    OneVsRestSVC(n_jobs=2),
    OneVsOneSVC(kernel="poly", degree=2, coef0=1.0, batch_size=4, n_jobs=1, max_iter=2000),
]


# checks over ~5 s on a quiet 2-core machine, marked ``slow`` by conftest.py (pairs of substrings of
# the test id): the sparse-input checks fit every scipy sparse format, and with batch_size=1 each
# fit takes ~1600 rounds (the opt_kkt polynomial configuration: up to its max_iter=1000)
SLOW_IDS = [
    ("batch_size=1,", "check_estimator_sparse_array"),
    ("batch_size=1,", "check_estimator_sparse_matrix"),
    ("kernel='poly'", "optimizer='opt_kkt'", "check_estimator_sparse_"),
]


def _expected_failed_checks(estimator):
    """No check is expected to fail for any configuration."""
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=_expected_failed_checks,
                         xfail_strict=True)
def test_sklearn_compatible(estimator, check):
    check(estimator)
