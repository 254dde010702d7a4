"""Fixtures shared by the test modules.  The helpers themselves (QP oracles, KKT checks, the
direct solver driver) live in ``tests/oracles.py``; import it as ``import oracles``."""

from __future__ import annotations

import faulthandler
import gc
import os
import sys
import time

import oracles
import pytest

import dmcsvm


def _import_dmcsvm_from_here_in_subprocesses():
    """Every process the tests start (console scripts, ``dask`` CLI workers, LocalCluster
    workers) imports dmcsvm from where this process does: one copy of the code, so one numba
    cache.  Without it a fresh clone compiled everything twice, once beside the source tree
    (``python -m pytest``) and once in site-packages (the installed console scripts)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(dmcsvm.__file__)))
    paths = [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


_import_dmcsvm_from_here_in_subprocesses()


def pytest_configure(config):
    """A watchdog on every test process (the xdist workers and the main one): a run still going
    after ``DMCSVM_TEST_WATCHDOG_S`` seconds (default 2400: the README's run takes 6-10 minutes
    on 2 cores, and CI stops a run at 90; 0 turns it off) prints every thread's stack and
    exits.  pytest-timeout (600 s a test, in pyproject.toml) ends a test hung in Python; this
    also ends one hung while holding the GIL, where no signal handler runs."""
    limit = float(os.environ.get("DMCSVM_TEST_WATCHDOG_S", "2400"))
    if limit > 0:
        if "PYTEST_XDIST_WORKER" not in os.environ:
            # the main process of an xdist run waits 2 more minutes: a worker's exit is reported
            # as that worker's test having crashed, and the run goes on without it
            limit += 120
        faulthandler.dump_traceback_later(limit, exit=True, file=sys.stderr)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """With ``-n`` and no ``--dist``, hand tests out by work stealing: many tests wait on Dask
    workers and subprocesses, and stealing keeps every xdist worker busy to the end.  Set here
    rather than in ``addopts`` so that ``pytest`` also runs where pytest-xdist is not installed
    (``--dist`` would then be an unknown option)."""
    opt = config.option
    if getattr(opt, "numprocesses", None) and getattr(opt, "dist", None) == "no":
        opt.dist = "worksteal"


def pytest_collection_modifyitems(items):
    """Tests on the session's LocalCluster are marked ``cluster`` here; tests that start a
    cluster of their own carry the mark themselves.  A module whose test ids come from a helper
    (scikit-learn's ``parametrize_with_checks``) lists its slow ones in ``SLOW_IDS``: tuples of
    substrings that all occur in the test's id.  The slow tests run first."""
    for item in items:
        if "local_client" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
        slow_ids = getattr(getattr(item, "module", None), "SLOW_IDS", ())
        if any(all(part in item.name for part in parts) for parts in slow_ids):
            item.add_marker(pytest.mark.slow)
    # the slow tests first (stable: module order kept within each group), so that the run ends on
    # short tests: pytest-xdist's work stealing can then even out the two workers, where a slow
    # test drawn last kept one worker busy alone for up to a minute
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session")
def cs():
    """The helpers of ``tests/oracles.py`` as a namespace (``cs.cs_dual_qp``, ``cs.run_solver``,
    ...)."""
    return oracles


# ------------------------------------------------------------------------------------------------
# one Dask LocalCluster for the whole session
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def _session_cluster():
    """Two single-threaded worker *processes* (nannies) and an in-process scheduler, started once
    per session: each start costs seconds (worker interpreters importing dask, numpy, numba and
    dmcsvm, and loading the numba cache).  Tests that must kill or restart workers, or that need
    other worker settings (memory limits), start a cluster of their own.

    As in ``distributed.utils_test``: the workers run without the statistical profiler (it samples
    every worker thread every 10 ms and is only read by the dashboard), no dashboard, and at the
    end the cluster is closed and its worker processes are gone."""
    import dask
    from distributed import Client, LocalCluster

    with dask.config.set({"distributed.worker.profile.enabled": False}):
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
    # not the default client: it would send every dask computation of the session to this
    # cluster (dask's scheduler setting), and `default_client()` would find it in every test
    client = Client(cluster, set_as_default=False)
    try:
        pids = list(client.run(os.getpid).values())
        yield client
    finally:
        # closed with time limits (a close waits on the workers' replies): a session's end must
        # not wait forever on a worker that stopped answering
        client.close(timeout=30)
        cluster.close(timeout=60)
    deadline = time.monotonic() + 30
    while [p for p in pids if _running(p)] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if _running(p)], "the session cluster left worker processes"


def _running(pid):
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def local_client(_session_cluster):
    """The session's LocalCluster client.  Every test starts from an idle, whole cluster: the same
    two workers and no task left by an earlier test, which this fixture checks before and after."""
    client = _session_cluster
    workers = _live_workers(client)
    if len(workers) < 2:
        # a nanny restarting a worker (for example under memory pressure from the other test
        # processes) leaves the scheduler short for a moment; wait for it, asking the scheduler
        # itself rather than the client's cached identity
        client.wait_for_workers(2, timeout=60)
        workers = _live_workers(client)
    assert len(workers) == 2, "the session cluster lost a worker"
    _wait_idle(client)
    yield client
    gc.collect()
    _wait_idle(client)
    assert _live_workers(client) == workers, "a worker left the session cluster"


def _live_workers(client):
    """The addresses of the workers the scheduler holds now."""
    return set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.workers)))


def _wait_idle(client, timeout=30.0):
    """Wait until the scheduler holds no task (futures of a finished test are released
    asynchronously); fails after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        n = client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks))
        if n == 0:
            return
        assert time.monotonic() < deadline, f"{n} tasks left on the session cluster"
        time.sleep(0.05)
