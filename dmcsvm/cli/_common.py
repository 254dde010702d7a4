"""What the commands share: input resolution (a store, or a file converted on the fly), atomic
output files, progress bars, clusters and the usage error that maps to exit status 2."""

from __future__ import annotations

import argparse
import contextlib
import inspect
import json
import os
import re
import sys
import tempfile
import textwrap

import numpy as np

from ..file_modes import atomic_file as write_atomically
from ..file_modes import current_umask, default_mode, give_default_mode  # noqa: F401
from ..runtime_params import CLI_OPTIONS

FORMATS = ("auto", "zarr", "svmlight", "csv", "npy")


class UsageError(Exception):
    """Bad usage or input: reported as one line, exit status 2."""


def plural(n, word) -> str:
    """``word`` for one, ``word + 's'`` otherwise ("1 chunk", "2 chunks")."""
    return word if n == 1 else word + "s"


def stderr_is_tty() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


def progress_bar(enabled, **kw):
    """A tqdm bar on stderr, or None when progress is off."""
    if not enabled:
        return None
    from tqdm.auto import tqdm
    return tqdm(file=sys.stderr, leave=False, **kw)


@contextlib.contextmanager
def conversion_progress(enabled, verb, path, fmt):
    """A progress bar for the file ``path`` (format ``fmt``) converted to a store, and the
    ``progress(done, total)`` callback for the store writers (None when progress is off).

    The text converters (LIBSVM, CSV) read the file twice, checking then writing, and report
    the bytes of both passes against twice its size: the bar shows each pass against the
    file's size.  The .npy converter reports rows."""
    name = os.path.basename(path)
    two_pass = fmt in ("svmlight", "csv")
    bar = progress_bar(enabled, desc=f"{verb} {name}", unit="B" if two_pass else " rows",
                       unit_scale=two_pass)
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


# ---------------------------------------------------------------------------------- inputs

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
    if len(text) == 1 and text not in "\r\n\"":
        return text
    raise argparse.ArgumentTypeError(
        f"must be one character, 'tab' or 'whitespace', got {text!r}")


def add_input_options(p, labels=True, brief=False):
    """Options that say how to read a data file that is not a store; ``brief``: accepted but
    named in one line of the help (``dmcsvm convert --help`` explains them), so that a
    command's help stays about one screen."""
    g = p.add_argument_group("input files that are not stores (converted on the fly)")
    if brief:
        g.description = textwrap.fill(
            "as for dmcsvm convert (see its --help): --format, --label-column, --delimiter, "
            "--skip-header, --drop-columns, --weight-column" + (", --labels" if labels else "")
            + ", --zero-based", 90, break_on_hyphens=False)
        hidden = g.add_argument
        g.add_argument = lambda *args, **kw: hidden(*args, **{**kw, "help": argparse.SUPPRESS})
    g.add_argument("--format", default="auto", choices=FORMATS,
                   help="input format: auto, zarr (a store directory), svmlight (LIBSVM text "
                        "'label index:value ...'), csv (delimited columns) or npy (NumPy "
                        "arrays); default auto: directories are stores, *.npy NumPy, *.csv CSV "
                        "(also .gz/.bz2/.xz), anything else LIBSVM unless --delimiter is given")
    g.add_argument("--label-column", type=int, default=0, metavar="J",
                   help="CSV: column of the label, counted from 0; negative counts from the "
                        "end (-1: last) (default 0)")
    g.add_argument("--delimiter", type=parse_delimiter, default=None, metavar="SEP",
                   help="CSV: field separator: one character, 'tab', or 'whitespace' (any run "
                        "of spaces/tabs, leading and trailing blanks ignored) (default ','); "
                        "giving it reads a file of any extension as CSV")
    g.add_argument("--skip-header", type=int, default=0, metavar="N",
                   help="CSV: number of records (header lines) to skip at the top (default 0)")
    g.add_argument("--drop-columns", default="", metavar="J,K,...",
                   help="CSV: comma-separated columns (counted from 0) that are neither "
                        "features nor the label, e.g. ids (default: none)")
    g.add_argument("--weight-column", type=int, default=None, metavar="J",
                   help="CSV: column of per-row weights (numbers >= 0; counted from 0, negative "
                        "from the end), not a feature: stored as the store's sample_weight "
                        "array, which training uses as fit(..., sample_weight=...) "
                        "(default: none)")
    if labels:
        g.add_argument("--labels", metavar="Y.npy",
                       help=".npy input: the .npy file of the labels (required for .npy)")
    g.add_argument("--zero-based", default="auto", choices=["auto", "true", "false"],
                   help="LIBSVM: whether feature indices start at 0: true, false, or auto "
                        "(0-based if some index is 0, as scikit-learn) (default auto)")
    return g


def _int_list(text, what):
    if not text:
        return ()
    try:
        return tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise UsageError(f"{what} must be comma-separated integers, got {text!r}") from None


def convert_file(src, dst, a, n_features=None, sparse=None, rows_per_chunk=None,
                 overwrite=False, progress=None):
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
        raise UsageError(f"--weight-column applies to CSV input; {src} is read as {fmt} (give "
                         f"a store with a sample_weight array, see dmcsvm.store.write_arrays)")
    if fmt == "svmlight":
        zb = {"auto": "auto", "true": True, "false": False}[a.zero_based]
        try:
            return from_svmlight(src, dst, n_features=n_features, sparse=sparse, zero_based=zb,
                                 rows_per_chunk=rows_per_chunk, overwrite=overwrite,
                                 progress=progress)
        except TextFormatError as e:
            hint = " --delimiter whitespace" if e.suggestion == "whitespace" else ""
            raise UsageError(f"{e}; read it with --format csv{hint}") from None
    if fmt == "csv":
        if sparse:
            raise UsageError("CSV input is stored dense; --sparse applies to LIBSVM input")
        delimiter = "," if a.delimiter is None else a.delimiter
        return from_csv(src, dst, label_column=a.label_column, delimiter=delimiter,
                        skip_header=a.skip_header,
                        drop_columns=_int_list(a.drop_columns, "--drop-columns"),
                        rows_per_chunk=rows_per_chunk, overwrite=overwrite, progress=progress,
                        weight_column=weight_column)
    labels = getattr(a, "labels", None)
    if not labels:
        raise UsageError(f"{src}: .npy input needs --labels Y.npy (the labels)")
    return from_npy(src, labels, dst, rows_per_chunk=rows_per_chunk, overwrite=overwrite,
                    progress=progress)


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
            raise UsageError(f"{path} has {info.n_features} features; the model expects "
                             f"{n_features}")
        yield info
        return
    with tempfile.TemporaryDirectory(prefix="dmcsvm-") as tmp:
        fmt = detect_format(path, a.format, a.delimiter)
        with conversion_progress(progress, "reading", path, fmt) as cb:
            info = convert_file(path, os.path.join(tmp, "data.zarr"), a, n_features=n_features,
                                progress=cb)
        yield info


def labels_of(info) -> np.ndarray:
    """The labels of a store as the user wrote them (string classes decoded)."""
    from ..store import read_labels
    y = read_labels(info)
    if info.classes is not None:
        return np.asarray(info.classes, dtype=object)[y]
    return y


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
        raise UsageError(f"{path}: {X.shape[1] - 1} kernel values per row, but the training "
                         f"data has {n_train} rows (LIBSVM's precomputed format: 0:serial "
                         f"then 1:K(x,x1) ... n:K(x,xn))")
    if X.shape[1] < n_train + 1:
        X = np.hstack([X, np.zeros((X.shape[0], n_train + 1 - X.shape[1]))])
    if train and not np.array_equal(X[:, 0], np.arange(1, X.shape[0] + 1)):
        raise UsageError(f"{path}: with a precomputed kernel (-t 4) column 0 must hold the "
                         f"serial numbers 1 to {X.shape[0]} (LIBSVM's format: 0:i)")
    return np.ascontiguousarray(X[:, 1:])


def read_arrays(info):
    from ..store import read_all
    X, _ = read_all(info)
    return X, labels_of(info)


def start_warmup(model, X, y, rows=200):
    """Compile (or load from numba's cache) the numba code of ``model``'s fit and predict in a
    background thread of this process, on ``rows`` rows of the training data (same dtype, so the
    same specializations), while this process loads what the cluster needs.

    On a first run every process that meets a numba function compiles it; the workers and the
    coordinator used to do that at the same time, each for itself (3 processes compiling the
    same code on a 2-core box).  Compiled once here, the code is in numba's on-disk cache
    (``__pycache__`` beside the modules, or ``NUMBA_CACHE_DIR``) before any worker needs it, and
    the workers load it.  Returns the thread; join it before the LocalCluster starts: its
    scheduler runs in this process, and while numba compiles here the scheduler's event loop
    gets too little of the GIL to answer the workers' heartbeats in time (a worker then logged
    "Failed to communicate with scheduler during heartbeat" with a traceback on a first run).
    """
    import threading

    t = threading.Thread(target=warm_up, args=(model, X, y, rows), name="dmcsvm-numba-warmup",
                         daemon=True)
    t.start()
    return t


def warm_up(model, X, y, rows=200) -> None:
    """Fit and predict a copy of ``model`` (in this process, one thread) on the first ``rows``
    rows: what :func:`start_warmup` runs.  Any error is ignored (only a head start: the real fit
    reports any problem)."""
    params = dict(model.get_params(deep=False), client=None, n_jobs=1, verbose=False)
    Xs, ys = X[:rows], y[:rows]                  # a shuffled split: every class is there
    try:
        type(model)(**params).fit(Xs, ys).predict(Xs[:8])
    except Exception:  # noqa: BLE001 - see the docstring
        pass


def warm_up_on_store(model, info, rows=200) -> None:
    """Compile (or load from numba's cache) ``model``'s fit and predict code in this thread on
    the first ``rows`` rows of the store, before a LocalCluster starts (``train
    --local-workers``): see :func:`start_warmup`.  Only the code matters, not the labels: if
    those rows hold one class, every other row is relabelled so that the fit runs."""
    from ..store import read_labels, read_rows
    m = min(int(info.n_samples), rows)
    if m < 2:
        return
    X, y = read_rows(info, 0, m), np.asarray(read_labels(info, 0, m))
    if np.unique(y).shape[0] < 2:
        y = y.copy()
        y[1::2] = y[0] + 1 if np.issubdtype(y.dtype, np.number) else f"{y[0]}_other"
    warm_up(model, X, y, rows=m)


# ---------------------------------------------------------------------------------- outputs

def check_output(path, what="output", overwrite=None):
    """Fail early (before any work) when an output cannot be written: its directory is missing,
    or (``overwrite=False``) it exists.  Every command has one rule for its outputs: an existing
    file is replaced only with ``--overwrite``."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"cannot write {what} {path}: directory {parent} does not exist")
    if overwrite is False and os.path.lexists(path):
        raise UsageError(f"{path} already exists; pass --overwrite to replace it")


def add_overwrite_option(p, what="the output"):
    """``--overwrite``: the one switch that lets a command replace an existing output."""
    p.add_argument("--overwrite", action="store_true",
                   help=f"replace {what} if it exists (default: refuse)")


@contextlib.contextmanager
def atomic_file(path, mode="w"):
    """Write to a temporary file beside ``path`` and rename it into place on success; on any
    error the temporary file is removed and ``path`` is left as it was.  The file gets the
    mode of a newly created file (0666 less the umask), not ``mkstemp``'s 0600."""
    check_output(path)
    with write_atomically(path, mode) as fh:
        yield fh


# ---------------------------------------------------------------------------------- clusters

def add_cluster_options(p):
    g = p.add_argument_group("where it runs (default: threads in this process)")
    g.add_argument("--scheduler", metavar="ADDRESS",
                   help="run on the Dask cluster of this scheduler (e.g. tcp://10.0.0.1:8786)")
    g.add_argument("--local-workers", type=int, metavar="N",
                   help="start a LocalCluster of N worker processes for this run")
    g.add_argument("--threads-per-worker", type=int, metavar="T",
                   help="threads of each LocalCluster worker (with --local-workers)")
    g.add_argument("--memory-limit", metavar="LIMIT",
                   help="memory limit of each LocalCluster worker, e.g. 4GB (with --local-workers)")
    return g


def check_cluster_options(a):
    if a.scheduler and a.local_workers:
        raise UsageError("give either --scheduler or --local-workers, not both")
    if a.local_workers is not None and a.local_workers < 1:
        raise UsageError(f"--local-workers must be >= 1, got {a.local_workers}")
    if (a.threads_per_worker or a.memory_limit) and not a.local_workers:
        raise UsageError("--threads-per-worker and --memory-limit size a LocalCluster: "
                         "they need --local-workers")
    if a.threads_per_worker is not None and a.threads_per_worker < 1:
        raise UsageError(f"--threads-per-worker must be >= 1, got {a.threads_per_worker}")
    if a.scheduler:
        check_tls_config(a.scheduler)


def _tls_hint(address) -> str:
    return (f"{address} is a TLS scheduler, but no client certificate is configured: point "
            "DASK_CONFIG at a Dask config that sets distributed.comm.tls.ca-file, "
            "distributed.comm.tls.client.cert and distributed.comm.tls.client.key, such as the "
            "dask-tls.yaml that cluster/tls/make-certs.sh writes (in Python: a Client with "
            "security=distributed.Security(...)); see section 3, TLS, of cluster/README.md")


def check_tls_config(address) -> None:
    """A ``tls://`` scheduler needs the client's certificates from the Dask config (what
    ``distributed.Security()`` reads); without them ``Client`` fails with a bare TypeError."""
    if not str(address).lower().startswith("tls://"):
        return
    from distributed.security import Security
    if Security().get_connection_args("client").get("ssl_context") is None:
        raise UsageError(_tls_hint(address))


@contextlib.contextmanager
def cluster_client(a):
    """A distributed Client for ``--scheduler`` / ``--local-workers`` (closed afterwards), or
    None when the command runs in this process."""
    check_cluster_options(a)
    if not a.scheduler and not a.local_workers:
        yield None
        return
    from distributed import Client, LocalCluster
    if a.scheduler:
        try:
            client = Client(a.scheduler, timeout="20s")
        except TypeError as e:
            if "ssl_context" not in str(e):
                raise
            raise UsageError(_tls_hint(a.scheduler)) from None
        except OSError as e:
            raise UsageError(f"cannot reach the Dask scheduler at {a.scheduler}: {e}") from None
        with client:
            yield client
        return
    kw = {"n_workers": a.local_workers, "processes": True, "dashboard_address": None,
          "threads_per_worker": a.threads_per_worker or 1}
    if a.memory_limit:
        kw["memory_limit"] = a.memory_limit
    with LocalCluster(**kw) as cluster, Client(cluster) as client:
        yield client


# ------------------------------------------------------------------ estimator parameters as options
# (``dmcsvm train`` makes one option per constructor parameter of any estimator; ``dmcsvm demo``
# the same for MulticlassSVC, with a few defaults of its own)

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




def param_defaults(cls) -> dict:
    """``{parameter: default}`` of an estimator's constructor (its signature)."""
    sig = inspect.signature(cls.__init__)
    return {k: p.default for k, p in sig.parameters.items()
            if k != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}


# meanings of parameters whose docstring entry gives only the type
_MEANINGS = {
    "kernel": "Kernel function: rbf exp(-gamma |x - z|^2), poly (gamma <x, z> + coef0)^degree, "
              "linear <x, z>, sigmoid tanh(gamma <x, z> + coef0), precomputed (the data are "
              "kernel values); -t also takes LIBSVM's numbers 0 linear, 1 poly, 2 rbf, "
              "3 sigmoid, 4 precomputed.",
    "gamma": "Kernel coefficient of rbf, poly and sigmoid, resolved like scikit-learn's SVC "
             "('scale' = 1 / (n_features X.var()), 'auto' = 1 / n_features).",
    "degree": "Degree of the polynomial kernel.",
    "coef0": "Independent term of the poly and sigmoid kernels.",
    "verbose": f"Show the progress of the fit (set by {CLI_OPTIONS['verbose']}).",
}

#: LIBSVM's short options of svm-train: -c cost, -g gamma, -t kernel type
SHORT_FLAGS = {"C": "-c", "gamma": "-g", "kernel": "-t"}
#: svm-train's kernel type numbers (``-t 2`` is rbf)
LIBSVM_KERNELS = {"0": "linear", "1": "poly", "2": "rbf", "3": "sigmoid", "4": "precomputed"}


def parse_kernel(text: str):
    """``--kernel`` / ``-t``: a kernel name, or LIBSVM's number for it (0 to 4)."""
    t = text.strip()
    return LIBSVM_KERNELS.get(t, t)


def _plain_text(text: str) -> str:
    """Docstring text without reST markup: ``x`` and :func:`x` become x."""
    text = text.replace("``", "")
    return re.sub(r":(?:class|mod|func|meth|attr|data):`~?([^`]+)`", r"\1", text)


def param_docs(cls) -> dict:
    """``{parameter: (allowed values, meaning)}`` from the numpydoc ``Parameters`` section of
    an estimator's docstring, read by numpydoc's own parser (``docscrape``, the copy that
    scikit-learn ships), reST markup dropped."""
    from sklearn.externals._numpydoc.docscrape import NumpyDocString
    doc = NumpyDocString(inspect.getdoc(cls) or "")
    plain = {}
    for entry in doc["Parameters"]:
        spec = re.sub(r",?\s*default\s*=.*$", "", entry.type).strip().rstrip(",")
        text = " ".join(line.strip() for line in entry.desc if line.strip())
        for name in (n.strip() for n in entry.name.split(",")):
            if name:
                plain[name] = (_plain_text(spec), _plain_text(text))
    return plain


#: paper references of the estimators' docstrings: kept there, not in a command's help
_CITATION = re.compile(r"\s*\([^()]*\b(?:AS|CS|Eq\.|Fig\.|§)[^()]*\)")


def first_sentence(text: str) -> str:
    """The first sentence (or clause before a top-level ``;``) of a parameter's meaning,
    without paper references: the help shows that, the Python docstring the rest (a
    command's help stays about one screen)."""
    text = _CITATION.sub("", text.strip())
    ends = ".;:" if len(text) > _LONG else ".;"     # a long sentence stops at its colon too
    depth = 0
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and ch in ends and (i + 1 == len(text) or text[i + 1] == " ") \
                and not text[max(0, i - 3):i + 1].endswith(("e.g.", "i.e.")):
            if ch == ":" and i < 40:
                continue                # "Kernel function: ..." -- the colon introduces it
            return text[:i].rstrip() + "."
    return text


#: a first sentence longer than this is cut at its first colon as well
_LONG = 150


#: parameters left out of ``train --help`` / ``demo --help`` (listed in one line there; still
#: accepted): the solver's inner workings and the out-of-core tuning, documented in Python
ADVANCED = ("optimizer", "selection", "threshold", "threshold_fraction", "batch_sweeps",
            "n_partitions", "data_in_memory", "disk_cache_size", "cache_dir", "inner_steps")


def param_help(name, default, docs, fallback, note=None) -> str:
    """The help of ``--NAME``: what it means (its first sentence), the values it takes, its
    default (and ``note`` on it, where a command's default differs from the estimator's).  A
    parameter documented only by its type, or "as in" another estimator, takes its meaning
    from :data:`_MEANINGS` or the default estimator's docstring."""
    spec, text = docs.get(name, ("", ""))
    if not text or re.search(r"\bas in\b", text):
        fspec, ftext = fallback.get(name, ("", ""))
        text = ftext or text
        spec = spec or fspec
    text = _MEANINGS.get(name) or first_sentence(text)
    spec = re.sub(r"(,\s*)?\boptional\b", "", spec).strip(" ,")
    flag = name.replace("_", "-")
    if isinstance(default, bool):
        allowed, dflt = f"--{flag} or --no-{flag}", f"--{flag}" if default else f"--no-{flag}"
    else:
        allowed = spec or "a number, true/false, none, JSON or text"
        dflt = "none" if default is None else repr(default)
    text = text.strip()
    if text and not text.endswith("."):
        text = text.rstrip(";:,") + "."
    if note:
        dflt = f"{dflt} ({note})"
    return f"{text} Allowed: {allowed}. Default: {dflt}.".replace("%", "%%")


def add_param_options(group, cls, fallback_cls, skip=(), defaults=None, notes=None):
    """One option per constructor parameter of ``cls`` but ``skip`` (``--dashed-name``, also
    ``--underscored_name`` as an alias left out of the help; LIBSVM's ``-c``, ``-g``, ``-t``
    for C, gamma and kernel; booleans as ``--NAME/--no-NAME``; values by :func:`parse_value`)
    into ``group``, stored as ``est__NAME`` (read back by :func:`estimator_params`).

    Without an entry in ``defaults`` an option is only stored when given (the estimator's own
    default applies); with one, that value is the command's default, shown in the help with
    ``notes[NAME]``.  Parameters that ``cls`` documents only by type take their meaning from
    ``fallback_cls``'s docstring."""
    defaults, notes = defaults or {}, notes or {}
    docs, fallback = param_docs(cls), param_docs(fallback_cls)
    hidden = [f"--{p.replace('_', '-')}" for p in param_defaults(cls)
              if p in ADVANCED and p not in skip]
    if hidden:
        group.description = textwrap.fill("also accepted, documented in the Python docstring: "
                                          + ", ".join(hidden), 90,
                                          break_on_hyphens=False)
    for p, default in param_defaults(cls).items():
        if p in skip:
            continue
        dashed = p.replace("_", "-")
        flags = ([SHORT_FLAGS[p]] if p in SHORT_FLAGS else []) + [f"--{dashed}"]
        shown = defaults.get(p, default)
        text = param_help(p, shown, docs, fallback, notes.get(p))
        if p in ADVANCED:
            text = argparse.SUPPRESS
        value = defaults.get(p, argparse.SUPPRESS)
        kind = parse_kernel if p == "kernel" else parse_value
        aliases = [f"--{p}"] if dashed != p else []
        if isinstance(default, bool):
            group.add_argument(*flags, dest=f"est__{p}", action=argparse.BooleanOptionalAction,
                               default=value, help=text)
            if aliases:
                group.add_argument(*aliases, dest=f"est__{p}",
                                   action=argparse.BooleanOptionalAction,
                                   default=value, help=argparse.SUPPRESS)
        else:
            group.add_argument(*flags, dest=f"est__{p}", type=kind, default=value,
                               metavar="V", help=text)
            if aliases:
                group.add_argument(*aliases, dest=f"est__{p}", type=kind, default=value,
                                   metavar="V", help=argparse.SUPPRESS)


def estimator_params(a) -> dict:
    """The estimator parameters that the options of :func:`add_param_options` hold."""
    return {k[len("est__"):]: v for k, v in vars(a).items() if k.startswith("est__")}
