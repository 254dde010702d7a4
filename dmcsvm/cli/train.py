"""``dmcsvm train STORE|FILE -o MODEL``: fit any registered estimator and save it.

The estimator is picked by ``--estimator NAME`` from :func:`dmcsvm.model_io.estimator_registry`
and every constructor parameter becomes an option (``--C 10``, ``--gap-tol 1e-3``, booleans as
``--shrinking/--no-shrinking``), besides ``--param key=value``; so a new estimator is trainable
from the command line as soon as :mod:`dmcsvm.estimators` exports it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import time

import numpy as np

from ._common import (UsageError, add_cluster_options, add_input_options, as_store,
                      atomic_file, check_cluster_options, check_output, cluster_client,
                      fits_stores, give_default_mode, read_arrays, stderr_is_tty)

DEFAULT_ESTIMATOR = "MulticlassSVC"
# parameters set by the dedicated options below, not by --NAME
_DEDICATED = {"client": "--scheduler / --local-workers", "n_workers": "--local-workers",
              "threads_per_worker": "--threads-per-worker", "memory_limit": "--memory-limit",
              "verbose": "--progress / --no-progress", "checkpoint": "--checkpoint",
              "checkpoint_every": "--checkpoint-every", "resume": "--resume"}


def parse_value(text: str):
    """A parameter value from the command line: int, float, true/false/none, JSON, else text."""
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for conv in (int, float):
        try:
            return conv(t)
        except ValueError:
            pass
    if t[:1] in "[{\"":
        try:
            return json.loads(t)
        except ValueError:
            pass
    return t


def _estimator_class(name):
    from ..model_io import estimator_registry
    reg = estimator_registry()
    if name not in reg:
        raise UsageError(f"unknown estimator {name!r} (choose from {', '.join(sorted(reg))})")
    return reg[name]


def _param_defaults(cls) -> dict:
    sig = inspect.signature(cls.__init__)
    return {k: p.default for k, p in sig.parameters.items()
            if k != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


def add_parser(sub, argv=None):
    """The ``train`` sub-command, with one option per parameter of the chosen estimator."""
    from ..model_io import estimator_registry
    name = DEFAULT_ESTIMATOR
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--estimator", default=DEFAULT_ESTIMATOR)
    known, _ = pre.parse_known_args(argv or [])
    reg = estimator_registry()
    if known.estimator in reg:
        name = known.estimator
    t = sub.add_parser("train", help="train an estimator on a store or a LIBSVM/CSV/.npy file",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    t.add_argument("data", help="training data: a dmcsvm store directory or a LIBSVM/CSV/.npy file")
    t.add_argument("-o", "--output", "--model", dest="output", required=True,
                   help="model to write: NAME.npz (one file) or a directory (zarr group)")
    t.add_argument("--estimator", default=DEFAULT_ESTIMATOR, metavar="NAME",
                   help=f"estimator to train: {', '.join(sorted(reg))} (default {DEFAULT_ESTIMATOR})")
    t.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="set any estimator parameter (repeatable)")
    t.add_argument("--test", help="evaluate on this store or file after training")
    t.add_argument("--checkpoint", metavar="DIR", help="write checkpoints of the solve to DIR")
    t.add_argument("--checkpoint-every", default="10", metavar="N|Ns",
                   help="checkpoint every N rounds, or every N seconds as '30s' (default 10)")
    t.add_argument("--resume", action="store_true",
                   help="continue from the newest checkpoint in --checkpoint DIR")
    t.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show a progress bar (default: when stderr is a terminal)")
    t.add_argument("--log-json", metavar="FILE",
                   help="write the convergence history, one JSON line per round")
    add_cluster_options(t)
    add_input_options(t)
    g = t.add_argument_group(f"parameters of {name} (defaults as in the Python API)")
    for p, default in _param_defaults(reg[name]).items():
        if p in _DEDICATED:
            continue
        flags = [f"--{p}"] + ([f"--{p.replace('_', '-')}"] if "_" in p else [])
        if isinstance(default, bool):
            g.add_argument(*flags, dest=f"est__{p}", action=argparse.BooleanOptionalAction,
                           default=argparse.SUPPRESS, help=f"(default {default})")
        else:
            g.add_argument(*flags, dest=f"est__{p}", type=parse_value, default=argparse.SUPPRESS,
                           metavar="V", help=f"(default {default!r})")
    t.set_defaults(func=run)
    return t


def build_estimator(a):
    """The estimator of ``a.estimator`` with the parameters of the command line."""
    cls = _estimator_class(a.estimator)
    known = _param_defaults(cls)
    params = {k[len("est__"):]: v for k, v in vars(a).items() if k.startswith("est__")}
    for item in a.param:
        key, sep, value = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise UsageError(f"--param needs KEY=VALUE, got {item!r}")
        if key not in known:
            raise UsageError(f"unknown parameter {key!r} for {a.estimator} "
                             f"(known: {', '.join(sorted(known))})")
        if key in _DEDICATED:
            raise UsageError(f"set {key} with {_DEDICATED[key]}, not --param")
        params[key] = parse_value(value)
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


def write_log(path, history):
    """One JSON object per round (NaN/inf as null) to ``path``, atomically."""
    keys = list(history)
    n = len(history[keys[0]]) if keys else 0
    with atomic_file(path) as fh:
        for i in range(n):
            row = {}
            for k in keys:
                v = history[k][i]
                v = v.item() if isinstance(v, np.generic) else v
                if isinstance(v, float) and not math.isfinite(v):
                    v = None
                row[k] = v
            fh.write(json.dumps(row) + "\n")


def run(a) -> int:
    from ..model_io import save_model
    check_output(a.output, "model")
    if a.log_json:
        check_output(a.log_json, "log")
    check_cluster_options(a)
    est = build_estimator(a)
    progress = bool(getattr(est, "verbose", False))
    with as_store(a.data, a, progress=progress) as info, cluster_client(a) as client:
        if client is not None:
            est.set_params(client=client)
        t = time.perf_counter()
        if fits_stores(est):
            est.fit(info.url)
        else:
            X, y = read_arrays(info)
            est.fit(X, y)
        fit_s = time.perf_counter() - t
        if "client" in est.get_params(deep=False):
            est.set_params(client=None)      # where it trained is not part of the model
        n_train = info.n_samples
    save_model(est, a.output)
    give_default_mode(a.output)     # save_model writes through mkstemp/mkdtemp (0600/0700)
    hist = getattr(est, "history_", None)
    if a.log_json:
        if not isinstance(hist, dict) or not hist:
            raise UsageError(f"{a.estimator} records no per-round history for --log-json")
        write_log(a.log_json, hist)
    parts = [f"trained {a.estimator} on {n_train} patterns in {fit_s:.2f} s"]
    if hasattr(est, "support_"):
        parts.append(f"{len(est.support_)} support vectors")
    if hasattr(est, "n_iter_"):
        parts.append(f"{est.n_iter_} rounds")
    print(", ".join(parts) + f"; model written to {a.output}")
    if a.test:
        from .predict import predictions
        with as_store(a.test, a, n_features=est.n_features_in_) as tinfo:
            pred, _, y = predictions(est, tinfo, with_labels=True)
        print(f"test accuracy {np.mean(pred == y):.4f} on {len(y)} patterns")
    return 0
