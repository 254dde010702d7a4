"""The rough edges of the command line found by trying it as a new user, each
reproduced: output file modes, ``plot`` after a plain install, a TLS scheduler without
certificates, whitespace-separated text, ``--log-json`` for every estimator, help texts and
messages, the cluster spec files, and the warning formatter.

Most tests drive :func:`dmcsvm.cli.main` in-process (a subprocess costs seconds of imports)."""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import sys
import tomllib
import warnings
from pathlib import Path

import numpy as np
import pytest
from data_dir import DATA, need

from dmcsvm import BinarySVC, MulticlassSVC, MultiPrototypeSVC
from dmcsvm.cli import build_parser, main
from dmcsvm.cli._params import ADVANCED
from dmcsvm.model_io import estimator_registry, load_model
from dmcsvm.store import from_csv, read_all, write_arrays

ROOT = Path(__file__).resolve().parents[1]
USPS = DATA / "usps" / "zip.train.gz"  # whitespace-separated, label first
LETTER = DATA / "letter" / "letter-recognition.data"  # CSV, label (A-Z) first


def run(capsys, *args):
    """``(exit status, stdout, stderr lines)`` of the command line run in this process."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines()


def usage_error(capsys, *args):
    code, _, err = run(capsys, *args)
    assert code == 2 and len(err) == 1, (code, err)
    return err[0]


def ok(capsys, *args):
    code, out, err = run(capsys, *args)
    assert code == 0, (code, out, err)
    return out


@pytest.fixture(scope="module")
def iris(tmp_path_factory):
    from sklearn.datasets import load_iris

    X, y = load_iris(return_X_y=True)
    d = tmp_path_factory.mktemp("iris")
    write_arrays(d / "iris.zarr", X, y)
    return d / "iris.zarr"


# ------------------------------------------------------------------------- 2. output file modes


@pytest.fixture
def umask():
    """Set the process umask for one test (restored afterwards)."""
    saved = os.umask(0o022)

    def set_mask(mask):
        os.umask(mask)

    yield set_mask
    os.umask(saved)


@pytest.mark.parametrize("mask", [0o022, 0o007], ids=["umask022", "umask007"])
def test_outputs_get_the_mode_of_a_new_file(iris, tmp_path, capsys, umask, mask):
    umask(mask)
    file_mode, dir_mode = 0o666 & ~mask, 0o777 & ~mask
    ok(
        capsys,
        "train",
        iris,
        "-o",
        tmp_path / "m.npz",
        "--n-jobs",
        1,
        "--no-progress",
        "--log-json",
        tmp_path / "log.jsonl",
    )
    ok(capsys, "train", iris, "-o", tmp_path / "m.zarr", "--n-jobs", 1, "--no-progress")
    ok(capsys, "predict", tmp_path / "m.npz", iris, "-o", tmp_path / "p.txt")
    ok(capsys, "evaluate", tmp_path / "m.npz", iris, "--json", tmp_path / "e.json")
    ok(capsys, "plot", tmp_path / "log.jsonl", "-o", tmp_path / "c.png")
    for name in ("m.npz", "log.jsonl", "p.txt", "e.json", "c.png"):
        assert oct((tmp_path / name).stat().st_mode & 0o7777) == oct(file_mode), name
    assert oct((tmp_path / "m.zarr").stat().st_mode & 0o7777) == oct(dir_mode)
    assert load_model(tmp_path / "m.zarr").n_features_in_ == 4
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []


def test_atomic_file_leaves_nothing_behind_on_error(tmp_path, umask):
    from dmcsvm.cli._outputs import atomic_file

    umask(0o022)
    (tmp_path / "out.txt").write_text("old\n")
    with pytest.raises(RuntimeError, match="half-way"):
        with atomic_file(tmp_path / "out.txt") as fh:
            fh.write("new, half written")
            raise RuntimeError("half-way")
    assert os.listdir(tmp_path) == ["out.txt"]
    assert (tmp_path / "out.txt").read_text() == "old\n"
    with atomic_file(tmp_path / "out.txt") as fh:
        fh.write("new\n")
    assert (tmp_path / "out.txt").read_text() == "new\n"
    assert (tmp_path / "out.txt").stat().st_mode & 0o777 == 0o644


# ------------------------------------------------------------------------- 3. plot, plain install


def test_matplotlib_is_the_plot_extra():
    """matplotlib is needed only by ``dmcsvm plot``: an optional extra, ``dmcsvm[plot]`` (the
    name the error below gives), not a dependency of every install."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(re.match(r"matplotlib\b", d) for d in meta["dependencies"])
    assert any(re.match(r"matplotlib\b", d) for d in meta["optional-dependencies"]["plot"])


def test_plot_without_matplotlib_is_a_usage_error(tmp_path, capsys, monkeypatch):
    (tmp_path / "log.jsonl").write_text('{"round": 0, "dual": 1, "primal": 2, "gap": 0.5}\n')
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails as uninstalled
    assert usage_error(capsys, "plot", tmp_path / "log.jsonl") == (
        "dmcsvm: error: dmcsvm plot needs matplotlib, which is not installed here: "
        "pip install 'dmcsvm[plot]'"
    )
    assert os.listdir(tmp_path) == ["log.jsonl"]


# ------------------------------------------------------------------------- 4. TLS scheduler


def test_tls_scheduler_without_certificates_says_what_to_set(iris, tmp_path, capsys):
    import dask

    # distributed's defaults first: set() on a key of a config that has no "distributed" yet
    # would delete the whole section on exit, defaults included, for every later test
    import distributed  # noqa: F401

    unset = {
        "distributed.comm.tls.ca-file": None,
        "distributed.comm.tls.client.cert": None,
        "distributed.comm.tls.client.key": None,
    }
    with dask.config.set(unset):
        line = usage_error(
            capsys, "train", iris, "-o", tmp_path / "m.npz", "--scheduler", "tls://127.0.0.1:1"
        )
    assert line == (
        "dmcsvm: error: tls://127.0.0.1:1 is a TLS scheduler, but no client certificate is "
        "configured: point DASK_CONFIG at a Dask config that sets distributed.comm.tls.ca-file, "
        "distributed.comm.tls.client.cert and distributed.comm.tls.client.key, such as the "
        "dask-tls.yaml that cluster/tls/make-certs.sh writes (in Python: a Client with "
        "security=distributed.Security(...)); see section 3, TLS, of cluster/README.md"
    )
    assert "## 3. TLS" in (ROOT / "cluster" / "README.md").read_text()
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------- 5. whitespace text


def test_whitespace_delimiter_with_trailing_blanks(tmp_path, capsys):
    (tmp_path / "d.txt").write_text("1  0.5\t-1.25 \n\n 2 3 4e-1   \n1\t\t7 8\n")
    ok(capsys, "convert", tmp_path / "d.txt", tmp_path / "d.zarr", "--delimiter", "whitespace")
    X, y = read_all(tmp_path / "d.zarr")
    assert np.array_equal(X, np.array([[0.5, -1.25], [3, 0.4], [7, 8]], np.float32))
    assert y.tolist() == [1, 2, 1]
    # the Python API: delimiter="whitespace" (or None) and a check of the delimiter
    info = from_csv(tmp_path / "d.txt", tmp_path / "e.zarr", delimiter=None, label_column=-1)
    assert info.n_features == 2 and read_all(info)[1].tolist() == [-1.25, 0.4, 8.0]
    with pytest.raises(
        ValueError,
        match=re.escape(
            "delimiter must be one character (not a quote or a line break) or 'whitespace', "
            "got '::'"
        ),
    ):
        from_csv(tmp_path / "d.txt", tmp_path / "f.zarr", delimiter="::")
    assert usage_error(
        capsys, "convert", tmp_path / "d.txt", tmp_path / "f.zarr", "--delimiter", "::"
    ) == (
        "dmcsvm: error: argument --delimiter: must be one character, 'tab' or 'whitespace', "
        "got '::'"
    )
    (tmp_path / "t.tsv").write_text("a\t1\t2\nb\t3\t4\n")
    ok(capsys, "convert", tmp_path / "t.tsv", tmp_path / "t.zarr", "--delimiter", "tab")
    assert read_all(tmp_path / "t.zarr")[0].tolist() == [[1, 2], [3, 4]]


def test_usps_converts_and_libsvm_errors_suggest_the_format(tmp_path, capsys):
    with gzip.open(need(USPS), "rb") as f:
        lines = [next(f) for _ in range(50)]
    src = tmp_path / "zip.train.gz"
    with gzip.open(src, "wb") as f:
        f.writelines(lines)
    # read as LIBSVM (the extension says nothing): the error says what to pass
    assert usage_error(capsys, "convert", src, tmp_path / "u.zarr") == (
        f"dmcsvm: error: {src}, line 1: cannot parse feature '-1.0000' (the line looks like "
        "whitespace-separated columns, not LIBSVM); read it with --format csv "
        "--delimiter whitespace"
    )
    out = ok(
        capsys, "convert", src, tmp_path / "u.zarr", "--format", "csv", "--delimiter", "whitespace"
    )
    assert (
        out == f"wrote {tmp_path / 'u.zarr'}: 50 rows x 256 features, dense, 1 chunk of 50 rows\n"
    )
    X, y = read_all(tmp_path / "u.zarr")
    ref = np.array([[float(v) for v in line.split()] for line in lines])
    assert np.array_equal(X, ref[:, 1:].astype(np.float32))
    assert np.array_equal(y, ref[:, 0].astype(np.int64))
    # CSV content read as LIBSVM
    text = need(LETTER).read_text().splitlines()[:5]
    (tmp_path / "letter.data").write_text("\n".join(text) + "\n")
    assert usage_error(capsys, "convert", tmp_path / "letter.data", tmp_path / "l.zarr") == (
        f"dmcsvm: error: {tmp_path / 'letter.data'}, line 1: bad label "
        f"'{text[0][:30]}...' (the line looks like comma-separated values, not LIBSVM); read it "
        "with --format csv"
    )
    # a multi-label LIBSVM line is still reported as such
    (tmp_path / "ml.svm").write_text("1 1:1\n1,2 3:1 4:1\n")
    assert usage_error(capsys, "convert", tmp_path / "ml.svm", tmp_path / "ml.zarr") == (
        f"dmcsvm: error: {tmp_path / 'ml.svm'}, line 2: bad label '1,2' (multi-label files "
        "are not supported)"
    )
    assert sorted(os.listdir(tmp_path)) == ["letter.data", "ml.svm", "u.zarr", "zip.train.gz"]


# ------------------------------------------------------------------------- 6. --log-json


@pytest.mark.parametrize("name", ["OneVsRestSVC", "OneVsOneSVC"])
def test_log_json_for_decomposed_estimators(name, iris, tmp_path, capsys):
    out = ok(
        capsys,
        "train",
        iris,
        "--estimator",
        name,
        "-o",
        tmp_path / "m.npz",
        "--param",
        "n_jobs=1",
        "--no-progress",
        "--log-json",
        tmp_path / "o.jsonl",
        "--test",
        iris,
    )
    m = load_model(tmp_path / "m.npz")
    assert re.search(rf"{m.n_iter_.sum()} rounds over 3 binary problems; model written", out)
    assert re.search(r"^test accuracy 0\.9\d+ on 150 patterns$", out, re.M)
    rows = [json.loads(x) for x in (tmp_path / "o.jsonl").read_text().splitlines()]
    probs = [r["problem"] for r in rows]
    # each problem's rounds, from round 0 (the starting point) to its last
    assert [probs.count(k) for k in range(3)] == (m.n_iter_ + 1).tolist()
    assert [r["round"] for r in rows if r["problem"] == 2] == list(range(m.n_iter_[2] + 1))
    if name == "OneVsRestSVC":  # problem 0 is class 0 against the rest
        X, y = read_all(iris)
        ref = BinarySVC(n_jobs=1).fit(X, (y == 0).astype(int)).history_["objective"]
        got = [r["objective"] for r in rows if r["problem"] == 0]
        np.testing.assert_allclose(got, ref, rtol=1e-6)  # store vs array: float rounding
    neg = "rest" if name == "OneVsRestSVC" else 1
    assert {k: rows[0][k] for k in ("problem", "positive", "negative", "round")} == {
        "problem": 0,
        "positive": 0,
        "negative": neg,
        "round": 0,
    }
    assert all(isinstance(r["objective"], float) for r in rows)
    assert "_fit_problems" not in vars(m)
    # and the log plots: one line per binary problem
    n = len(rows)
    assert (
        ok(capsys, "plot", tmp_path / "o.jsonl")
        == f"wrote {tmp_path / 'o.png'} ({n} rounds of 3 binary problems)\n"
    )
    assert (tmp_path / "o.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_reads_every_estimators_log(iris, tmp_path, capsys):
    ok(
        capsys,
        "train",
        iris,
        "--estimator",
        "MultiPrototypeSVC",
        "-o",
        tmp_path / "m.npz",
        "--param",
        "n_jobs=1",
        "--max-epochs",
        3,
        "--random-state",
        0,
        "--no-progress",
        "--log-json",
        tmp_path / "mp.jsonl",
    )
    n = len((tmp_path / "mp.jsonl").read_text().splitlines())
    assert (
        ok(capsys, "plot", tmp_path / "mp.jsonl", "--x", "time")
        == f"wrote {tmp_path / 'mp.png'} ({n} rounds)\n"
    )
    (tmp_path / "bad.jsonl").write_text('{"round": 0, "energy": 1}\n')
    assert usage_error(capsys, "plot", tmp_path / "bad.jsonl") == (
        f"dmcsvm: error: {tmp_path / 'bad.jsonl'}: the rounds have neither 'dual' and "
        "'primal' nor 'objective' fields"
    )


def test_log_json_refused_before_training(iris, tmp_path, capsys, monkeypatch):
    from dmcsvm.cli import train

    monkeypatch.setattr(train, "_log_source", lambda est: None)
    assert (
        usage_error(
            capsys, "train", iris, "-o", tmp_path / "m.npz", "--log-json", tmp_path / "o.jsonl"
        )
        == "dmcsvm: error: MulticlassSVC records no per-round history for --log-json"
    )
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------- 8. help and messages


def _subparsers(p):
    return next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.parametrize("name", sorted(estimator_registry()))
def test_every_option_has_a_help_text(name):
    p = build_parser(["train", "--estimator", name])
    for cmd, sp in _subparsers(p).items():
        for a in sp._actions:
            assert a.help and not a.help.startswith("("), (cmd, a.option_strings, a.help)
    train = _subparsers(p)["train"]
    params = [
        a
        for a in train._actions
        if a.dest.startswith(("est__", "opt__")) and a.help != argparse.SUPPRESS
    ]
    assert params
    hidden = {
        a.dest[len("est__") :] for a in train._actions if a.dest.startswith(("est__", "opt__"))
    } - {a.dest[len("est__") :] for a in params}
    assert hidden <= set(ADVANCED)  # left out of the help: the advanced ones only
    group = next(g for g in train._action_groups if g.title.startswith("parameters of"))
    for name_ in hidden:  # ... named in one line of the help
        assert f"--{name_.replace('_', '-')}" in group.description
    for a in params:
        # meaning, then the values it takes, then its default
        assert re.fullmatch(r"\S.{8,}\. Allowed: .+\. Default: .+\.", a.help, re.S), a.help
    helps = {a.dest: a.help for a in params}
    if name == "MulticlassSVC":
        assert helps["est__kernel"] == (
            "Kernel function: rbf exp(-gamma |x - z|^2), poly (gamma <x, z> + coef0)^degree, "
            "linear <x, z>, sigmoid tanh(gamma <x, z> + coef0), precomputed (the data are "
            "kernel values); -t also takes LIBSVM's numbers 0 linear, 1 poly, 2 rbf, "
            "3 sigmoid, 4 precomputed. Allowed: {'rbf', 'poly', 'linear', 'sigmoid', "
            "'precomputed'} or callable. Default: 'rbf'."
        )
        assert helps["est__shrinking"] == (
            "Shrink the active set, with a final unshrunk check. Allowed: "
            "--shrinking or --no-shrinking. Default: --shrinking."
        )


def test_version_and_no_progress(capsys, tmp_path):
    from dmcsvm import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"dmcsvm {__version__}\n"
    p = build_parser(["predict"])
    a = p.parse_args(["predict", "m.npz", "d.zarr", "-o", "p.txt", "--no-progress"])
    assert a.progress is False
    a = p.parse_args(["predict", "m.npz", "d.zarr", "-o", "p.txt", "--progress"])
    assert a.progress is True


def test_convert_messages_and_progress_count(tmp_path, capsys, monkeypatch):
    (tmp_path / "d.svm").write_text("1 1:0.5 3:1\n2 2:1\n")
    size = (tmp_path / "d.svm").stat().st_size
    out = ok(capsys, "convert", tmp_path / "d.svm", tmp_path / "d.zarr", "--no-progress")
    assert out == f"wrote {tmp_path / 'd.zarr'}: 2 rows x 3 features, dense, 1 chunk of 2 rows\n"
    assert "chunking       1 chunk of 2 rows\n" in ok(capsys, "info", tmp_path / "d.zarr")
    assert (
        usage_error(capsys, "convert", tmp_path / "d.svm", tmp_path / "d.zarr")
        == f"dmcsvm: error: {tmp_path / 'd.zarr'} already exists; pass --overwrite to replace it"
    )

    seen = []

    class Bar:
        def __init__(self, **kw):
            self.kw, self.total, self.n, self.desc = kw, None, 0, kw.get("desc")

        def set_description(self, desc, refresh=True):
            self.desc = desc

        def refresh(self):
            seen.append((self.desc, self.n, self.total))

        def close(self):
            pass

    from dmcsvm.cli import _inputs

    monkeypatch.setattr(_inputs, "progress_bar", lambda enabled, **kw: Bar(**kw))
    ok(capsys, "convert", tmp_path / "d.svm", tmp_path / "d.zarr", "--overwrite", "--progress")
    assert seen and all(total == size and 0 <= n <= size for _, n, total in seen), seen
    assert seen[-1] == ("converting d.svm (pass 2 of 2, writing)", size, size)
    assert ("converting d.svm (pass 1 of 2, checking)", size, size) in seen


@pytest.mark.parametrize("label,shown", [(1, "1"), ("only", "'only'")])
def test_one_class_message_shows_the_plain_label(label, shown, iris, tmp_path, capsys):
    X = np.random.default_rng(0).normal(size=(12, 3))
    y = np.full(12, label)
    for cls in (MulticlassSVC, MultiPrototypeSVC, BinarySVC):
        with pytest.raises(ValueError) as e:
            cls().fit(X, y)
        assert str(e.value) == (
            f"{cls.__name__} needs samples of at least 2 classes in the "
            f"data, but the data contains only one class: {shown}"
        )
    if label == 1:
        write_arrays(tmp_path / "one.zarr", X, y)
        assert usage_error(capsys, "train", tmp_path / "one.zarr", "-o", tmp_path / "m.npz") == (
            "dmcsvm: error: MulticlassSVC needs samples of at least 2 classes in the data, but "
            "the data contains only one class: 1"
        )


# ------------------------------------------------------------------------- 9. cluster files


def test_scheduler_spec_binds_like_the_script():
    import yaml

    spec = yaml.safe_load((ROOT / "cluster" / "spec" / "scheduler.yaml").read_text())
    script = (ROOT / "cluster" / "start-scheduler.sh").read_text()
    default = re.search(r'host="\$\{DMCSVM_HOST:-([^}]+)\}"', script).group(1)
    assert spec["opts"]["host"] == default == "127.0.0.1"


def test_cluster_readme_points_at_recover_timeout_where_it_is():
    import inspect

    from dmcsvm.engine.dask import DaskExecutor

    text = " ".join((ROOT / "cluster" / "README.md").read_text().split())
    assert "recover_timeout" in inspect.signature(DaskExecutor.__init__).parameters
    for m in re.finditer(r"recover_timeout", text):
        near = text[m.start() - 200 : m.end() + 200]
        assert "dmcsvm/engine/dask/executor.py" in near and "top-level README" not in near


# ------------------------------------------------------------------------- 10. warnings


def test_main_formats_its_warnings_and_restores_the_formatter(capsys, monkeypatch):
    from dmcsvm.cli import data

    def warn(a):
        warnings.warn("slow\nstore", UserWarning, stacklevel=2)
        return 0

    monkeypatch.setattr(data, "run_info", warn)

    def before(message, category, filename, lineno, line=None):  # the caller's formatter
        return f"theirs: {message}\n"

    monkeypatch.setattr(warnings, "formatwarning", before)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda m, c, f, n, file=None, line=None: sys.stderr.write(
            warnings.formatwarning(m, c, f, n, line)
        )
        assert main(["info", "x"]) == 0
    assert capsys.readouterr().err == "dmcsvm: warning: slow store\n"
    assert warnings.formatwarning is before
    assert warnings.formatwarning("x", UserWarning, "f.py", 1) == "theirs: x\n"
    assert main(["info", "--bogus"]) == 2  # restored on every exit path
    assert warnings.formatwarning is before
