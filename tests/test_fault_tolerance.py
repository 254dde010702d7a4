"""Training survives a worker killed mid-run (SIGKILL): the lost partition is rebuilt on a live
worker by replaying the message log and the run ends with the coefficients of an uninterrupted
run; with no worker left it fails with a clear error within the configured wait."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from distributed import Client

from dmcsvm.engine.dask_executor import DaskExecutor
from dmcsvm.engine.executor import InProcessExecutor
from dmcsvm.engine.partition import PartitionSettings
from dmcsvm.kernels import KernelSpec
from dmcsvm.solvers import pattern as pt
from dmcsvm.solvers.multiclass import SolverSettings, solve


def _problem(seed=11, n=160, d=6, m=4):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=1.5, size=(m, d))
    y = rng.integers(0, m, n).astype(np.int64)
    return centers[y] + rng.normal(size=(n, d)), y


def _solve(executor, X, y, on_round=None):
    m = int(y.max()) + 1
    spec = KernelSpec("rbf", 0.2)
    s = SolverSettings(C=2.0, tol=1e-6, gap_tol=0.0, batch_size=6).check()
    ps = PartitionSettings(kernel=spec.to_dict(), C=s.C, selection=pt.SEL_BMG, tol=s.tol,
                           n_candidates=6, pcls=np.arange(m), cache_bytes=10 ** 5)
    executor.start(X, y, y, ps, bounds=[(0, 50), (50, 110), (110, X.shape[0])])
    try:
        r = solve(executor, X.shape[0], np.arange(m), spec, s, X.shape[1], False,
                  on_round=on_round)
    finally:
        executor.close()
    B = np.zeros((X.shape[0], m))
    B[r.support] = r.coef
    return B, r


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Cluster:
    """A `dask scheduler` and worker processes on 127.0.0.1 (with or without nannies)."""

    def __init__(self, tmp_path, n_workers=2, nanny=True):
        dask_cli = shutil.which("dask", path=os.path.dirname(sys.executable)) or shutil.which("dask")
        assert dask_cli, "the `dask` command line (distributed) is not installed"
        port = _free_port()
        self.addr = f"tcp://127.0.0.1:{port}"
        self.procs = []
        self.logs = tmp_path
        self._spawn(dask_cli, ["scheduler", "--host", "127.0.0.1", "--port", str(port),
                               "--no-dashboard"], "scheduler")
        for k in range(n_workers):
            self._spawn(dask_cli, ["worker", self.addr, "--nthreads", "1", "--no-dashboard",
                                   "--host", "127.0.0.1", "--memory-limit", "2GiB",
                                   *([] if nanny else ["--no-nanny"])], f"worker{k}")
        deadline = time.time() + 90
        while True:
            try:
                with Client(self.addr, timeout=5) as c:
                    c.wait_for_workers(n_workers, timeout=30)
                break
            except Exception:  # noqa: BLE001 - the scheduler may not be listening yet
                if time.time() > deadline:
                    self.close()
                    raise
                time.sleep(0.5)

    def _spawn(self, cli, args, name):
        log = open(self.logs / f"{name}.log", "w")
        self.procs.append(subprocess.Popen([cli, *args], stdout=log, stderr=subprocess.STDOUT,
                                           cwd=str(self.logs)))

    def close(self):
        for p in reversed(self.procs):
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


@pytest.fixture
def cluster(tmp_path):
    c = _Cluster(tmp_path, nanny=True)
    yield c
    c.close()


def test_worker_killed_mid_training_gives_the_uninterrupted_model(cluster):
    X, y = _problem()
    B_ref, r_ref = _solve(InProcessExecutor(2), X, y)
    assert r_ref.n_iter > 12
    with Client(cluster.addr) as client:
        ex = DaskExecutor(client)
        killed = []

        def kill_at_round(rounds, B):
            if rounds == 8 and not killed:
                victim = ex.placement[1]
                pid = client.run(os.getpid, workers=[victim])[victim]
                killed.append((victim, [k for k, w in enumerate(ex.placement) if w == victim]))
                os.kill(pid, signal.SIGKILL)          # the nanny restarts it, empty

        B, r = _solve(ex, X, y, on_round=kill_at_round)
        victim, lost = killed[0]
        assert lost and [(k, w) for k, w, _, _ in ex.recoveries] == [(k, victim) for k in lost]
    assert r.n_iter == r_ref.n_iter and r.converged
    np.testing.assert_allclose(B, B_ref, rtol=0, atol=1e-9)


def test_no_worker_left_fails_within_the_timeout(tmp_path, monkeypatch):
    from dmcsvm.engine import dask_executor
    monkeypatch.setattr(dask_executor, "ACTOR_POLL_S", 0.5)
    c = _Cluster(tmp_path, nanny=False)
    try:
        X, y = _problem()
        with Client(c.addr) as client:
            ex = DaskExecutor(client, recover_timeout=5)
            t = {}

            def kill_all(rounds, B):
                if rounds == 4 and not t:
                    for p in c.procs[1:]:
                        p.send_signal(signal.SIGKILL)
                    t["killed"] = time.perf_counter()

            with pytest.raises(RuntimeError, match=r"no Dask worker is left to take over "
                                                   r"partition \d \(its worker tcp://127\.0\.0\.1:"
                                                   r"\d+ died\); waited 5 s for one to join"):
                _solve(ex, X, y, on_round=kill_all)
            assert time.perf_counter() - t["killed"] < 5 + 30
    finally:
        c.close()


def test_memory_plan_fits_partitions_to_the_worker_limit():
    from dmcsvm.engine.memory import (PLAN_FRACTION, WORKER_BASELINE_BYTES, PartitionPlan,
                                      plan_partition)
    MiB = 2 ** 20
    # 1 GiB worker, 2 partitions of 500k rows x 10 prototypes, 4 GB of rows each: stream, and the
    # column cache gets what the state and one kernel block leave
    p = plan_partition(1024 * MiB, 2, 500_000, 10, 4 * 2 ** 30, True, 100 * MiB, 64 * MiB)
    budget = (PLAN_FRACTION * 1024 * MiB - WORKER_BASELINE_BYTES) / 2
    assert p.stream and p.budget_bytes == int(budget)
    assert p.state_bytes == 500_000 * (49 + 160)
    assert p.cache_bytes == int(max(0, min(100 * MiB, budget - p.state_bytes - 64 * MiB
                                            - 16 * MiB)))
    # rows that fit stay in memory; no limit keeps the requested cache
    q = plan_partition(8 * 2 ** 30, 1, 10_000, 10, 10 * MiB, True, 100 * MiB, 64 * MiB)
    assert not q.stream and q.cache_bytes == 100 * MiB
    assert plan_partition(0, 1, 10, 2, 10, True, 5, 1) == PartitionPlan(False, 5, 0, 10 * (49 + 32))
    # in-memory arrays cannot stream: the cache shrinks to fit instead (here to nothing)
    r = plan_partition(512 * MiB, 1, 1_000_000, 26, 400 * MiB, False, 200 * MiB, 64 * MiB)
    assert not r.stream and r.cache_bytes == 0
    # data_in_memory=True (stream=False) never streams, False always does
    assert not plan_partition(1024 * MiB, 2, 500_000, 10, 4 * 2 ** 30, True, 0, 0,
                              stream=False).stream
    assert plan_partition(8 * 2 ** 30, 1, 10, 2, 10, True, 0, 0, stream=True).stream


def _wide_block(lo, hi, d, seed):
    """Rows [lo, hi) of a 10-class problem of low intrinsic dimension in ``d`` wide features."""
    rng = np.random.default_rng(seed)
    centres, proj = rng.normal(scale=4.0, size=(10, 8)), rng.normal(size=(8, d)) / np.sqrt(d)
    y = np.random.default_rng(seed + 1).integers(0, 10, hi)[lo:]
    r = np.random.default_rng([seed, lo])
    X = ((centres[y] + r.standard_normal((hi - lo, 8))) @ proj).astype(np.float32)
    return X + np.float32(0.01) * r.standard_normal(X.shape, dtype=np.float32), y


def test_memory_limits_far_below_the_data_no_worker_killed(tmp_path):
    """2 GB of rows, two workers limited to 600 MiB each: the partitions stream their rows and
    training runs its rounds with no worker paused, restarted or killed for memory (the
    scheduler's, workers' and nannies' logs show no pause, restart or kill; worker pids unchanged)."""
    import dask
    import dask.array as da
    from distributed import LocalCluster

    from dmcsvm import MulticlassSVC
    from dmcsvm.store import from_dask
    n, d, rows = 500_000, 1024, 4096
    labels = np.random.default_rng(1).integers(0, 10, n)
    blocks = [da.from_delayed(dask.delayed(lambda a, b: _wide_block(a, b, d, 0)[0])(a, min(a + rows, n)),
                              shape=(min(a + rows, n) - a, d), dtype=np.float32)
              for a in range(0, n, rows)]
    url = str(tmp_path / "wide.zarr")
    with dask.config.set(scheduler="threads"):
        info = from_dask(da.concatenate(blocks), labels, url, rows_per_chunk=rows)
    assert info.n_samples * info.n_features * 4 > 1.5 * 2 * 600 * 2 ** 20
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="600MiB",
                      dashboard_address=None) as lc, Client(lc) as client:
        pids = client.run(os.getpid)
        est = MulticlassSVC(client=client, C=1.0, gamma=1 / 16, batch_size=256, max_iter=4,
                            tol=1e-2)
        with pytest.warns(Warning, match="max_iter=4"):
            est.fit(url)
        assert client.run(os.getpid) == pids
        logs = [msg for logs in (client.get_worker_logs(), client.get_worker_logs(nanny=True))
                for lines in logs.values() for _, msg in lines]
        logs += [msg for _, msg in client.get_scheduler_logs()]
    # Dask's "unmanaged memory use is high" note (above its 60 % target) is allowed; what is not:
    # a pause (80 %), a restart or kill by the nanny (95 %)
    trouble = [m for m in logs if any(w in m.lower() for w in
                                      ("pausing", "restarting", "exceeded", "killed", "terminat"))]
    assert trouble == []
    assert all(not p["in_memory"] and p["x_bytes_read"] > 0 for p in est.engine_stats_)
    assert est.n_iter_ == 4 and len(est.support_) > 0
