"""What dmcsvm trusts: a model file or checkpoint never chooses where code runs, non-finite
values and missing or damaged store chunks are errors naming the cause (never a "converged" wrong
model), and a checkpoint resumes only onto the data it was written for."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading

import numpy as np
import pytest
from cli_cluster import dask_cli, notes_on_failure, scheduler_address, scheduler_args
from dmcsvm_cli import run_cli
from test_model_io import _rewrite_meta  # noqa: E402 - one helper that edits a model's JSON

from dmcsvm import MulticlassSVC
from dmcsvm.model_io import load_model, save_model
from dmcsvm.store import open_store, write_arrays


def _blobs(n=240, d=5, m=3, seed=0):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3.0, size=(m, d))
    y = np.arange(n) % m
    return (centers[y] + rng.normal(size=(n, d))).astype(np.float32), y


class _Listener:
    """A TCP port on 127.0.0.1 that records every connection made to it."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    def close(self):
        self._stop = True
        self._thread.join()
        self.sock.close()


# ------------------------------------------------------------ 1. no connection from a file


def test_model_file_naming_a_scheduler_connects_nowhere(tmp_path):
    """A model whose JSON names a scheduler (as a malicious file, or a model saved after
    fit(client='tcp://...') by dmcsvm 0.1 would) is predicted in this process: nothing connects."""
    X, y = _blobs()
    est = MulticlassSVC(C=5, n_jobs=1).fit(X, y)
    model = tmp_path / "m.npz"
    save_model(est, model)
    listener = _Listener()
    try:

        def name_scheduler(meta):
            meta["model"]["params"]["client"] = f"tcp://127.0.0.1:{listener.port}"
            meta["model"]["params"]["n_jobs"] = 64

        _rewrite_meta(model, name_scheduler)
        loaded = load_model(model)
        assert loaded.client is None and loaded.n_jobs is None
        store = tmp_path / "s.zarr"
        write_arrays(store, X, y)
        env = {**os.environ, "PYTHONWARNINGS": "ignore"}
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "dmcsvm.cli",
                "predict",
                str(model),
                str(store),
                "-o",
                str(tmp_path / "p.txt"),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        assert r.returncode == 0, r.stderr
        assert np.array_equal(loaded.predict(str(store)), est.predict(X))
    finally:
        listener.close()
    assert listener.connections == 0


def test_runtime_params_are_not_written(tmp_path):
    X, y = _blobs()
    est = MulticlassSVC(
        C=5,
        n_jobs=1,
        client=None,
        cache_size=17,
        verbose=False,
        solver_options={"cache_dir": str(tmp_path), "n_partitions": 2, "batch_size": 99},
    ).fit(X, y)
    save_model(est, tmp_path / "m.npz")
    with np.load(tmp_path / "m.npz", allow_pickle=False) as z:
        params = json.loads(bytes(z["meta"]).decode())["model"]["params"]
    from dmcsvm.runtime_params import RUNTIME_PARAMS

    assert not set(params) & RUNTIME_PARAMS
    assert params["C"] == 5
    # the runtime solver options neither: the model's options keep the rest
    assert set(params["solver_options"]["__dict__"]) == {"batch_size"}
    back = load_model(tmp_path / "m.npz")
    assert back.solver_options == {"batch_size": 99}
    assert back.cache_size == MulticlassSVC().cache_size


# ------------------------------------------------------------ 2. no silently wrong model

from dmcsvm.errors import NonFiniteError  # noqa: E402


def test_overflowing_row_is_an_error_naming_it():
    X, y = _blobs()
    X = X.astype(np.float64)
    X[7, 2] = 1e308  # finite, but its square overflows: every score would be NaN
    with pytest.raises(
        NonFiniteError,
        match=r"^training row 7: its squared norm is inf; the "
        r"likely cause is non-finite or overflowing input",
    ):
        MulticlassSVC(n_jobs=1).fit(X, y)


def test_non_finite_scores_end_the_solve_instead_of_converging():
    """A NaN score (from any cause the input checks miss) makes the round's primal NaN, which used
    to read as gap 0 and convergence: the solve now stops with an error naming the round."""
    from dmcsvm.coordinators.crammer_singer import SolverSettings, solve
    from dmcsvm.engine.executor import InProcessExecutor
    from dmcsvm.engine.partition import PartitionSettings
    from dmcsvm.kernels import KernelSpec
    from dmcsvm.numerics import pattern as pt

    X, y = _blobs()
    spec = KernelSpec("rbf", 0.2)
    s = SolverSettings(C=1.0).check()
    ps = PartitionSettings(
        kernel=spec.to_dict(),
        C=1.0,
        selection=pt.SEL_BMG,
        tol=s.tol,
        n_candidates=50,
        pcls=np.arange(3),
    )
    ex = InProcessExecutor(1).start(X, y, y, ps)
    try:
        ex.parts[0].F[5, 1] = np.nan
        with pytest.raises(
            NonFiniteError,
            match=r"^round 0: dual nan, primal nan: the likely "
            r"cause is non-finite or overflowing input",
        ):
            solve(ex, X.shape[0], np.arange(3), spec, s, X.shape[1], False, np.float32)
    finally:
        ex.close()


def _store(tmp_path, name="s.zarr", n=3000):
    X, y = _blobs(n=n)
    path = tmp_path / name
    write_arrays(path, X, y, rows_per_chunk=1000)
    return str(path), X, y


def _cli(*args):
    return run_cli(*args, process=True, timeout=300)


def test_nan_in_a_store_is_caught_with_its_row(tmp_path):
    import zarr

    path, X, y = _store(tmp_path)
    zarr.open_array(path, path="X", mode="r+")[1234, 2] = np.nan
    msg = f"{path}: row 1234 of X holds nan; dmcsvm needs finite features"
    with pytest.raises(NonFiniteError, match="^" + msg.replace(".", r"\.")):
        MulticlassSVC(n_jobs=1).fit(path)
    r = _cli("info", path, "--check")
    assert r.returncode == 2 and msg in r.stderr, r.stderr
    assert _cli("info", path).returncode == 0  # without --check the chunks are not read


@pytest.mark.parametrize(
    "array,key,rows",
    [("X", "X/c/1/0", "rows 1000 to 1999 of X"), ("y", "y/c/2", "rows 2000 to 2999 of y")],
)
def test_missing_store_chunk_is_an_error(tmp_path, array, key, rows):
    path, X, y = _store(tmp_path)
    os.remove(os.path.join(path, key))
    msg = f"{path}: chunk file {key} ({rows}) is missing"
    with pytest.raises(
        ValueError,
        match="^" + msg.replace(".", r"\.").replace("(", r"\(").replace(")", r"\)") + "$",
    ):
        MulticlassSVC(n_jobs=1).fit(path)
    r = _cli("info", path)
    assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_all_zero_chunks_are_written(tmp_path):
    """zarr leaves out chunks equal to the fill value; a store of dmcsvm has every chunk, so a
    missing one is always damage (labels all 0 and rows all zeros are data)."""
    X, y = _blobs(n=3000)
    X[:1000] = 0.0
    y[:1000] = 0
    write_arrays(tmp_path / "z.zarr", X, y, rows_per_chunk=1000)
    info = open_store(tmp_path / "z.zarr")
    assert info.complete
    assert os.path.exists(tmp_path / "z.zarr" / "X" / "c" / "0" / "0")
    assert os.path.exists(tmp_path / "z.zarr" / "y" / "c" / "0")


def test_damaged_chunk_is_named(tmp_path):
    path, X, y = _store(tmp_path)
    with open(os.path.join(path, "X", "c", "2", "0"), "wb") as fh:
        fh.write(b"not a zstd frame" * 4)
    with pytest.raises(
        ValueError,
        match=r"chunk file X/c/2/0 \(rows 2000 to 2999 of X\) cannot "
        r"be read \(",
    ):
        MulticlassSVC(n_jobs=1).fit(path)
    r = _cli("info", path, "--check")
    assert r.returncode == 2 and "chunk file X/c/2/0" in r.stderr, r.stderr


# ------------------------------------------------------------ 4. resume onto the same data

CK = dict(C=10.0, gamma=0.5, tol=1e-5, n_jobs=1)
OPTS = {"gap_tol": 0.0, "batch_size": 20}


def _checkpointed(data, directory, rounds=12):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MulticlassSVC(
            **CK,
            solver_options=OPTS,
            max_iter=rounds,
            checkpoint=str(directory),
            checkpoint_every=4,
        ).fit(data)


def test_resume_refuses_a_store_with_permuted_columns(tmp_path):
    """Same shape, same labels, other data: the checkpoint's fingerprint refuses it (it used to
    resume, keep the old support rows and report convergence at 76 % accuracy)."""
    path, X, y = _store(tmp_path, n=600)
    ck = tmp_path / "ck"
    _checkpointed(path, ck)
    other = tmp_path / "other.zarr"
    write_arrays(other, X[:, ::-1].copy(), y, rows_per_chunk=1000)
    with pytest.raises(ValueError, match=r"was written for other training data"):
        MulticlassSVC(**CK, solver_options=OPTS, checkpoint=str(ck), resume=True).fit(str(other))
    r = _cli(
        "train",
        other,
        "-o",
        tmp_path / "m.npz",
        *(f"--{k}={v}" for k, v in CK.items() if k != "n_jobs"),
        *(f"--{k}={v}" for k, v in OPTS.items()),
        "--checkpoint",
        ck,
        "--resume",
    )
    assert r.returncode == 2 and "was written for other training data" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "m.npz")


@pytest.mark.parametrize("array", ["B", "history"])
def test_checkpoint_with_a_deleted_chunk_is_refused(tmp_path, array):
    from dmcsvm.checkpoint import load_checkpoint

    path, X, y = _store(tmp_path, n=600)
    ck = tmp_path / "ck"
    _checkpointed(path, ck)
    group = (ck / "LATEST").read_text().strip()
    chunk = ck / group / array / "c" / "0" / "0"
    assert chunk.exists()
    chunk.unlink()
    with pytest.raises(
        ValueError,
        match=rf"{group}: array '{array}' fails its checksum \(a chunk "
        rf"file is missing or damaged\)$",
    ):
        load_checkpoint(ck)
    with pytest.raises(ValueError, match="fails its checksum"):
        MulticlassSVC(**CK, solver_options=OPTS, checkpoint=str(ck), resume=True).fit(path)


# ------------------------------------------------------------ 8. determinism


def _blas_threads():
    from threadpoolctl import threadpool_info

    return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]


def _beside_scenario():
    """Fit A (a thread) ends while fit B (the main thread) runs: B keeps one BLAS thread."""
    import threading

    from dmcsvm.coordinators.crammer_singer import SolverSettings, solve
    from dmcsvm.engine.executor import InProcessExecutor
    from dmcsvm.engine.partition import PartitionSettings
    from dmcsvm.kernels import KernelSpec
    from dmcsvm.numerics import pattern as pt

    before = _blas_threads()
    X, y = _blobs(n=400)
    a_running, b_running, a_done = threading.Event(), threading.Event(), threading.Event()
    seen = []

    def run(on_round):
        spec = KernelSpec("rbf", 0.2)
        # 10 rounds each: B's rounds 2-5 are the ones observed
        s = SolverSettings(C=10.0, tol=1e-6, gap_tol=0.0, batch_size=5, max_iter=10).check()
        ps = PartitionSettings(
            kernel=spec.to_dict(),
            C=s.C,
            selection=pt.SEL_BMG,
            tol=s.tol,
            n_candidates=5,
            pcls=np.arange(3),
        )
        ex = InProcessExecutor(1).start(X, y, y, ps)
        try:
            solve(
                ex,
                X.shape[0],
                np.arange(3),
                spec,
                s,
                X.shape[1],
                False,
                np.float32,
                on_round=on_round,
            )
        finally:
            ex.close()

    def a_round(r, B):
        if r == 1:
            a_running.set()
            assert b_running.wait(60)

    def b_round(r, B):
        if r == 1:
            b_running.set()
            assert a_done.wait(60)
        elif r < 6:
            seen.append(max(_blas_threads()))

    def a():
        run(a_round)
        a_done.set()

    ta = threading.Thread(target=a)
    ta.start()
    assert a_running.wait(60)
    run(b_round)  # starts while A runs, goes on after A has ended
    ta.join()
    assert seen and set(seen) == {1}
    assert _blas_threads() == before  # the last holder restored what was there


def test_a_fit_ending_beside_another_leaves_its_blas_threads_alone():
    """Each solve used to set a process-global BLAS limit and restore it at its end: a fit that
    ended while another ran gave the other its threads back half-way (two fits in threads gave
    59 of 5,000 different predictions).  The limit is now held by count (engine.threads).

    Run in a fresh interpreter: OpenBLAS (0.3.31 here) ignores set_num_threads called from any
    thread but the main one once the main thread has set it, so the scenario needs a process
    whose main thread has not yet limited BLAS (the first fit of a program)."""
    _in_fresh_interpreter("_beside_scenario")


def _in_fresh_interpreter(name):
    code = (
        f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import test_trust as t\n"
        "if max(t._blas_threads() or [1]) < 2: print('skip')\n"
        f"else: t.{name}(); print('ok')"
    )
    # a Dask nanny started earlier in this process may have left OMP_NUM_THREADS=1 in os.environ
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    }
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    if r.returncode == 0 and r.stdout.strip().endswith("skip"):
        pytest.skip("BLAS runs on one thread here anyway")
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_blas_hold_is_counted():
    _in_fresh_interpreter("_hold_scenario")


def _hold_scenario():
    from threadpoolctl import threadpool_info

    from dmcsvm.engine.threads import BlasThreadHold, one_blas_thread

    blas = [p for p in threadpool_info() if p["user_api"] == "blas"]
    start = blas[0]["num_threads"]
    hold = BlasThreadHold()
    with one_blas_thread():
        assert [p for p in threadpool_info() if p["user_api"] == "blas"][0]["num_threads"] == 1
    # the inner holder's end does not restore while the outer one still holds
    assert [p for p in threadpool_info() if p["user_api"] == "blas"][0]["num_threads"] == 1
    hold.release()
    hold.release()  # once only
    assert [p for p in threadpool_info() if p["user_api"] == "blas"][0]["num_threads"] == start


def test_blas_controller_is_made_once_until_an_import():
    """The BLAS limits reuse one threadpoolctl controller (making one scans the process's shared
    libraries, 3 ms a fit), made again only once imports changed ``sys.modules``."""
    import types

    from dmcsvm.engine import threads

    first = threads._blas_controller()
    with threads.limit_blas(1):
        pass
    assert threads._blas_controller() is first
    name = "_dmcsvm_test_fake_module"
    sys.modules[name] = types.ModuleType(name)  # what an import of an extension module adds
    try:
        again = threads._blas_controller()
        assert again is not first
        assert threads._blas_controller() is again
    finally:
        del sys.modules[name]


def test_limit_blas_limits_and_restores():
    _in_fresh_interpreter("_limit_scenario")


def _limit_scenario():
    from dmcsvm.engine.threads import limit_blas

    start = _blas_threads()
    with limit_blas(1):
        assert _blas_threads() == [1] * len(start)
    assert _blas_threads() == start
    lim = limit_blas(1)
    assert _blas_threads() == [1] * len(start)
    lim.restore_original_limits()
    assert _blas_threads() == start


@pytest.mark.cluster
def test_workers_without_a_nanny_give_the_in_process_model(tmp_path):
    """``dask worker --no-nanny`` sets no OMP_NUM_THREADS=1: partitions now hold BLAS at one
    thread themselves, so the model equals the in-process one bit for bit."""
    from distributed import Client
    from threadpoolctl import threadpool_info

    cli = dask_cli()
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
    }
    sched_file = tmp_path / "scheduler.json"
    logs = [tmp_path / "scheduler.log", tmp_path / "worker.log"]
    procs = [
        subprocess.Popen(
            [cli, *scheduler_args(sched_file)],
            stdout=subprocess.DEVNULL,
            stderr=open(logs[0], "wb"),  # noqa: SIM115 - the child holds it; closed at its exit
            env=env,
        )
    ]
    try:
        addr = scheduler_address(sched_file, procs[0])
        procs.append(
            subprocess.Popen(
                [
                    cli,
                    "worker",
                    addr,
                    "--nthreads",
                    "1",
                    "--no-nanny",
                    "--no-dashboard",
                    "--host",
                    "127.0.0.1",
                ],
                stdout=subprocess.DEVNULL,
                stderr=open(logs[1], "wb"),  # noqa: SIM115
                env=env,
            )
        )
        with notes_on_failure(zip(procs, logs, strict=True)), Client(addr, timeout=60) as c:
            c.wait_for_workers(1, timeout=120)

            def worker_blas():
                return max(
                    [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"] or [1]
                )

            idle = list(c.run(worker_blas).values())[0]
            X, y = _blobs(n=4000, d=300, m=5, seed=5)
            kw = dict(C=10, gamma=0.01)
            opts = {"batch_size": 200, "n_partitions": 1}
            from dmcsvm.engine.dask import DaskExecutor
            from dmcsvm.engine.partition import PartitionSettings
            from dmcsvm.kernels import KernelSpec

            ex = DaskExecutor(c, 1)
            ex.start(
                X,
                y,
                y,
                PartitionSettings(
                    kernel=KernelSpec("rbf", 0.01).to_dict(),
                    C=1.0,
                    selection=2,
                    tol=1e-3,
                    n_candidates=10,
                    pcls=np.arange(5),
                ),
            )
            during = list(c.run(worker_blas).values())[0]
            ex.close()
            del ex
            remote = MulticlassSVC(**kw, solver_options=opts, client=c).fit(X, y)
        local = MulticlassSVC(**kw, solver_options=opts, n_jobs=2).fit(
            X, y
        )  # in-process: one BLAS thread
    finally:
        for p in procs[::-1]:
            p.terminate()
            p.wait(timeout=30)
    if idle > 1:  # a partition holds its worker's BLAS at one thread
        assert during == 1
    assert remote.n_iter_ == local.n_iter_
    assert np.array_equal(remote.dual_coef_, local.dual_coef_)


# ------------------------------------------------------------ 5. resume = uninterrupted


def _digits(n=400):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return X[:n] / 16.0, y[:n]


RK = dict(C=10.0, gamma=0.05, tol=1e-5, solver_options={"gap_tol": 0.0, "batch_size": 100})


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_resumed_fit_is_the_uninterrupted_fit(tmp_path, n_jobs):
    """Interrupted after shrinking has started, resumed from the checkpoint: the same rounds,
    coefficients and history bit for bit (partitions save their scores, active set and shrinking
    counters beside the checkpoint; the batch chosen in the checkpointed round is sent first)."""
    import warnings

    X, y = _digits()
    full = MulticlassSVC(**RK, n_jobs=n_jobs).fit(X, y)
    stop = int(np.flatnonzero(full.history_["n_active"] < X.shape[0])[0]) + 20
    assert stop < full.n_iter_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        part = MulticlassSVC(
            **RK, n_jobs=n_jobs, max_iter=stop, checkpoint=str(tmp_path), checkpoint_every=7
        ).fit(X, y)
    assert part.history_["n_active"][-1] < X.shape[0]  # shrinking is under way
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning
        resumed = MulticlassSVC(
            **RK, n_jobs=n_jobs, checkpoint=str(tmp_path), checkpoint_every=10**6, resume=True
        ).fit(X, y)
    assert resumed.n_iter_ == full.n_iter_ and resumed.converged_
    assert np.array_equal(resumed.support_, full.support_)
    assert np.array_equal(resumed.dual_coef_, full.dual_coef_)
    for k in ("dual", "primal", "n_active", "batch"):
        assert np.array_equal(resumed.history_[k], full.history_[k]), k


def test_resume_onto_other_partitions_rebuilds_and_says_so(tmp_path):
    import warnings

    X, y = _digits()
    full = MulticlassSVC(**RK, n_jobs=1).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        MulticlassSVC(
            **RK, n_jobs=1, max_iter=60, checkpoint=str(tmp_path), checkpoint_every=5
        ).fit(X, y)
    with pytest.warns(
        UserWarning,
        match=r"resuming from the support coefficients, not the "
        r"partitions' saved states, because its partitions own "
        r"rows \[\(0, 400\)\], this run's \[\(0, 200\), "
        r"\(200, 400\)\]",
    ):
        resumed = MulticlassSVC(**RK, n_jobs=2, checkpoint=str(tmp_path), resume=True).fit(X, y)
    assert resumed.converged_
    assert np.array_equal(resumed.predict(X), full.predict(X))
    assert abs(resumed.history_["dual"][-1] - full.history_["dual"][-1]) <= 1e-6 * abs(
        full.history_["dual"][-1]
    )


# ------------------------------------------------------------ edited model files


@pytest.mark.parametrize(
    "edit,what",
    [
        (lambda m: m["model"]["attrs"].update(gamma_="wide"), "TypeError"),
        (
            lambda m: (
                m["model"]["attrs"]["classes_"].update(shape=[2], __array__=None)
                or m["model"]["attrs"].update(
                    classes_={"__strarray__": ["a", "b"], "dtype": "<U1", "shape": [2]}
                )
            ),
            r"ValueError: decision_function gives 3 score\(s\) per row for 2 classes_",
        ),
    ],
)
def test_edited_model_with_inconsistent_attributes_is_refused(tmp_path, edit, what):
    X, y = _blobs()
    save_model(MulticlassSVC(n_jobs=1).fit(X, y), tmp_path / "m.npz")
    _rewrite_meta(tmp_path / "m.npz", edit)
    with pytest.raises(
        ValueError,
        match=rf"m\.npz is not a valid dmcsvm model file: its fitted "
        rf"attributes do not fit together \({what}",
    ):
        load_model(tmp_path / "m.npz")
    r = _cli("predict", tmp_path / "m.npz", _store(tmp_path)[0], "-o", tmp_path / "p.txt")
    assert r.returncode == 2 and "its fitted attributes do not fit together" in r.stderr
    assert not (tmp_path / "p.txt").exists()


def test_model_files_and_checkpoints_get_the_mode_of_a_new_file(tmp_path):
    """save_model and checkpoints wrote through mkstemp/mkdtemp (0600/0700) whatever the umask."""
    import stat

    X, y = _blobs()
    old = os.umask(0o022)
    try:
        est = MulticlassSVC(n_jobs=1, checkpoint=str(tmp_path / "ck"), checkpoint_every=1).fit(X, y)
        save_model(est, tmp_path / "m.npz")
        save_model(est, tmp_path / "m.zarr")
    finally:
        os.umask(old)
    mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)  # noqa: E731
    assert mode(tmp_path / "m.npz") == 0o644
    assert mode(tmp_path / "m.zarr") == 0o755
    group = (tmp_path / "ck" / "LATEST").read_text().strip()
    assert mode(tmp_path / "ck" / "LATEST") == 0o644
    assert mode(tmp_path / "ck" / group) == 0o755
