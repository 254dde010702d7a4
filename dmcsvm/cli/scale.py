"""``dmcsvm scale DATA -o OUT``: scale every feature to [-1, 1] (or [lower, upper]), as LIBSVM's
``svm-scale`` does, with its range file (``-s`` save, ``-r`` restore).

The scaling is scikit-learn's ``MinMaxScaler``: ``x' = lower + (x - min) (upper - lower) /
(max - min)``, and a feature whose min equals its max is mapped to ``lower``.  The range file has
``svm-scale``'s layout (a line ``x``, a line ``lower upper``, then one line ``index min max`` per
feature, counted from 1), so a file written by either tool scales the same way in the other
(``svm-scale`` leaves out features it saw constant; a feature missing from the file is read as
min = max = 0).
"""

from __future__ import annotations

import os

import numpy as np

from ._inputs import add_input_options, as_store, labels_of
from ._outputs import add_overwrite_option, atomic_file, check_output
from ._usage import UsageError

_HELP = "scale features to [-1, 1] or [lower, upper] (LIBSVM's svm-scale, -s / -r range files)"

_DESCRIPTION = """\
Scale every feature of DATA to [lower, upper] (default [-1, 1]), as LIBSVM's svm-scale does.
OUT is LIBSVM text, or a dmcsvm store when its name ends in .zarr.  Scale the training data
with -s RANGE, then the test data with -r RANGE so that both use the training data's ranges
(or let dmcsvm train --scale keep the scaling inside the model).

  dmcsvm scale train.svm -o train.scaled.svm -s range.txt
  dmcsvm scale test.svm -o test.scaled.svm -r range.txt"""


def add_parser(sub):
    import argparse

    p = sub.add_parser(
        "scale",
        help=_HELP,
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("data", help="a dmcsvm store or a LIBSVM/CSV/.npy file")
    p.add_argument(
        "-o",
        "--output",
        required=True,
        metavar="OUT",
        help="scaled data to write: LIBSVM text, or a store if OUT ends in .zarr",
    )
    p.add_argument(
        "-l",
        "--lower",
        type=float,
        default=None,
        metavar="L",
        help="lower end of the range (default -1)",
    )
    p.add_argument(
        "-u",
        "--upper",
        type=float,
        default=None,
        metavar="U",
        help="upper end of the range (default 1)",
    )
    p.add_argument("-s", "--save", metavar="RANGE", help="write the feature ranges to RANGE")
    p.add_argument(
        "-r",
        "--restore",
        metavar="RANGE",
        help="scale with the ranges (and lower, upper) of RANGE, written by -s",
    )
    add_overwrite_option(p, "OUT (and the RANGE of -s)")
    add_input_options(p, brief=True)
    p.set_defaults(func=run)
    return p


# ----------------------------------------------------------------------------- range files


def write_range(path, scaler) -> None:
    """Write ``scaler`` (a fitted MinMaxScaler) as an svm-scale range file."""
    lower, upper = scaler.feature_range
    with atomic_file(path) as fh:
        fh.write(f"x\n{lower!r} {upper!r}\n")
        for j, (mn, mx) in enumerate(zip(scaler.data_min_, scaler.data_max_, strict=False), 1):
            fh.write(f"{j} {float(mn)!r} {float(mx)!r}\n")


def read_range(path, n_features):
    """A fitted MinMaxScaler from an svm-scale range file (``x`` section only); UsageError
    naming the line for anything else."""

    if not os.path.isfile(path):
        raise UsageError(f"{path} does not exist")
    with open(path) as fh:
        lines = [ln.split() for ln in fh]
    lines = [ln for ln in lines if ln]
    if len(lines) < 2 or lines[0] != ["x"]:
        raise UsageError(
            f"{path} is not a feature range file (written by dmcsvm scale -s or "
            f"svm-scale -s): its first line must be 'x'"
        )
    try:
        lower, upper = (float(v) for v in lines[1])
    except ValueError:
        raise UsageError(
            f"{path}, line 2: expected 'lower upper', got {' '.join(lines[1])!r}"
        ) from None
    mn, mx = np.zeros(n_features), np.zeros(n_features)
    for i, ln in enumerate(lines[2:], 3):
        try:
            j, lo, hi = int(ln[0]), float(ln[1]), float(ln[2])
            if len(ln) != 3:
                raise ValueError
        except (ValueError, IndexError):
            raise UsageError(
                f"{path}, line {i}: expected 'index min max', got {' '.join(ln)!r}"
            ) from None
        if not 1 <= j <= n_features:
            raise UsageError(
                f"{path}, line {i}: feature {j} is out of range: the data has {n_features} features"
            )
        mn[j - 1], mx[j - 1] = lo, hi
    return fitted_scaler(lower, upper, mn, mx)


def fitted_scaler(lower, upper, data_min, data_max):
    """A MinMaxScaler fitted to these feature ranges: fitting it on the two rows (min, max)
    gives exactly those ``data_min_`` / ``data_max_``."""
    from sklearn.preprocessing import MinMaxScaler

    _check_range(lower, upper)
    return MinMaxScaler(feature_range=(lower, upper)).fit(np.vstack([data_min, data_max]))


def _check_range(lower, upper):
    if not (np.isfinite(lower) and np.isfinite(upper) and lower < upper):
        raise UsageError(f"the range must have lower < upper (finite), got [{lower}, {upper}]")


def fit_scaler_on_store(info, lower=-1.0, upper=1.0):
    """A MinMaxScaler fitted chunk by chunk on a store (``partial_fit``: the data are never
    all in memory)."""
    from sklearn.preprocessing import MinMaxScaler

    from ..store import read_rows

    _check_range(lower, upper)
    scaler = MinMaxScaler(feature_range=(lower, upper))
    for lo, hi in info.chunk_bounds:
        scaler.partial_fit(_dense(read_rows(info, lo, hi)))
    return scaler


def _dense(X):
    import scipy.sparse as sp

    return X.toarray() if sp.issparse(X) else np.asarray(X)


# ----------------------------------------------------------------------------- writing


def _write_libsvm(path, info, scaler) -> int:
    from ..store import read_labels, read_rows

    classes = info.classes
    with atomic_file(path) as fh:
        for lo, hi in info.chunk_bounds:
            Xs = scaler.transform(_dense(read_rows(info, lo, hi)))
            y = read_labels(info, lo, hi)
            for lab, row in zip(y, Xs, strict=False):
                nz = np.flatnonzero(row)
                label = classes[lab] if classes is not None else lab.item()
                feats = " ".join(f"{j + 1}:{row[j]:.9g}" for j in nz)
                fh.write(f"{label} {feats}\n" if feats else f"{label}\n")
    return info.n_samples


def _write_store(path, info, scaler, overwrite) -> int:
    import dask
    import dask.array as da

    from ..store import from_dask, read_rows

    def block(lo, hi):
        return scaler.transform(_dense(read_rows(info, lo, hi))).astype(np.float32)

    parts = [
        da.from_delayed(
            dask.delayed(block)(lo, hi), shape=(hi - lo, info.n_features), dtype=np.float32
        )
        for lo, hi in info.chunk_bounds
    ]
    X = da.concatenate(parts, axis=0)
    from_dask(X, labels_of(info), path, rows_per_chunk=info.rows_per_chunk, overwrite=overwrite)
    return info.n_samples


def run(a) -> int:
    out = a.output
    check_output(out, overwrite=a.overwrite)
    if a.save:
        check_output(a.save, "range file", overwrite=a.overwrite)
    if a.restore and (a.lower is not None or a.upper is not None):
        raise UsageError("-r takes lower and upper from its file: give either -r or -l/-u")
    if a.restore and a.save:
        raise UsageError("give either -s (save the ranges of DATA) or -r (use saved ranges)")
    lower = -1.0 if a.lower is None else a.lower
    upper = 1.0 if a.upper is None else a.upper
    with as_store(a.data, a) as info:
        if a.restore:
            scaler = read_range(a.restore, info.n_features)
        else:
            scaler = fit_scaler_on_store(info, lower, upper)
        if out.rstrip("/").endswith(".zarr"):
            n = _write_store(out, info, scaler, a.overwrite)
        else:
            n = _write_libsvm(out, info, scaler)
    if a.save:
        write_range(a.save, scaler)
    lo, hi = scaler.feature_range
    saved = f"; ranges written to {a.save}" if a.save else ""
    print(
        f"scaled {n} rows x {info.n_features} features to [{lo:g}, {hi:g}]; written to {out}{saved}"
    )
    return 0
