"""``dmcsvm train STORE|FILE -o MODEL``: fit any registered estimator and save it.

The estimator is picked by ``--estimator NAME`` from :func:`dmcsvm.model_io.estimator_registry`
and every constructor parameter becomes an option (``--C 10``, ``--gap-tol 1e-3``, booleans as
``--shrinking/--no-shrinking``), besides ``--param key=value``; so a new estimator is trainable
from the command line as soon as :mod:`dmcsvm.estimators` exports it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import time

import numpy as np

from ..file_modes import give_default_mode
from ..runtime_params import CLI_OPTIONS
from ._cluster import add_cluster_options, check_cluster_options, cluster_client
from ._inputs import (
    add_input_options,
    as_store,
    fits_stores,
    gram_rows,
    is_precomputed,
    read_arrays,
)
from ._outputs import add_overwrite_option, atomic_file, check_output
from ._params import (
    add_param_options,
    estimator_params,
    former_names,
    param_defaults,
    parse_value,
    solver_option_names,
)
from ._usage import UsageError, plural, stderr_is_tty
from ._warmup import warm_up_on_store

DEFAULT_ESTIMATOR = "MulticlassSVC"
# the runtime parameters set by the dedicated options below, not by --NAME (one list:
# runtime_params, which also tells model files and checkpoints to leave them out)
_DEDICATED = CLI_OPTIONS


def _estimator_class(name):
    from ..model_io import estimator_registry

    reg = estimator_registry()
    if name not in reg:
        raise UsageError(f"unknown estimator {name!r} (choose from {', '.join(sorted(reg))})")
    return reg[name]


_HELP = "train an estimator on a store or a LIBSVM/CSV/.npy file"

_DESCRIPTION = """\
Train an estimator on DATA (a dmcsvm store or a LIBSVM/CSV/.npy file) and save it to MODEL.
Every parameter of the estimator is an option (-c 10, --gap-tol 1e-3, --no-shrinking), or
--param KEY=VALUE.

  dmcsvm train train.svm -o model.npz -c 10 -g 0.5 -t rbf --scale"""


def add_parser(sub, argv=None, full=True):
    """The ``train`` sub-command, with one option per parameter of the chosen estimator;
    ``full=False``: its name and help only (another command runs)."""
    if not full:
        return sub.add_parser("train", help=_HELP)
    from ..model_io import estimator_registry

    name = DEFAULT_ESTIMATOR
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--estimator", default=DEFAULT_ESTIMATOR)
    known, _ = pre.parse_known_args(argv or [])
    reg = estimator_registry()
    if known.estimator in reg:
        name = known.estimator
    t = sub.add_parser(
        "train",
        help=_HELP,
        description=_DESCRIPTION,
        usage="dmcsvm train DATA -o MODEL [options]",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    t.add_argument(
        "data",
        help="training data: a dmcsvm store directory or a LIBSVM/CSV/.npy "
        "file (a store's optional 'sample_weight' array of per-row "
        "weights is used)",
    )
    t.add_argument(
        "-o",
        "--output",
        "--model",
        dest="output",
        required=True,
        metavar="MODEL",
        help="model to write: NAME.npz (one file) or a directory (zarr group)",
    )
    add_overwrite_option(t, "MODEL and the --log-json file")
    t.add_argument(
        "--scale",
        action="store_true",
        help="scale every feature to [-1, 1] first (as dmcsvm scale); the scaling "
        "is stored in the model and applied by predict (the data are read "
        "into memory)",
    )
    t.add_argument(
        "--estimator",
        default=DEFAULT_ESTIMATOR,
        metavar="NAME",
        help=f"estimator to train: {', '.join(sorted(reg))} (default {DEFAULT_ESTIMATOR})",
    )
    t.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set any estimator parameter (repeatable)",
    )
    t.add_argument("--test", help="evaluate on this store or file after training")
    t.add_argument("--checkpoint", metavar="DIR", help="write checkpoints of the solve to DIR")
    t.add_argument(
        "--checkpoint-every",
        default="10",
        metavar="N|Ns",
        help="checkpoint every N rounds, or every N seconds as '30s' (default 10)",
    )
    t.add_argument(
        "--resume",
        action="store_true",
        help="continue from the newest checkpoint in --checkpoint DIR",
    )
    t.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar (default: when stderr is a terminal)",
    )
    t.add_argument(
        "--log-json", metavar="FILE", help="write the convergence history, one JSON line per round"
    )
    add_cluster_options(t)
    add_input_options(t, brief=True)
    g = t.add_argument_group(
        f"parameters of {name} (as in the Python API; --estimator NAME --help for another's)"
    )
    add_param_options(g, reg[name], reg[DEFAULT_ESTIMATOR], skip=_DEDICATED)
    t.set_defaults(func=run)
    return t


def build_estimator(a):
    """The estimator of ``a.estimator`` with the parameters of the command line."""
    cls = _estimator_class(a.estimator)
    known = param_defaults(cls)
    options = solver_option_names(cls)
    former = former_names(cls)
    params = estimator_params(a)
    for item in a.param:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise UsageError(f"--param needs KEY=VALUE, got {item!r}")
        if key not in known and key not in options and key not in former:
            raise UsageError(
                f"unknown parameter {key!r} for {a.estimator} "
                f"(known: {', '.join(sorted(set(known) | set(options)))})"
            )
        if key in _DEDICATED:
            raise UsageError(f"set {key} with {_DEDICATED[key]}, not --param")
        if key in known:
            params[key] = parse_value(value)
        else:  # a solver option, or its name in dmcsvm 0.2
            given = params.get("solver_options")
            params["solver_options"] = {
                **(given if isinstance(given, dict) else {}),
                former.get(key, key): parse_value(value),
            }
    progress = stderr_is_tty() if a.progress is None else a.progress
    if "verbose" in known:
        params["verbose"] = bool(progress)
    if a.checkpoint or a.resume:
        if "checkpoint" not in known:
            raise UsageError(f"{a.estimator} does not support checkpoints")
        if a.resume and not a.checkpoint:
            raise UsageError("--resume needs --checkpoint DIR")
        every = a.checkpoint_every.strip()
        params["checkpoint"] = os.path.abspath(a.checkpoint)
        params["checkpoint_every"] = int(every) if every.isdigit() else every
        params["resume"] = bool(a.resume)
    if (a.scheduler or a.local_workers) and "client" not in known:
        raise UsageError(f"{a.estimator} cannot run on a Dask cluster (it has no client parameter)")
    try:
        est = cls(**params)
    except TypeError as e:
        raise UsageError(f"{a.estimator}: {e}") from None
    return est


def _plain(v):
    v = v.item() if isinstance(v, np.generic) else v
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _rows(history, extra=None):
    """One dict per round of a history (dict of equal-length columns)."""
    keys = list(history)
    n = len(history[keys[0]]) if keys else 0
    for i in range(n):
        row = dict(extra or {})
        row.update((k, _plain(history[k][i])) for k in keys)
        yield row


def write_log(path, history):
    """One JSON object per round (NaN/inf as null) to ``path``, atomically.  ``history`` is a
    dict of columns, or a list of ``(fields, columns)`` of the binary problems of a
    decomposed estimator (each round then also names its problem)."""
    parts = [({}, history)] if isinstance(history, dict) else history
    with atomic_file(path) as fh:
        for extra, hist in parts:
            for row in _rows(hist, extra):
                fh.write(json.dumps(row) + "\n")


class _ProblemHistories:
    """Keeps the per-round history of every binary problem solved by a decomposed estimator
    (OneVsRestSVC, OneVsOneSVC), which keeps only their round counts: wraps its
    ``_fit_problems`` for one fit, then removes the wrapper."""

    def __init__(self, est):
        self.est, self.histories = est, None

    def __enter__(self):
        inner = self.est._fit_problems

        def fit_problems(td, problems, *args, **kw):
            out = inner(td, problems, *args, **kw)
            self.histories = [r[3].history for r in out]
            return out

        self.est._fit_problems = fit_problems
        return self

    def __exit__(self, *exc):
        self.est.__dict__.pop("_fit_problems", None)

    def log(self):
        """``[(fields naming the problem, history)]`` for :func:`write_log`."""
        classes = [_plain(c) for c in self.est.classes_]
        out = []
        for k, ((i, j), hist) in enumerate(
            zip(self.est.pairs_, self.histories or [], strict=False)
        ):
            neg = "rest" if j < 0 else classes[j]
            out.append(({"problem": k, "positive": classes[i], "negative": neg}, hist))
        return out


def _log_source(est):
    """How ``--log-json`` gets the rounds of ``est``: ``"history"`` (its ``history_``),
    ``"problems"`` (the binary problems of a decomposed estimator), or None."""
    doc = type(est).__doc__ or ""
    if "history_" in doc:
        return "history"
    if hasattr(est, "_fit_problems") and "pairs_" in doc:
        return "problems"
    return None


def _fit_scaled(est, info):
    """``Pipeline(MinMaxScaler(feature_range=(-1, 1)), est)`` fitted on the store's rows read
    into memory (and its sample weights, if any): ``train --scale``."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import MinMaxScaler

    from ..store import read_sample_weight

    X, y = read_arrays(info)
    if not isinstance(X, np.ndarray):
        X = X.toarray()  # MinMaxScaler takes dense rows (and makes them dense)
    model = make_pipeline(MinMaxScaler(feature_range=(-1, 1)), est)
    sw = read_sample_weight(info)
    kw = {} if sw is None else {f"{model.steps[-1][0]}__sample_weight": sw}
    return model.fit(X, y, **kw)


def _numba_setup() -> None:
    """numba's once-per-process set-up (its typing and target registries, 0.3-0.4 s:
    benchmarks/results/start_up.md), under its compiler lock: what the first call of any
    numba function would do, done while the data are read instead (:func:`run`)."""
    try:
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.registry import cpu_target

        with global_compiler_lock:
            cpu_target.typing_context.refresh()
            cpu_target.target_context.refresh()
    except Exception:  # noqa: BLE001 - only a head start: the fit does it anyway
        pass


def run(a) -> int:
    import threading

    from ..model_io import save_model

    check_output(a.output, "model", overwrite=a.overwrite)
    if a.log_json:
        check_output(a.log_json, "log", overwrite=a.overwrite)
    check_cluster_options(a)
    est = build_estimator(a)
    source = _log_source(est) if a.log_json else None
    if a.log_json and source is None:
        raise UsageError(f"{a.estimator} records no per-round history for --log-json")
    if a.scale and is_precomputed(est):
        raise UsageError(
            "--scale does not apply to a precomputed kernel (-t 4): the data are "
            "kernel values, not features"
        )
    progress = bool(getattr(est, "verbose", False))
    problems = _ProblemHistories(est) if source == "problems" else contextlib.nullcontext()
    # numba's per-process set-up runs beside the reading (and converting) of the data, and is
    # done before the fit starts (joined below): a first fit no longer pays it
    setup = threading.Thread(target=_numba_setup, name="dmcsvm-numba-setup")
    setup.start()
    try:
        with as_store(a.data, a, progress=progress) as info:
            setup.join()
            return _train(a, est, info, problems, source, save_model)
    finally:
        setup.join()


def _train(a, est, info, problems, source, save_model) -> int:
    """``run`` once the data are a store: fit (on a cluster or here), save, log, report."""
    if a.local_workers:
        # numba compiles here before the LocalCluster's scheduler shares this process
        # (start_warmup: compiling beside it starved its heartbeats on a first run)
        warm_up_on_store(est, info)
    with cluster_client(a) as client:
        if client is not None:
            est.set_params(client=client)
        t = time.perf_counter()
        with problems:
            if a.scale:
                model = _fit_scaled(est, info)
            elif is_precomputed(est):
                from ..store import read_sample_weight

                X, y = read_arrays(info)
                K = gram_rows(X, X.shape[0], a.data, train=True)
                sw = read_sample_weight(info)
                est.fit(K, y) if sw is None else est.fit(K, y, sample_weight=sw)
            elif fits_stores(est):
                est.fit(info.url)
            else:
                from ..store import read_sample_weight

                X, y = read_arrays(info)
                sw = read_sample_weight(info)
                est.fit(X, y) if sw is None else est.fit(X, y, sample_weight=sw)
        fit_s = time.perf_counter() - t
        if "client" in est.get_params(deep=False):
            est.set_params(client=None)  # where it trained is not part of the model
    n_train = info.n_samples
    save_model(model if a.scale else est, a.output)
    give_default_mode(a.output)  # save_model writes through mkstemp/mkdtemp (0600/0700)
    if source == "history":
        write_log(a.log_json, est.history_)
    elif source == "problems":
        write_log(a.log_json, problems.log())
    parts = [f"trained {a.estimator} on {n_train} patterns in {fit_s:.2f} s"]
    if hasattr(est, "support_"):
        parts.append(f"{len(est.support_)} support vectors")
    if hasattr(est, "n_iter_"):
        rounds = np.asarray(est.n_iter_)
        if rounds.ndim:  # one count per binary problem
            parts.append(
                f"{int(rounds.sum())} {plural(int(rounds.sum()), 'round')} over "
                f"{rounds.size} binary {plural(rounds.size, 'problem')}"
            )
        else:
            parts.append(f"{int(rounds)} {plural(int(rounds), 'round')}")
    print(", ".join(parts) + f"; model written to {a.output}")
    if a.test:
        from .predict import _n_features, predictions

        with as_store(a.test, a, n_features=_n_features(est)) as tinfo:
            pred, _, y = predictions(model if a.scale else est, tinfo, with_labels=True)
        print(f"test accuracy {np.mean(pred == y):.4f} on {len(y)} patterns")
    return 0
