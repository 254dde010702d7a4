"""A command's input: a store as it is, or a LIBSVM / CSV / .npy file converted to a temporary store
on the fly (with its argparse options and a progress bar), and the labels, rows or precomputed
kernel values read from it."""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import textwrap

import numpy as np

from ._usage import UsageError, progress_bar

FORMATS = ("auto", "zarr", "svmlight", "csv", "npy")


@contextlib.contextmanager
def conversion_progress(enabled, verb, path, fmt):
    """A progress bar for the file ``path`` (format ``fmt``) converted to a store, and the
    ``progress(done, total)`` callback for the store writers (None when progress is off).

    The text converters (LIBSVM, CSV) read the file twice, checking then writing, and report
    the bytes of both passes against twice its size: the bar shows each pass against the
    file's size.  The .npy converter reports rows."""
    name = os.path.basename(path)
    two_pass = fmt in ("svmlight", "csv")
    bar = progress_bar(
        enabled, desc=f"{verb} {name}", unit="B" if two_pass else " rows", unit_scale=two_pass
    )
    if bar is None:
        yield None
        return
    shown = [0]

    def callback(done, total):
        size, step = total, 1
        if two_pass:
            size = total // 2
            step = 1 if done <= size else 2
            if step != shown[0]:
                what = "checking" if step == 1 else "writing"
                bar.set_description(f"{verb} {name} (pass {step} of 2, {what})", refresh=False)
        shown[0] = step
        bar.total = size
        bar.n = min(size, done - (step - 1) * size)
        bar.refresh()

    try:
        yield callback
    finally:
        bar.close()


def is_store(path) -> bool:
    """A directory holding a zarr group (``zarr.json``) is read as a data store."""
    return os.path.isdir(path) and os.path.exists(os.path.join(path, "zarr.json"))


def detect_format(path: str, fmt: str = "auto", delimiter=None) -> str:
    """The input format of ``path``: a store directory, ``.npy``, ``.csv`` (``.csv.gz``...) or
    LIBSVM/svmlight text (everything else, unless a CSV ``delimiter`` was given)."""
    if fmt != "auto":
        return fmt
    if os.path.isdir(path):
        return "zarr"
    base = path
    for ext in (".gz", ".bz2", ".xz", ".lzma", ".zst", ".lz4"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    if base.endswith(".npy"):
        return "npy"
    if base.endswith(".csv"):
        return "csv"
    if base.endswith(".zarr"):
        return "zarr"
    return "csv" if delimiter is not None else "svmlight"


_DELIMITER_NAMES = {"whitespace": "whitespace", "tab": "\t", "\\t": "\t"}


def parse_delimiter(text):
    """``--delimiter``: one character, ``tab`` (or ``\\t``), or ``whitespace``."""
    if text in _DELIMITER_NAMES:
        return _DELIMITER_NAMES[text]
    if len(text) == 1 and text not in '\r\n"':
        return text
    raise argparse.ArgumentTypeError(f"must be one character, 'tab' or 'whitespace', got {text!r}")


def add_input_options(p, labels=True, brief=False):
    """Options that say how to read a data file that is not a store; ``brief``: accepted but
    named in one line of the help (``dmcsvm convert --help`` explains them), so that a
    command's help stays about one screen."""
    g = p.add_argument_group("input files that are not stores (converted on the fly)")
    if brief:
        g.description = textwrap.fill(
            "as for dmcsvm convert (see its --help): --format, --label-column, --delimiter, "
            "--skip-header, --drop-columns, --weight-column"
            + (", --labels" if labels else "")
            + ", --zero-based",
            90,
            break_on_hyphens=False,
        )
        hidden = g.add_argument
        g.add_argument = lambda *args, **kw: hidden(*args, **{**kw, "help": argparse.SUPPRESS})
    g.add_argument(
        "--format",
        default="auto",
        choices=FORMATS,
        help="input format: auto, zarr (a store directory), svmlight (LIBSVM text "
        "'label index:value ...'), csv (delimited columns) or npy (NumPy "
        "arrays); default auto: directories are stores, *.npy NumPy, *.csv CSV "
        "(also .gz/.bz2/.xz), anything else LIBSVM unless --delimiter is given",
    )
    g.add_argument(
        "--label-column",
        type=int,
        default=0,
        metavar="J",
        help="CSV: column of the label, counted from 0; negative counts from the "
        "end (-1: last) (default 0)",
    )
    g.add_argument(
        "--delimiter",
        type=parse_delimiter,
        default=None,
        metavar="SEP",
        help="CSV: field separator: one character, 'tab', or 'whitespace' (any run "
        "of spaces/tabs, leading and trailing blanks ignored) (default ','); "
        "giving it reads a file of any extension as CSV",
    )
    g.add_argument(
        "--skip-header",
        type=int,
        default=0,
        metavar="N",
        help="CSV: number of records (header lines) to skip at the top (default 0)",
    )
    g.add_argument(
        "--drop-columns",
        default="",
        metavar="J,K,...",
        help="CSV: comma-separated columns (counted from 0) that are neither "
        "features nor the label, e.g. ids (default: none)",
    )
    g.add_argument(
        "--weight-column",
        type=int,
        default=None,
        metavar="J",
        help="CSV: column of per-row weights (numbers >= 0; counted from 0, negative "
        "from the end), not a feature: stored as the store's sample_weight "
        "array, which training uses as fit(..., sample_weight=...) "
        "(default: none)",
    )
    if labels:
        g.add_argument(
            "--labels",
            metavar="Y.npy",
            help=".npy input: the .npy file of the labels (required for .npy)",
        )
    g.add_argument(
        "--zero-based",
        default="auto",
        choices=["auto", "true", "false"],
        help="LIBSVM: whether feature indices start at 0: true, false, or auto "
        "(0-based if some index is 0, as scikit-learn) (default auto)",
    )
    return g


def _int_list(text, what):
    if not text:
        return ()
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise UsageError(f"{what} must be comma-separated integers, got {text!r}") from None


def convert_file(
    src, dst, a, n_features=None, sparse=None, rows_per_chunk=None, overwrite=False, progress=None
):
    """Convert ``src`` (format from ``a.format`` / its extension) to the store ``dst``."""
    from ..store import from_csv, from_npy, from_svmlight
    from ..store.svmlight import TextFormatError

    fmt = detect_format(src, a.format, a.delimiter)
    if not os.path.exists(src):
        raise UsageError(f"{src} does not exist")
    if fmt == "zarr":
        raise UsageError(f"{src} is already a store (a directory); nothing to convert")
    if os.path.exists(dst) and not overwrite:
        raise UsageError(f"{dst} already exists; pass --overwrite to replace it")
    weight_column = getattr(a, "weight_column", None)
    if weight_column is not None and fmt != "csv":
        raise UsageError(
            f"--weight-column applies to CSV input; {src} is read as {fmt} (give "
            f"a store with a sample_weight array, see dmcsvm.store.write_arrays)"
        )
    if fmt == "svmlight":
        zb = {"auto": "auto", "true": True, "false": False}[a.zero_based]
        try:
            return from_svmlight(
                src,
                dst,
                n_features=n_features,
                sparse=sparse,
                zero_based=zb,
                rows_per_chunk=rows_per_chunk,
                overwrite=overwrite,
                progress=progress,
            )
        except TextFormatError as e:
            hint = " --delimiter whitespace" if e.suggestion == "whitespace" else ""
            raise UsageError(f"{e}; read it with --format csv{hint}") from None
    if fmt == "csv":
        if sparse:
            raise UsageError("CSV input is stored dense; --sparse applies to LIBSVM input")
        delimiter = "," if a.delimiter is None else a.delimiter
        return from_csv(
            src,
            dst,
            label_column=a.label_column,
            delimiter=delimiter,
            skip_header=a.skip_header,
            drop_columns=_int_list(a.drop_columns, "--drop-columns"),
            rows_per_chunk=rows_per_chunk,
            overwrite=overwrite,
            progress=progress,
            weight_column=weight_column,
        )
    labels = getattr(a, "labels", None)
    if not labels:
        raise UsageError(f"{src}: .npy input needs --labels Y.npy (the labels)")
    return from_npy(
        src, labels, dst, rows_per_chunk=rows_per_chunk, overwrite=overwrite, progress=progress
    )


@contextlib.contextmanager
def as_store(path, a, n_features=None, progress=False):
    """Yield the :class:`StoreInfo` of ``path``: the store itself, or a temporary store converted
    from a LIBSVM/CSV/.npy file (removed afterwards)."""
    from ..store import open_store

    if not os.path.exists(path) and "://" not in path:
        raise UsageError(f"{path} does not exist")
    if detect_format(path, a.format, a.delimiter) == "zarr":
        info = open_store(path)
        if n_features is not None and info.n_features != n_features:
            raise UsageError(
                f"{path} has {info.n_features} features; the model expects {n_features}"
            )
        yield info
        return
    with tempfile.TemporaryDirectory(prefix="dmcsvm-") as tmp:
        fmt = detect_format(path, a.format, a.delimiter)
        with conversion_progress(progress, "reading", path, fmt) as cb:
            info = convert_file(
                path, os.path.join(tmp, "data.zarr"), a, n_features=n_features, progress=cb
            )
        yield info


def labels_of(info) -> np.ndarray:
    """The labels of a store as the user wrote them (string classes decoded)."""
    from ..store import read_labels

    y = read_labels(info)
    if info.classes is not None:
        return np.asarray(info.classes, dtype=object)[y]
    return y


def read_arrays(info):
    from ..store import read_all

    X, _ = read_all(info)
    return X, labels_of(info)


def fits_stores(est) -> bool:
    """Whether the estimator's ``fit``/``predict`` take a store path (the shared out-of-core
    input handling of :mod:`dmcsvm.estimators._inputs`); others get arrays read into memory,
    as does a precomputed kernel (in this process only)."""
    return bool(getattr(est, "accepts_stores", False)) and not is_precomputed(est)


def is_precomputed(est) -> bool:
    """Whether ``est`` (or a Pipeline's last step) has ``kernel='precomputed'``."""
    last = est.steps[-1][1] if hasattr(est, "steps") else est
    kernel = getattr(last, "kernel", None)
    return isinstance(kernel, str) and kernel == "precomputed"


def gram_rows(X, n_train, path, train=False):
    """The kernel values of rows in LIBSVM's precomputed-kernel format (``-t 4``): column 0 is
    the row's serial number (``0:i``; when training, 1 to n in order), columns 1 to
    ``n_train`` are ``K(x, x_1) ... K(x, x_n)`` (a value left out is 0).  Returns the dense
    ``(rows, n_train)`` block."""
    import scipy.sparse as sp

    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    X = np.asarray(X, dtype=np.float64)
    if X.shape[1] > n_train + 1:
        raise UsageError(
            f"{path}: {X.shape[1] - 1} kernel values per row, but the training "
            f"data has {n_train} rows (LIBSVM's precomputed format: 0:serial "
            f"then 1:K(x,x1) ... n:K(x,xn))"
        )
    if X.shape[1] < n_train + 1:
        X = np.hstack([X, np.zeros((X.shape[0], n_train + 1 - X.shape[1]))])
    if train and not np.array_equal(X[:, 0], np.arange(1, X.shape[0] + 1)):
        raise UsageError(
            f"{path}: with a precomputed kernel (-t 4) column 0 must hold the "
            f"serial numbers 1 to {X.shape[0]} (LIBSVM's format: 0:i)"
        )
    return np.ascontiguousarray(X[:, 1:])
