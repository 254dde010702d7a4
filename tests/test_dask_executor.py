"""The Dask executor runs the same partition code as the in-process executor: same coefficients."""

from __future__ import annotations

import contextlib
import os
import pickle
import re
import signal
import subprocess
import time

import numpy as np
import pytest
from cli_cluster import dask_cli, scheduler_address, scheduler_args
from distributed import Client, LocalCluster

from dmcsvm import MulticlassSVC
from dmcsvm.coordinators.crammer_singer import SolverSettings, solve
from dmcsvm.engine.dask import DaskExecutor
from dmcsvm.engine.executor import InProcessExecutor
from dmcsvm.engine.messages import RoundMessage, pack_message, unpack_message
from dmcsvm.engine.partition import PartitionSettings
from dmcsvm.kernels import KernelSpec
from dmcsvm.numerics import pattern as pt

OPTIMIZERS = list(pt.OPTIMIZERS)


def _problem(seed=3, n=90, d=6, m=4):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=2.0, size=(m, d))
    y = rng.integers(0, m, n).astype(np.int64)
    X = centers[y] + rng.normal(size=(n, d))
    return X, y


def _run(executor, X, y, optimizer, selection="bmg", batch=8, n_parts=3):
    m = int(y.max()) + 1
    spec = KernelSpec("rbf", 0.2)
    s = SolverSettings(
        C=2.0, optimizer=optimizer, selection=selection, tol=1e-6, gap_tol=0.0, batch_size=batch
    ).check()
    ps = PartitionSettings(
        kernel=spec.to_dict(),
        C=s.C,
        selection=pt.SELECTIONS[selection],
        tol=s.tol,
        n_candidates=batch,
        pcls=np.arange(m),
        cache_bytes=10**6,
    )
    executor.n_partitions = n_parts
    executor.start(X, y, y, ps)
    try:
        r = solve(executor, X.shape[0], np.arange(m), spec, s, X.shape[1], False)
    finally:
        executor.close()
    B = np.zeros((X.shape[0], m))
    B[r.support] = r.coef
    return B, r


@pytest.fixture(scope="module")
def reference():
    X, y = _problem()
    return X, y, {opt: _run(InProcessExecutor(2), X, y, opt) for opt in OPTIMIZERS}


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_localcluster_matches_inprocess(local_client, reference, optimizer):
    X, y, ref = reference
    B_ref, r_ref = ref[optimizer]
    B, r = _run(DaskExecutor(local_client), X, y, optimizer)
    assert r.n_iter == r_ref.n_iter
    np.testing.assert_allclose(B, B_ref, rtol=0, atol=1e-9)
    assert r.converged


def test_localcluster_matches_inprocess_with_rounds_in_the_block(local_client, reference):
    """A working set of every row runs the rounds in the coordinator's Gram block
    (coordinators.whole_block) on either executor; the Dask partitions take the same result
    in one message and find it converged, as the in-process ones do."""
    X, y, _ = reference
    B_ref, r_ref = _run(InProcessExecutor(2), X, y, "exact", batch=200)
    B, r = _run(DaskExecutor(local_client), X, y, "exact", batch=200)
    assert r.converged and r.n_iter == r_ref.n_iter
    assert r.history["rows_computed"][-1] == 0  # no partition computed a kernel column
    np.testing.assert_array_equal(B, B_ref)


def _started(client, X, y, n_partitions) -> DaskExecutor:
    """An executor with its partitions built (no rounds run)."""
    ex = DaskExecutor(client, n_partitions=n_partitions)
    ps = PartitionSettings(
        kernel=KernelSpec("rbf", 0.2).to_dict(),
        C=1.0,
        selection=0,
        tol=1e-3,
        n_candidates=4,
        pcls=np.arange(int(y.max()) + 1),
    )
    return ex.start(X, y, y, ps)


def test_partitions_are_spread_over_workers(local_client, reference):
    X, y, _ = reference
    ex = _started(local_client, X, y, 4)
    try:
        assert len(set(ex.placement)) == 2
        stats = ex.stats()
        assert [s["rows"] for s in stats] == [22, 23, 22, 23]
    finally:
        ex.close()


def test_rebuilt_rows_get_a_key_of_their_own(local_client, reference):
    """Rows scattered again to rebuild a lost partition get a fresh key: under their content
    hash (the first scatter's key) the scheduler may still know them as lost with the dead
    worker and cancel the new partition for 'lost dependencies' (seen in CI).  And a cancelled
    build is waited on like any other (distributed's ``wait`` raises for it)."""
    from dmcsvm.engine.dask import liveness

    X, y, _ = reference
    ex = _started(local_client, X, y, 2)
    try:
        w = ex.placement[0]
        lo, hi = ex._build[0][:2]
        hashed = local_client.scatter(X[lo:hi], workers=[w], direct=True)
        again = [ex._rows_for(0, w) for _ in range(2)]
        assert len({hashed.key, again[0].key, again[1].key}) == 3
        np.testing.assert_array_equal(again[0].result(timeout=120), X[lo:hi])
        # cancelled at once, but its worker's one thread still sleeps it out (cancel does not
        # interrupt a running task): 30 s here made the next test on the session cluster wait
        slow = local_client.submit(time.sleep, 3, pure=False)
        local_client.cancel([slow])
        with local_client.as_current():
            liveness.settle(slow)
        assert slow.status == "cancelled"
        del hashed, again, slow
    finally:
        ex.close()


@pytest.mark.parametrize("direct", [None, False])
def test_actor_calls_skip_the_scheduler_when_workers_answer(local_client, reference, direct):
    """A default Client (direct_to_workers=None) relays actor calls through the scheduler's
    ``proxy`` handler, a second hop each way; the executor sends them straight to reachable
    workers instead, leaves the user's client setting as it found it, and computes the same."""
    X, y, ref = reference
    B_ref, r_ref = ref["opt_kkt"]
    sched = local_client.cluster.scheduler
    relayed = []
    proxy = sched.handlers["proxy"]

    async def counting_proxy(**kw):
        relayed.append(kw.get("msg", {}).get("op"))
        return await proxy(**kw)

    sched.handlers["proxy"] = counting_proxy
    try:
        ex = DaskExecutor(local_client, direct=direct)
        B, r = _run(ex, X, y, "opt_kkt")
    finally:
        sched.handlers["proxy"] = proxy
    assert local_client.direct_to_workers is None
    np.testing.assert_allclose(B, B_ref, rtol=0, atol=1e-9)
    assert r.n_iter == r_ref.n_iter
    if direct is None:
        assert ex.direct is True
        assert relayed == []
    else:
        assert ex.direct is False
        # every round (one call per worker: 2 workers hold the 3 partitions) and every other
        # call went through the scheduler
        assert len(ex.groups) == 2
        assert relayed.count("actor_execute") >= 2 * r.n_iter


def test_packed_message_round_trip_is_exact():
    """The wire form of a round's message: a mostly-zero dB travels as CSR (smaller) and comes
    back dense with the same values; a dense dB travels dense; other fields are untouched."""
    rng = np.random.default_rng(0)
    dB = np.zeros((500, 26))
    nz = rng.random(dB.shape) < 0.1
    dB[nz] = rng.normal(size=int(nz.sum()))
    msg = RoundMessage(
        ids=np.arange(500), XB=rng.random((500, 16)).astype(np.float32), dB=dB, shrink_margin=0.25
    )
    blob = pack_message(msg)
    out = unpack_message(blob)
    assert type(out) is RoundMessage
    np.testing.assert_array_equal(out.ids, msg.ids)
    np.testing.assert_array_equal(out.dB, dB)
    assert out.dB.dtype == np.float64 and out.dB.flags.c_contiguous
    np.testing.assert_array_equal(out.XB, msg.XB)
    assert out.XB.dtype == np.float32 and out.shrink_margin == 0.25
    assert out.unshrink is None and out.reship is False
    wire = {"ids": msg.ids, "XB": msg.XB, "dB": dB, "shrink_margin": 0.25, "kind": "RoundMessage"}
    assert len(blob) < len(pickle.dumps(wire, protocol=5)) - dB.nbytes // 2
    dense = dict(wire, dB=rng.normal(size=(500, 26)))
    blob = pack_message(RoundMessage(ids=msg.ids, XB=msg.XB, dB=dense["dB"], shrink_margin=0.25))
    np.testing.assert_array_equal(unpack_message(blob).dB, dense["dB"])
    assert len(blob) == len(pickle.dumps(dense, protocol=5))
    assert unpack_message(pack_message(RoundMessage(shrink_margin=1.0))) == RoundMessage(
        shrink_margin=1.0
    )


def test_estimator_client_switch(local_client):
    X, y = _problem(seed=5, n=120)
    opts = {"n_partitions": 2, "batch_size": 40}  # the partitions' rounds, on the workers
    a = MulticlassSVC(C=3.0, gamma=0.3, n_jobs=2, solver_options=opts).fit(X, y)
    b = MulticlassSVC(C=3.0, gamma=0.3, client=local_client, solver_options=opts).fit(X, y)
    assert [s["executor"] for s in b.engine_stats_] == ["dask", "dask"]
    np.testing.assert_array_equal(a.support_, b.support_)
    np.testing.assert_allclose(a.dual_coef_, b.dual_coef_, rtol=0, atol=1e-9)
    assert local_client.status == "running"  # a user's client is never closed for them


def test_a_fit_whose_rounds_run_in_the_block_stays_in_this_process(local_client, monkeypatch):
    """Every row in one working set whose block fits (the default on small data): the rounds
    run in the coordinator's block, so the rows are never placed on the workers and the model
    is the in-process one bit for bit; rows in a store stay where the workers read them."""
    X, y = _problem(seed=5, n=120)
    a = MulticlassSVC(C=3.0, gamma=0.3, n_jobs=2, solver_options={"n_partitions": 2}).fit(X, y)

    def placed(*args, **kwargs):
        raise AssertionError("the rows were placed on the workers")

    monkeypatch.setattr(DaskExecutor, "start", placed)
    b = MulticlassSVC(
        C=3.0, gamma=0.3, n_jobs=2, client=local_client, solver_options={"n_partitions": 2}
    ).fit(X, y)
    assert [s["executor"] for s in b.engine_stats_] == ["inprocess", "inprocess"]
    np.testing.assert_array_equal(a.dual_coef_, b.dual_coef_)
    np.testing.assert_array_equal(a.support_, b.support_)


def test_bad_client_value():
    X, y = _problem(seed=6, n=30, m=3)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "The 'client' parameter of MulticlassSVC must be None, an instance of 'str' or an "
            "object implementing 'submit' and 'gather'. Got 42 instead."
        ),
    ):
        MulticlassSVC(client=42).fit(X, y)


def _bmg_settings():
    """Partition settings of the tests that start a cluster of their own (``_problem``'s four
    classes, RBF, BMG selection)."""
    return PartitionSettings(
        kernel=KernelSpec("rbf", 0.2).to_dict(),
        C=1.0,
        selection=pt.SEL_BMG,
        tol=1e-3,
        n_candidates=8,
        pcls=np.arange(4),
    )


# ------------------------------------------------------------------ a real cluster
@pytest.fixture(scope="module")
def real_cluster(tmp_path_factory):
    """`dask scheduler` and two `dask worker` processes on 127.0.0.1, shut down after."""
    cli = dask_cli()
    logdir = tmp_path_factory.mktemp("cluster")
    procs = []

    def spawn(args, name):
        log = open(logdir / f"{name}.log", "w")
        # a session of its own: the teardown kills it with every process it started
        procs.append(
            subprocess.Popen(
                [cli, *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=str(logdir),
                start_new_session=True,
            )
        )

    spawn(scheduler_args(logdir / "scheduler.json"), "scheduler")
    try:
        addr = scheduler_address(logdir / "scheduler.json", procs[0])
        for k in range(2):
            spawn(
                [
                    "worker",
                    addr,
                    "--nthreads",
                    "1",
                    "--nworkers",
                    "1",
                    "--no-dashboard",
                    "--host",
                    "127.0.0.1",
                    "--memory-limit",
                    "2GiB",
                ],
                f"worker{k}",
            )
        deadline = time.time() + 60
        client = None
        while time.time() < deadline:
            try:
                client = Client(addr, timeout=5)
                client.wait_for_workers(2, timeout=30)
                break
            except Exception:  # noqa: BLE001 - the workers may not have joined yet
                if client is not None:
                    client.close()
                    client = None
                time.sleep(0.5)
        if client is None:
            pytest.fail("could not connect to the dask scheduler started on " + addr)
        client.close()
        yield addr
    finally:
        # SIGKILL to each process group: a graceful shutdown of the workers took ~8 s
        for p in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        for p in procs:
            p.wait(timeout=20)


@pytest.mark.cluster
@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_real_cluster_by_address_matches_inprocess(real_cluster, reference, optimizer):
    X, y, ref = reference
    B_ref, _ = ref[optimizer]
    with Client(real_cluster) as client:
        B, r = _run(DaskExecutor(client), X, y, optimizer)
    np.testing.assert_allclose(B, B_ref, rtol=0, atol=1e-9)
    assert r.converged


@pytest.mark.cluster
def test_estimator_with_scheduler_address(real_cluster):
    X, y = _problem(seed=8, n=80)
    opts = {"n_partitions": 2, "batch_size": 30}  # the partitions' rounds, on the workers
    a = MulticlassSVC(C=2.0, n_jobs=1, solver_options=opts).fit(X, y)
    b = MulticlassSVC(C=2.0, client=real_cluster, solver_options=opts).fit(X, y)
    assert b.engine_stats_[0]["executor"] == "dask"
    np.testing.assert_allclose(a.dual_coef_, b.dual_coef_, rtol=0, atol=1e-9)
    np.testing.assert_array_equal(a.predict(X), b.predict(X))


@pytest.mark.slow
@pytest.mark.cluster
def test_lost_worker_fails_the_round_instead_of_hanging(monkeypatch):
    """An actor call to a worker that died never returns; the executor notices the worker left
    the cluster and raises a clear error within a few polling periods."""
    from dmcsvm.engine.dask import limits

    monkeypatch.setattr(limits, "ACTOR_POLL_S", 0.5)
    X, y = _problem()
    ps = _bmg_settings()
    # a cluster of its own, not the session's: this test kills one of its workers
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        Client(cluster) as client,
    ):
        ex = DaskExecutor(client, n_partitions=2, recover=False).start(X, y, y, ps)
        assert len(ex.step(RoundMessage())) == 2
        victim = ex.placement[1]
        pid = client.run(os.getpid, workers=[victim])[victim]
        os.kill(pid, signal.SIGKILL)
        t = time.perf_counter()
        with pytest.raises(
            RuntimeError, match=f"the Dask worker {victim} holding partition 1 has left the cluster"
        ):
            ex.step(RoundMessage())
        assert time.perf_counter() - t < 60
        ex.parts = []


@pytest.mark.cluster
def test_a_paused_worker_is_named_when_no_worker_runs():
    """A worker paused for memory runs no task, so the executor does not count it; when no
    other worker is running, the error after ``recover_timeout`` names it and its status (it
    said only that the cluster had no workers)."""
    import dask

    X, y = _problem()
    ps = _bmg_settings()
    # a worker in this process pauses for real: this process holds more than 1 % of 2 GB
    memory = {
        "distributed.worker.memory.pause": 0.01,
        "distributed.worker.memory.target": False,
        "distributed.worker.memory.spill": False,
        "distributed.worker.memory.terminate": False,
        "distributed.worker.memory.monitor-interval": "50ms",
    }
    with (
        dask.config.set(memory),
        LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=False,
            memory_limit="2GB",
            dashboard_address=None,
        ) as cluster,
        Client(cluster) as client,
    ):
        (addr,) = client.scheduler_info()["workers"]
        deadline = time.monotonic() + 30
        while client.scheduler_info()["workers"][addr]["status"] != "paused":
            assert time.monotonic() < deadline, "the worker never paused"
            time.sleep(0.1)
        with pytest.raises(
            ValueError,
            match=re.escape(
                "the Dask cluster has no running workers (waited 2 s for one to join); the "
                f"scheduler has {addr} (status 'paused')"
            ),
        ):
            DaskExecutor(client, recover_timeout=2).start(X, y, y, ps)
