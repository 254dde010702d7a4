"""client='local' starts a LocalCluster for the user and closes it afterwards (kept in its own
module so that no other cluster of the test session is alive while it runs; the session's shared
LocalCluster of ``conftest.local_client`` may be, but its client is not the default one, so
``default_client()`` does not see it)."""

import numpy as np
import pytest
from distributed import default_client

from dmcsvm import MulticlassSVC


def _problem(seed=6, n=60, d=6, m=3):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=2.0, size=(m, d))
    y = rng.integers(0, m, n).astype(np.int64)
    return centers[y] + rng.normal(size=(n, d)), y


@pytest.mark.slow
@pytest.mark.cluster
def test_client_local_starts_and_closes_cluster():
    X, y = _problem()
    clf = MulticlassSVC(
        C=1.0,
        client="local",
        n_workers=2,
        threads_per_worker=1,
        memory_limit="1GiB",
        solver_options={"n_partitions": 2},
    ).fit(X, y)
    ref = MulticlassSVC(C=1.0, n_jobs=1, solver_options={"n_partitions": 2}).fit(X, y)
    np.testing.assert_allclose(clf.dual_coef_, ref.dual_coef_, rtol=0, atol=1e-9)

    try:
        default_client()
        raise AssertionError("the LocalCluster's client was left open")
    except ValueError:
        pass
