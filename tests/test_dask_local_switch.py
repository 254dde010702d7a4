"""client='local' starts a LocalCluster for the user, keeps it for the process's later fits and
closes it at exit or on request (kept in its own module so that no other cluster of the test
session is alive while it runs; the session's shared LocalCluster of ``conftest.local_client``
may be, but its client is not the default one, so ``default_client()`` does not see it).  A
LocalCluster whose workers are threads of this process trains the in-process model too."""

import os

import numpy as np
import pytest
from distributed import Client, LocalCluster, default_client

from dmcsvm import MulticlassSVC, close_local_clusters
from dmcsvm.engine.dask import local


def _problem(seed=6, n=60, d=6, m=3):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=2.0, size=(m, d))
    y = rng.integers(0, m, n).astype(np.int64)
    return centers[y] + rng.normal(size=(n, d)), y


def _glibc() -> bool:
    import platform

    return platform.libc_ver()[0] == "glibc"


def _refaults(nbytes=64 * 2**20) -> tuple:
    """Page faults of filling a fresh numpy block of ``nbytes`` (above glibc's largest mmap
    threshold, 32 MB), then of filling another once the first was freed: a process that keeps
    its freed memory reuses the first block's pages."""
    import resource

    def filled() -> int:
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        np.ones(nbytes // 8)
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0

    return filled(), filled()


@pytest.mark.skipif(not _glibc(), reason="glibc's mallopt")
def test_keep_freed_memory_reuses_a_freed_kernel_block():
    """In a child process (the setting is process-wide): a freed 64 MB block is faulted in
    anew before :func:`local.keep_freed_memory` and reused after."""
    import subprocess
    import sys

    code = (
        "from tests.test_dask_local_switch import _refaults as r;"
        "from dmcsvm.engine.dask.local import keep_freed_memory as k;"
        "print(*r(), k(), *r())"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    before1, before2, kept, after1, after2 = out.stdout.split()
    assert kept == "True"
    assert int(before2) >= 16 and int(before2) > int(before1) // 2  # fresh again
    assert int(after2) <= 2  # the same pages


def _no_default_client():
    with pytest.raises(ValueError):
        default_client()


@pytest.mark.slow
@pytest.mark.cluster
def test_client_local_keeps_one_cluster_for_later_fits_and_closes_it():
    X, y = _problem()
    kw = dict(
        C=1.0,
        client="local",
        n_workers=2,
        threads_per_worker=1,
        memory_limit="1GiB",
        # working sets of 20 rows: the partitions' rounds, on the workers (a working set of
        # every row runs in this process and starts no cluster)
        solver_options={"n_partitions": 2, "batch_size": 20},
    )
    ref = MulticlassSVC(C=1.0, n_jobs=1, solver_options=kw["solver_options"]).fit(X, y)
    close_local_clusters()
    try:
        in_block = MulticlassSVC(**{**kw, "solver_options": {"n_partitions": 2}}).fit(X, y)
        assert local._clusters == {} and in_block.engine_stats_[0]["executor"] == "inprocess"
        first = MulticlassSVC(**kw).fit(X, y)
        assert first.engine_stats_[0]["executor"] == "dask"
        np.testing.assert_array_equal(first.dual_coef_, ref.dual_coef_)
        ((pid, cluster, client),) = local._clusters.values()
        assert pid == os.getpid() and client.status == "running"
        # no Bokeh dashboard on its scheduler (it doubled the cluster's start; the scheduler's
        # plain HTTP routes stay): none attached to its HTTP application
        assert cluster.scheduler.http_application.applications == []
        _no_default_client()  # the kept cluster does not capture the user's computations
        # its workers start without Dask's MALLOC_TRIM_THRESHOLD_ (local.worker_environ), with
        # the rest of its pre-spawn environment (one BLAS thread)
        for nanny in cluster.workers.values():
            assert "MALLOC_TRIM_THRESHOLD_" not in nanny.pre_spawn_env
            assert nanny.pre_spawn_env["OPENBLAS_NUM_THREADS"] == "1"
        # (nor from this process's environment, where the session's cluster left it)
        trim = client.run(lambda: os.environ.get("MALLOC_TRIM_THRESHOLD_"))
        assert set(trim.values()) == {None}
        # quiet when idle: no statistical profiler, slow ticks (local.QUIET)
        import dask

        quiet = client.run(lambda: {k: dask.config.get(k) for k in local.QUIET})
        assert all(v == local.QUIET for v in quiet.values()), quiet
        # and they keep the memory a fit freed for the next fit (local.KeepFreedMemory)
        if _glibc():
            refaults = client.run(_refaults)
            assert all(again <= 2 for _, again in refaults.values()), refaults

        again = MulticlassSVC(**kw).fit(X, y)  # the same cluster, not a new one
        np.testing.assert_array_equal(again.dual_coef_, ref.dual_coef_)
        assert list(local._clusters.values()) == [(pid, cluster, client)]

        # a cluster that stopped behind our back is replaced by the next fit
        cluster.close()
        third = MulticlassSVC(**kw).fit(X, y)
        np.testing.assert_array_equal(third.dual_coef_, ref.dual_coef_)
        ((_, cluster2, client2),) = local._clusters.values()
        assert cluster2 is not cluster and client2.status == "running"
    finally:
        n = close_local_clusters()
    assert n == 1 and local._clusters == {}
    assert client2.status == "closed" and cluster2.status.name == "closed"
    _no_default_client()


@pytest.mark.cluster
@pytest.mark.timeout(90, method="thread")  # a hang here is the bug: end it
def test_workers_in_threads_of_this_process_train_the_in_process_model(monkeypatch):
    """On ``LocalCluster(processes=False)`` the actors' handles reach the client without the
    future an unpickled handle makes, and the workers' BLAS follows this thread's setting: the
    executor keeps both (about every other fit hung on an actor the scheduler had released, and
    optdigits' coefficients then differed by 1e-2)."""
    import gc
    import time

    from dmcsvm.engine.dask import DaskExecutor

    start = DaskExecutor.start

    def start_then_wait(self, *args, **kwargs):
        # time for the scheduler to release whatever the start let go of, every time
        out = start(self, *args, **kwargs)
        gc.collect()
        time.sleep(0.5)
        return out

    monkeypatch.setattr(DaskExecutor, "start", start_then_wait)
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 30))
    y = (X[:, :3] @ rng.normal(size=(3, 4))).argmax(axis=1)
    opts = {"n_partitions": 2, "batch_size": 200}  # the partitions' rounds, on the workers
    ref = MulticlassSVC(n_jobs=2, solver_options=opts).fit(X, y)
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
        ) as cluster,
        Client(cluster, set_as_default=False) as client,
    ):
        got = MulticlassSVC(client=client, n_jobs=2, solver_options=opts).fit(X, y)
    assert got.engine_stats_[0]["executor"] == "dask"
    np.testing.assert_array_equal(got.dual_coef_, ref.dual_coef_)
    np.testing.assert_array_equal(got.predict(X), ref.predict(X))


def test_a_trim_threshold_the_user_configured_is_kept():
    """Only Dask's default ``MALLOC_TRIM_THRESHOLD_`` is left unset in the workers of
    ``client='local'``; a value the user configured reaches them."""
    import dask

    assert dask.config.get(local.TRIM_KEY) == local.DASK_TRIM_DEFAULT
    assert local.worker_environ() == {local.TRIM_KEY: None}
    with dask.config.set({local.TRIM_KEY: 2**20}):
        assert local.worker_environ() == {}
