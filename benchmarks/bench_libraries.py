"""Hand-written code against the library that could replace it: the parse
pass of the LIBSVM and CSV readers, opening compressed text, and the kernel-column cache's LRU
bookkeeping, each timed on the same input in one process.

- LIBSVM: :mod:`dmcsvm.store.svmlight`'s parse pass (line buffers, vectorized parser) against
  ``sklearn.datasets.load_svmlight_file`` over the same file in byte ranges (``offset`` /
  ``length``, the way it streams), dense (satimage x 20: 88,700 rows x 36) and sparse (50,000
  rows, 40 of 2,000 features) files;
- CSV: :mod:`dmcsvm.store.delimited`'s parse (``csv`` records, one NumPy conversion a buffer)
  against ``pandas.read_csv(chunksize=)`` (C engine) to float64 arrays, same buffers' rows;
- gzip: :func:`dmcsvm.store.text._open_binary` against ``fsspec.open(compression='infer')``,
  reading a ``.gz`` file through;
- LRU: :class:`dmcsvm.engine.cache.ColumnCache`'s ``OrderedDict`` (``get`` + ``move_to_end``,
  eviction of the least recent key) against ``cachetools.LRUCache`` (``cache[key]``,
  ``popitem``) doing the same touches and evictions on a recorded key stream.

Times are the best of ``--repeat`` runs.  JSON to ``benchmarks/results/libraries.json`` and
``libraries.md``; pandas and cachetools are only needed here (``pip install pandas
cachetools``), not by dmcsvm.

    python benchmarks/bench_libraries.py [--repeat 5] [--data-dir ../shared/data]
"""

from __future__ import annotations

import gzip
import os
import tempfile
import time
from collections import OrderedDict
from pathlib import Path

import _report
import numpy as np


def _best(fn, repeat):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _dense_rows(data_dir):
    from _data import load_satimage

    Xtr, ytr, Xte, yte = load_satimage(data_dir)
    X = np.vstack([Xtr, Xte] * 9)[:88_700]
    y = np.concatenate([ytr, yte] * 9)[:88_700]
    rng = np.random.default_rng(0)
    return X + rng.normal(scale=1e-3, size=X.shape), y


def _sparse_rows():
    import scipy.sparse as sp

    rng = np.random.default_rng(1)
    n, d, k = 50_000, 2_000, 40
    cols = np.sort(rng.choice(d, size=(n, k)), axis=1)
    X = sp.csr_matrix((rng.random(n * k), cols.ravel(), np.arange(0, n * k + 1, k)), shape=(n, d))
    X.sum_duplicates()
    return X, rng.integers(0, 10, n)


# ---------------------------------------------------------------------------------- LIBSVM


def _ours_svmlight(path):
    from dmcsvm.store._builder import DEFAULT_BUFFER_BYTES, DEFAULT_BUFFER_ROWS
    from dmcsvm.store.svmlight import _svmlight_blocks

    rows = 0
    for _, blk in _svmlight_blocks(str(path), DEFAULT_BUFFER_ROWS, DEFAULT_BUFFER_BYTES):
        rows += len(blk.labels)
    return rows


def _sklearn_svmlight(path, d, chunk_bytes):
    from sklearn.datasets import load_svmlight_file

    size, rows = os.path.getsize(path), 0
    for off in range(0, size, chunk_bytes):
        X, y = load_svmlight_file(
            str(path), n_features=d, offset=off, length=chunk_bytes, zero_based=False
        )
        rows += X.shape[0]
    return rows


# ---------------------------------------------------------------------------------- CSV


def _ours_csv(path, d):
    from dmcsvm.store._builder import DEFAULT_BUFFER_BYTES, DEFAULT_BUFFER_ROWS
    from dmcsvm.store.delimited import _csv_buffers

    rows = 0
    cols = list(range(1, d + 1))
    for block, _ in _csv_buffers(str(path), ",", 0, DEFAULT_BUFFER_ROWS, DEFAULT_BUFFER_BYTES):
        table = np.array(block, dtype=str)
        X = table[:, cols].astype(np.float64).astype(np.float32)
        rows += X.shape[0]
    return rows


def _pandas_csv(path, chunk_rows):
    import pandas as pd

    rows = 0
    for chunk in pd.read_csv(path, header=None, chunksize=chunk_rows, engine="c"):
        X = chunk.iloc[:, 1:].to_numpy(dtype=np.float64).astype(np.float32)
        rows += X.shape[0]
    return rows


def _from_csv(path, tmp, exact):
    """The whole conversion (two passes and the store's writes), by the exact reader or by
    pandas (what :func:`dmcsvm.store.from_csv` runs)."""
    from dmcsvm.store import delimited

    target = str(tmp / ("exact.zarr" if exact else "pandas.zarr"))
    args = (str(path), target, 0, ",", 0, (), None, True)
    if exact:
        return delimited._from_csv_exact(
            *args, delimited.DEFAULT_BUFFER_ROWS, delimited.DEFAULT_BUFFER_BYTES, None, None
        )
    return delimited._from_csv_pandas(*args, delimited.DEFAULT_BUFFER_ROWS, None, None)


# ---------------------------------------------------------------------------------- gzip


def _ours_gz(path):
    from dmcsvm.store.text import _open_binary

    n = 0
    with _open_binary(str(path)) as f:
        while chunk := f.read(1 << 20):
            n += len(chunk)
    return n


def _fsspec_gz(path):
    import fsspec

    n = 0
    with fsspec.open(str(path), "rb", compression="infer") as f:
        while chunk := f.read(1 << 20):
            n += len(chunk)
    return n


# ---------------------------------------------------------------------------------- LRU


def _key_stream(n_keys=20_000, rounds=400, per_round=500, seed=2):
    """A round-based access stream like a fit's: each round asks for ``per_round`` columns,
    mostly recently used ones."""
    rng = np.random.default_rng(seed)
    hot = rng.zipf(1.3, size=rounds * per_round) % n_keys
    return hot.reshape(rounds, per_round)


def _ordereddict_lru(stream, capacity):
    od, hits = OrderedDict(), 0
    for keys in stream:
        for k in keys.tolist():
            if od.get(k) is not None:
                od.move_to_end(k)
                hits += 1
            else:
                if len(od) >= capacity:
                    od.popitem(last=False)
                od[k] = 1
    return hits


def _cachetools_lru(stream, capacity):
    import cachetools

    c, hits = cachetools.LRUCache(maxsize=capacity), 0
    for keys in stream:
        for k in keys.tolist():
            try:
                c[k]
                hits += 1
            except KeyError:
                c[k] = 1  # evicts the least recently used itself when full
    return hits


def main():
    p = _report.parser(__doc__, "libraries.json", data_dir=True)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    run = _report.Run(__file__, "libraries", _report.settings_of(args))
    res = {}
    with tempfile.TemporaryDirectory(prefix="dmcsvm-libs-") as tmp:
        tmp = Path(tmp)
        from sklearn.datasets import dump_svmlight_file

        X, y = _dense_rows(args.data_dir)
        dense_svm = tmp / "dense.svm"
        dump_svmlight_file(X, y, str(dense_svm), zero_based=False)
        Xs, ys = _sparse_rows()
        sparse_svm = tmp / "sparse.svm"
        dump_svmlight_file(Xs, ys, str(sparse_svm), zero_based=False)
        for name, path, d in (("dense", dense_svm, X.shape[1]), ("sparse", sparse_svm, 2000)):
            assert _ours_svmlight(path) == _sklearn_svmlight(path, d, 16 << 20)
            res[f"svmlight_{name}"] = {
                "bytes": os.path.getsize(path),
                "ours_s": _best(lambda: _ours_svmlight(path), args.repeat),
                "sklearn_16MiB_s": _best(lambda: _sklearn_svmlight(path, d, 16 << 20), args.repeat),
                "sklearn_4MiB_s": _best(lambda: _sklearn_svmlight(path, d, 4 << 20), args.repeat),
            }
        csv = tmp / "dense.csv"
        np.savetxt(csv, np.column_stack([y, X]), delimiter=",", fmt="%.8g")
        try:
            import pandas  # noqa: F401

            assert _ours_csv(csv, X.shape[1]) == _pandas_csv(csv, 16384) == X.shape[0]
            res["csv"] = {
                "bytes": os.path.getsize(csv),
                "ours_s": _best(lambda: _ours_csv(csv, X.shape[1]), args.repeat),
                "pandas_s": _best(lambda: _pandas_csv(csv, 16384), args.repeat),
            }
            res["from_csv"] = {
                "exact_s": _best(lambda: _from_csv(csv, tmp, exact=True), args.repeat),
                "pandas_s": _best(lambda: _from_csv(csv, tmp, exact=False), args.repeat),
            }
        except ImportError:
            res["csv"] = {"skipped": "pandas is not installed"}
        gz = tmp / "dense.svm.gz"
        with open(dense_svm, "rb") as f, gzip.open(gz, "wb") as g:
            g.write(f.read())
        assert _ours_gz(gz) == _fsspec_gz(gz)
        res["gzip"] = {
            "bytes_out": _ours_gz(gz),
            "ours_s": _best(lambda: _ours_gz(gz), args.repeat),
            "fsspec_s": _best(lambda: _fsspec_gz(gz), args.repeat),
        }
        stream = _key_stream()
        try:
            assert _ordereddict_lru(stream, 2000) == _cachetools_lru(stream, 2000)
            res["lru"] = {
                "touches": int(stream.size),
                "ordereddict_s": _best(lambda: _ordereddict_lru(stream, 2000), args.repeat),
                "cachetools_s": _best(lambda: _cachetools_lru(stream, 2000), args.repeat),
            }
        except ImportError:
            res["lru"] = {"skipped": "cachetools is not installed"}
    out = run.envelope(res)
    md = _markdown(out)
    _report.write(out, args.out, markdown=md)
    print(md)


def _markdown(out) -> str:
    r = out["results"]
    rows = []
    for name in ("svmlight_dense", "svmlight_sparse"):
        e = r[name]
        mb = e["bytes"] / 2**20
        rows.append(
            [
                f"LIBSVM parse, {name.split('_')[1]} ({mb:.0f} MiB)",
                f"{e['ours_s']:.3f}",
                f"load_svmlight_file by 16 MiB: {e['sklearn_16MiB_s']:.3f}; "
                f"by 4 MiB: {e['sklearn_4MiB_s']:.3f}",
            ]
        )
    if "ours_s" in r["csv"]:
        rows.append(
            [
                f"CSV parse ({r['csv']['bytes'] / 2**20:.0f} MiB)",
                f"{r['csv']['ours_s']:.3f}",
                f"pandas.read_csv: {r['csv']['pandas_s']:.3f}",
            ]
        )
        rows.append(
            [
                "from_csv, whole conversion",
                f"{r['from_csv']['exact_s']:.3f}",
                f"through pandas: {r['from_csv']['pandas_s']:.3f}",
            ]
        )
    rows.append(
        [
            "read a .gz through",
            f"{r['gzip']['ours_s']:.3f}",
            f"fsspec.open(compression='infer'): {r['gzip']['fsspec_s']:.3f}",
        ]
    )
    if "ordereddict_s" in r["lru"]:
        rows.append(
            [
                f"LRU bookkeeping ({r['lru']['touches']:,} touches)",
                f"{r['lru']['ordereddict_s']:.3f}",
                f"cachetools.LRUCache: {r['lru']['cachetools_s']:.3f}",
            ]
        )
    lines = [
        "# Hand-written code vs libraries",
        "",
        _report.machine_line(out),
        _report.load_line(out),
        "",
        f"Seconds, best of {out['settings']['repeat']} (`benchmarks/bench_libraries.py`).",
        "",
    ]
    lines += _report.md_table(["what", "dmcsvm's own s", "library s"], rows, align="lrl")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
