"""The ``dmcsvm`` command driven as a user drives it: convert the shared LIBSVM and CSV data,
inspect, train, predict, evaluate and plot, with results equal to the Python API's; bad input exits
with status 2, one line on stderr and no partial output; a ``train`` killed with SIGKILL resumes
from its checkpoint to the same model as an uninterrupted run.

Most commands run in-process through the console script's own entry point (``main`` returns the
status the script exits with); a subprocess costs 2-3 s of imports, about 100 s of the suite's CPU
over these tests.  The end-to-end train / predict / evaluate and the SIGKILL run real processes."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from data_dir import DATA, need
from dmcsvm_cli import run_cli as cli

from dmcsvm import MulticlassSVC
from dmcsvm.model_io import estimator_registry, load_model
from dmcsvm.store import open_store, read_all

ROOT = Path(__file__).resolve().parents[1]
DNA, DNA_T = DATA / "dna" / "dna.scale", DATA / "dna" / "dna.scale.t"  # LIBSVM, 180 features
LETTER = DATA / "letter" / "letter-recognition.data"  # CSV, label (A-Z) first


def ok(*args, **kw):
    r = cli(*args, **kw)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def usage_error(*args):
    """Exit status 2 and exactly one line on stderr; returns that line."""
    r = cli(*args)
    assert r.returncode == 2, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dmcsvm: error: "), r.stderr
    return lines[0]


def head(src, dst, n):
    with open(src, "rb") as f:
        lines = [next(f) for _ in range(n)]
    Path(dst).write_bytes(b"".join(lines))
    return dst


def leftovers(d):
    """Hidden temporary files or directories left in ``d``."""
    return [p for p in os.listdir(d) if p.startswith(".")]


@pytest.fixture(scope="module")
def dna(tmp_path_factory):
    """The first 300 training and 200 test rows of dna (LIBSVM), converted by the CLI."""
    d = tmp_path_factory.mktemp("dna")
    head(need(DNA), d / "train.svm", 300)
    head(need(DNA_T), d / "test.svm", 200)
    ok("convert", d / "train.svm", d / "train.zarr", "--n-features", 180, "--chunk-rows", 64)
    ok("convert", d / "test.svm", d / "test.zarr", "--n-features", 180)
    return d


def _train_dna(dna, path):
    """A model of the dna rows, fitted here and saved as ``dmcsvm train`` saves it (the tests that
    only need some model skip a subprocess's seconds of imports; the CLI's own training is
    checked against the API in test_train_predict_evaluate_equal_the_api)."""
    from dmcsvm.model_io import save_model

    save_model(MulticlassSVC(C=10, n_jobs=1).fit(str(dna / "train.zarr")), path)


# ---------------------------------------------------------------------------------- convert/info


@pytest.mark.slow
def test_convert_libsvm_and_info(dna):
    from sklearn.datasets import load_svmlight_file

    X_ref, y_ref = load_svmlight_file(str(dna / "train.svm"), n_features=180)
    X, y = read_all(dna / "train.zarr")
    X = X.toarray() if hasattr(X, "toarray") else X
    assert np.array_equal(X, X_ref.toarray().astype(np.float32))
    assert np.array_equal(y, y_ref.astype(np.int64))
    info = json.loads(ok("info", dna / "train.zarr", "--json"))
    labels = [line.split()[0] for line in (dna / "train.svm").read_text().splitlines()]
    counts = collections.Counter(int(float(v)) for v in labels)
    assert info["n_samples"] == 300 and info["n_features"] == 180
    assert info["rows_per_chunk"] == 64 and info["n_chunks"] == 5
    assert {c["label"]: c["count"] for c in info["classes"]} == dict(counts)
    assert info["bytes_on_disk"] > 0
    text = ok("info", dna / "train.zarr")
    assert "300 rows x 180 features" in text and "5 chunks of 64 rows" in text


@pytest.mark.slow
def test_convert_csv_with_string_labels(tmp_path):
    src = head(need(LETTER), tmp_path / "letter.csv", 500)
    out = ok("convert", src, tmp_path / "l.zarr", "--no-progress")
    assert "500 rows x 16 features, dense" in out
    rows = [line.split(",") for line in Path(src).read_text().splitlines()]
    info = json.loads(ok("info", tmp_path / "l.zarr", "--json"))
    assert {c["label"]: c["count"] for c in info["classes"]} == dict(
        collections.Counter(r[0] for r in rows)
    )
    X, _ = read_all(tmp_path / "l.zarr")
    assert np.array_equal(X, np.array([[float(v) for v in r[1:]] for r in rows], np.float32))


@pytest.mark.slow
def test_convert_sparse_npy_and_progress(tmp_path, dna):
    ok("convert", dna / "train.svm", tmp_path / "s.zarr", "--sparse", "--n-features", 180)
    assert open_store(tmp_path / "s.zarr").sparse
    X, y = read_all(dna / "train.zarr")
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    r = cli(
        "convert",
        tmp_path / "X.npy",
        tmp_path / "n.zarr",
        "--labels",
        tmp_path / "y.npy",
        "--progress",
    )
    assert r.returncode == 0, r.stderr
    X2, y2 = read_all(tmp_path / "n.zarr")
    assert np.array_equal(X2, X) and np.array_equal(y2, y)


# ---------------------------------------------------------------------------------- train/predict


@pytest.mark.slow
def test_train_predict_evaluate_equal_the_api(dna, tmp_path):
    ok(
        "train",
        dna / "train.zarr",
        "-o",
        tmp_path / "m.npz",
        "--C",
        10,
        "--n-jobs",
        1,
        "--log-json",
        tmp_path / "log.jsonl",
        process=True,
    )
    api = MulticlassSVC(C=10, n_jobs=1).fit(str(dna / "train.zarr"))
    m = load_model(tmp_path / "m.npz")
    assert np.array_equal(m.support_, api.support_)
    assert np.array_equal(m.dual_coef_, api.dual_coef_)
    # predict a raw LIBSVM file (converted on the fly, the model's feature count)
    ok(
        "predict",
        tmp_path / "m.npz",
        dna / "test.svm",
        "-o",
        tmp_path / "p.txt",
        "--decision-values",
        process=True,
    )
    lines = (tmp_path / "p.txt").read_text().splitlines()
    assert lines[0] == "label 1 2 3"
    got = np.array([[float(v) for v in line.split()] for line in lines[1:]])
    ref = api.decision_function(str(dna / "test.zarr"))
    assert np.array_equal(got[:, 0].astype(int), api.predict(str(dna / "test.zarr")))
    assert np.array_equal(got[:, 1:], ref)
    ok("predict", tmp_path / "m.npz", dna / "test.zarr", "-o", tmp_path / "q.txt")
    assert (tmp_path / "q.txt").read_text().split() == [str(v) for v in got[:, 0].astype(int)]
    # evaluate
    from sklearn.metrics import confusion_matrix

    _, y = read_all(dna / "test.zarr")
    pred = api.predict(str(dna / "test.zarr"))
    out = ok(
        "evaluate",
        tmp_path / "m.npz",
        dna / "test.zarr",
        "--json",
        tmp_path / "e.json",
        process=True,
    )
    ev = json.loads((tmp_path / "e.json").read_text())
    assert ev["accuracy"] == float(np.mean(pred == y))
    assert ev["confusion_matrix"] == confusion_matrix(y, pred, labels=[1, 2, 3]).tolist()
    assert [c["support"] for c in ev["per_class"]] == np.bincount(y)[1:].tolist()
    assert f"accuracy {ev['accuracy']:.4f}" in out
    # the log: one JSON line per round, equal to the model's history
    log = [json.loads(x) for x in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert len(log) == m.n_iter_
    assert [r["dual"] for r in log] == m.history_["dual"].tolist()
    for x in ("rounds", "time"):
        ok("plot", tmp_path / "log.jsonl", "-o", tmp_path / f"c-{x}.png", "--x", x)
        assert (tmp_path / f"c-{x}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert leftovers(tmp_path) == []


@pytest.mark.slow
def test_train_on_a_csv_file_equals_training_on_its_store(tmp_path):
    src = head(need(LETTER), tmp_path / "letter.csv", 400)
    ok("convert", src, tmp_path / "l.zarr")
    ok(
        "train",
        src,
        "-o",
        tmp_path / "a.zarr",
        "--C",
        5,
        "--gamma",
        0.02,
        "--n-jobs",
        1,
        "--test",
        src,
    )
    ok(
        "train",
        tmp_path / "l.zarr",
        "-o",
        tmp_path / "b.npz",
        "--C",
        5,
        "--gamma",
        0.02,
        "--n-jobs",
        1,
        "--param",
        "tol=0.001",
        "--param",
        "shrinking=true",
    )
    a, b = load_model(tmp_path / "a.zarr"), load_model(tmp_path / "b.npz")
    assert a.classes_.tolist() == sorted(set(line[0] for line in Path(src).read_text().split()))
    assert np.array_equal(a.dual_coef_, b.dual_coef_)
    assert a.get_params() == b.get_params()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(estimator_registry()))
def test_every_registered_estimator_trains_from_the_command_line(name, tmp_path):
    from sklearn.datasets import load_iris

    from dmcsvm.store import write_arrays

    X, y = load_iris(return_X_y=True)
    if name == "BinarySVC":
        y = (y > 0).astype(int)
    write_arrays(tmp_path / "d.zarr", X, y)
    cls = estimator_registry()[name]
    params = {"n_jobs": 1} if "n_jobs" in cls._get_param_names() else {}
    if name == "MultiPrototypeSVC":
        # few epochs; the same random start; the batched rounds as a store trains with
        params.update(max_epochs=5, random_state=0, solver_options={"linear_solver": "rounds"})
    extra = [
        a
        for k, v in params.items()
        for a in (("--param", f"{k}={v}") if k != "solver_options" else ())
    ]
    if "solver_options" in params:  # (the command line's --param takes solver options too)
        extra += ["--param", "linear_solver=rounds"]
    ok("train", tmp_path / "d.zarr", "--estimator", name, "-o", tmp_path / "m.npz", *extra)
    m = load_model(tmp_path / "m.npz")
    assert type(m) is cls
    from dmcsvm.runtime_params import RUNTIME_PARAMS  # not part of a model file

    assert all(m.get_params()[k] == v for k, v in params.items() if k not in RUNTIME_PARAMS)
    api = cls(**params).fit(*read_all(tmp_path / "d.zarr"))
    assert np.array_equal(m.predict(X.astype(np.float32)), api.predict(X.astype(np.float32)))


def test_predict_on_a_store_loads_neither_distributed_nor_dask_array(dna, tmp_path):
    """A local predict or evaluate of a store runs on dask's threads without importing
    distributed or dask.array (together 1.2 s of every command-line predict before)."""
    _train_dna(dna, tmp_path / "m.npz")
    m, t = str(tmp_path / "m.npz"), str(dna / "test.zarr")
    code = (
        "import sys; from dmcsvm.cli import main; "
        f"assert main(['predict', {m!r}, {t!r}, '-o', {str(tmp_path / 'p.txt')!r}, "
        "'--no-progress']) == 0; "
        f"assert main(['evaluate', {m!r}, {t!r}]) == 0; "
        "print([m for m in ('distributed', 'dask.array') if m in sys.modules])"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"
    assert len((tmp_path / "p.txt").read_text().splitlines()) == 200


def test_demo_still_runs():
    out = ok("demo", "--in-process", "--n-jobs", 1, "--json")
    res = json.loads(out.strip().splitlines()[-1])
    assert res["accuracy"] > 0.95 and res["executor"] == "in-process threads"


@pytest.mark.slow
@pytest.mark.cluster
def test_demo_trains_the_same_model_in_process_and_on_a_local_cluster():
    """Both ways of running the demo use the same row partitions, so the in-process threads and
    the LocalCluster's worker processes train the same model (the Dask executor equals the
    in-process one bit for bit on the same partitions)."""
    got = []
    for mode in (("--in-process",), ()):
        out = ok("demo", *mode, "--local-workers", 2, "--json")
        got.append(json.loads(out.strip().splitlines()[-1]))
    inproc, local = got
    assert local["executor"].startswith("LocalCluster, 2 workers")
    for key in ("support_vectors", "support_per_class", "accuracy"):
        assert inproc[key] == local[key], key


def test_demo_options_follow_the_estimator():
    """demo builds its options from MulticlassSVC's signature as train does: with no options its
    model has the estimator's defaults but the documented DEMO_DEFAULTS."""
    from dmcsvm import MulticlassSVC
    from dmcsvm.cli import build_parser
    from dmcsvm.cli.demo import DEMO_DEFAULTS, _model_from_args

    a = build_parser(["demo"]).parse_args(["demo"])
    got = _model_from_args(a).get_params()
    want = dict(
        MulticlassSVC().get_params(),
        solver_options={k: v for k, (v, _) in DEMO_DEFAULTS.items() if k != "C"},
        C=DEMO_DEFAULTS["C"][0],
    )
    assert got == want
    a = build_parser(["demo"]).parse_args(
        ["demo", "--gamma", "0.02", "--max-iter", "5", "--no-shrinking", "--verbose"]
    )
    got = _model_from_args(a).get_params()
    assert (got["gamma"], got["max_iter"], got["shrinking"], got["verbose"]) == (
        0.02,
        5,
        False,
        True,
    )
    import argparse

    sub = next(
        x for x in build_parser(["demo"])._actions if isinstance(x, argparse._SubParsersAction)
    ).choices["demo"]
    helps = {x.dest: x.help for x in sub._actions}
    assert "MulticlassSVC's is 1.0" in helps["est__C"]


# ---------------------------------------------------------------------------------- bad input


def test_missing_file(tmp_path):
    line = usage_error("train", tmp_path / "missing.svm", "-o", tmp_path / "m.npz")
    assert line == f"dmcsvm: error: {tmp_path / 'missing.svm'} does not exist"
    line = usage_error("info", tmp_path / "nothing.zarr")
    assert "nothing.zarr does not exist" in line
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_malformed_libsvm_line_names_its_line(tmp_path):
    lines = need(DNA).read_text().splitlines()[:20]
    lines[6] = "2 3:1 4:x 9:1"
    (tmp_path / "bad.svm").write_text("\n".join(lines) + "\n")
    line = usage_error("convert", tmp_path / "bad.svm", tmp_path / "bad.zarr")
    assert line == (
        f"dmcsvm: error: {tmp_path / 'bad.svm'}, line 7: cannot parse feature "
        "'4:x' (expected index:value)"
    )
    line = usage_error("train", tmp_path / "bad.svm", "-o", tmp_path / "m.npz")
    assert "line 7: cannot parse feature" in line
    assert sorted(os.listdir(tmp_path)) == ["bad.svm"]


@pytest.mark.slow
def test_mixed_feature_counts(tmp_path, dna):
    rows = need(LETTER).read_text().splitlines()[:10]
    rows[4] = ",".join(rows[4].split(",")[:-1])  # line 5 lost its last feature
    (tmp_path / "bad.csv").write_text("\n".join(rows) + "\n")
    line = usage_error("convert", tmp_path / "bad.csv", tmp_path / "bad.zarr")
    assert line == f"dmcsvm: error: {tmp_path / 'bad.csv'}, line 5: 16 fields, expected 17"
    # a LIBSVM test file with a feature beyond the model's 180
    _train_dna(dna, tmp_path / "m.npz")
    (tmp_path / "wide.svm").write_text("1 3:1\n2 200:1\n")
    line = usage_error(
        "predict", tmp_path / "m.npz", tmp_path / "wide.svm", "-o", tmp_path / "p.txt"
    )
    assert line.endswith("wide.svm, line 2: feature index 200 is beyond n_features=180")
    # a store with another feature count
    (tmp_path / "narrow.svm").write_text("1 3:1\n2 20:1\n")
    ok("convert", tmp_path / "narrow.svm", tmp_path / "narrow.zarr")
    line = usage_error(
        "predict", tmp_path / "m.npz", tmp_path / "narrow.zarr", "-o", tmp_path / "p.txt"
    )
    assert line.endswith("narrow.zarr has 20 features; the model expects 180")
    assert sorted(os.listdir(tmp_path)) == [
        "bad.csv",
        "m.npz",
        "narrow.svm",
        "narrow.zarr",
        "wide.svm",
    ]


def test_unknown_option(tmp_path, dna):
    assert (
        usage_error("train", dna / "train.zarr", "-o", tmp_path / "m.npz", "--bogus", 1)
        == "dmcsvm: error: unrecognized arguments: --bogus 1"
    )
    assert os.listdir(tmp_path) == []


def test_usage_errors(tmp_path, dna):
    assert usage_error("frobnicate").startswith("dmcsvm: error: argument COMMAND: invalid choice")
    assert (
        usage_error("train", dna / "train.zarr")
        == "dmcsvm: error: the following arguments are required: -o/--output/--model"
    )
    assert "unknown estimator 'NoSuchSVC'" in usage_error(
        "train", dna / "train.zarr", "-o", tmp_path / "m.npz", "--estimator", "NoSuchSVC"
    )
    assert "unknown parameter 'flavour' for MulticlassSVC" in usage_error(
        "train", dna / "train.zarr", "-o", tmp_path / "m.npz", "--param", "flavour=mint"
    )
    assert (
        usage_error("train", dna / "train.zarr", "-o", tmp_path / "m.npz", "--C", -1)
        == "dmcsvm: error: The 'C' parameter of MulticlassSVC must be a float in the range "
        "(0.0, inf). Got -1 instead."
    )
    assert "--resume needs --checkpoint DIR" in usage_error(
        "train", dna / "train.zarr", "-o", tmp_path / "m.npz", "--resume"
    )
    assert "give either --scheduler or --local-workers" in usage_error(
        "train",
        dna / "train.zarr",
        "-o",
        tmp_path / "m.npz",
        "--scheduler",
        "tcp://x:1",
        "--local-workers",
        2,
    )
    assert "directory" in usage_error("train", dna / "train.zarr", "-o", tmp_path / "no" / "m.npz")
    assert os.listdir(tmp_path) == []


def _edit_meta(src, dst, edit):
    with np.load(src, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(bytes(arrays["meta"]).decode())
    edit(meta)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(dst, **arrays)


@pytest.mark.slow
def test_edited_model_files_are_refused(dna, tmp_path):
    _train_dna(dna, tmp_path / "m.npz")
    _edit_meta(tmp_path / "m.npz", tmp_path / "v.npz", lambda m: m.update(format_version=99))
    line = usage_error("predict", tmp_path / "v.npz", dna / "test.zarr", "-o", tmp_path / "p.txt")
    assert "format_version 99, written by a newer dmcsvm" in line

    def rename(m):
        m["model"]["__estimator__"] = "subprocess.Popen"

    _edit_meta(tmp_path / "m.npz", tmp_path / "e.npz", rename)
    line = usage_error("evaluate", tmp_path / "e.npz", dna / "test.zarr")
    assert "unknown estimator 'subprocess.Popen' in the model file" in line
    (tmp_path / "t.npz").write_bytes((tmp_path / "m.npz").read_bytes()[:500])
    assert "not a dmcsvm model file" in usage_error(
        "predict", tmp_path / "t.npz", dna / "test.zarr", "-o", tmp_path / "p.txt"
    )
    assert not (tmp_path / "p.txt").exists() and leftovers(tmp_path) == []


def test_unexpected_errors_exit_1_with_one_line(monkeypatch, capsys):
    from dmcsvm import cli
    from dmcsvm.cli import data

    def boom(a):
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(data, "run_info", boom)
    assert cli.main(["info", "x"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["dmcsvm: error: RuntimeError: disk on fire second line"]


# ---------------------------------------------------------------------------------- kill + resume


@pytest.mark.slow
def test_resume_after_sigkill_gives_the_same_model(tmp_path):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    np.savetxt(
        tmp_path / "train.csv", np.column_stack([y[:600], X[:600]]), delimiter=",", fmt="%.6g"
    )
    ok("convert", tmp_path / "train.csv", tmp_path / "train.zarr")
    Xtr = read_all(tmp_path / "train.zarr")[0]
    Xte = X[600:900].astype(np.float32)
    # batch 100 converges in ~330 rounds (batch 20: ~6700, over a minute); a checkpoint every 15
    # rounds, and the kill lands after the first one, a fixed number of rounds into the run
    common = [
        "train",
        tmp_path / "train.zarr",
        "--C",
        10,
        "--gamma",
        0.05,
        "--tol",
        1e-5,
        "--gap-tol",
        0,
        "--batch-size",
        100,
        "--n-jobs",
        1,
        "--no-progress",
    ]
    ok(*common, "-o", tmp_path / "full.npz")
    ck = tmp_path / "ck"
    args = [
        sys.executable,
        "-m",
        "dmcsvm.cli",
        *map(str, common),
        "-o",
        str(tmp_path / "killed.npz"),
        "--checkpoint",
        str(ck),
        "--checkpoint-every",
        "15",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 300
        while not (ck / "LATEST").exists() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        assert proc.poll() is None, "training ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not (tmp_path / "killed.npz").exists()
    from dmcsvm.checkpoint import load_checkpoint

    at = load_checkpoint(ck).rounds
    ok(
        *common,
        "-o",
        tmp_path / "resumed.npz",
        "--checkpoint",
        ck,
        "--resume",
        "--log-json",
        tmp_path / "log.jsonl",
    )
    a, b = load_model(tmp_path / "full.npz"), load_model(tmp_path / "resumed.npz")
    assert 0 < at < a.n_iter_ and at % 15 == 0
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == b.n_iter_
    for Z in (Xtr, Xte):
        assert np.array_equal(a.predict(Z), b.predict(Z))
    da, db = a.history_["dual"][-1], b.history_["dual"][-1]
    assert abs(da - db) <= 1e-6 * abs(da)
    Ba = np.zeros((600, 10))
    Bb = np.zeros((600, 10))
    Ba[a.support_] = a.dual_coef_.T
    Bb[b.support_] = b.dual_coef_.T
    # the partitions' states were saved with the checkpoint: the same rounds, bit for bit
    assert a.n_iter_ == b.n_iter_
    assert np.array_equal(Ba, Bb)
