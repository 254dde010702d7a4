"""``dmcsvm convert SRC DST.zarr`` and ``dmcsvm info STORE``."""

from __future__ import annotations

import json
import os

import numpy as np

from ._inputs import add_input_options, conversion_progress, convert_file, detect_format
from ._usage import UsageError, plural, stderr_is_tty


def add_parsers(sub):
    c = sub.add_parser(
        "convert",
        help="convert a LIBSVM/CSV/.npy file to a dmcsvm store "
        "(streaming; never loads the whole file)",
    )
    c.add_argument("src", help="LIBSVM/svmlight text, CSV or .npy (.gz/.bz2/.xz text is fine)")
    c.add_argument("dst", help="the store directory to create, e.g. train.zarr")
    c.add_argument(
        "--chunk-rows",
        type=int,
        metavar="R",
        help="rows per chunk (default: about 8 MiB of features per chunk)",
    )
    layout = c.add_mutually_exclusive_group()
    layout.add_argument(
        "--sparse",
        dest="sparse",
        action="store_true",
        default=None,
        help="LIBSVM: store CSR (default: when density < 25%%)",
    )
    layout.add_argument(
        "--dense", dest="sparse", action="store_false", help="LIBSVM: store dense X"
    )
    c.add_argument(
        "--n-features",
        type=int,
        metavar="D",
        help="LIBSVM: number of features (default: the largest index)",
    )
    c.add_argument("--overwrite", action="store_true", help="replace an existing store at DST")
    c.add_argument(
        "--progress",
        action=argparse_bool(),
        default=None,
        help="show a progress bar (default: when stderr is a terminal)",
    )
    add_input_options(c)
    c.set_defaults(func=run_convert)
    i = sub.add_parser("info", help="shape, classes, chunking, sparsity and size of a store")
    i.add_argument("store", help="a dmcsvm store directory (or its URL)")
    i.add_argument("--json", action="store_true", help="print the information as JSON")
    i.add_argument(
        "--check",
        action="store_true",
        help="read every chunk: each must be present, decode and hold finite values "
        "(exit status 2 naming the first that does not)",
    )
    i.set_defaults(func=run_info)


def argparse_bool():
    import argparse

    return argparse.BooleanOptionalAction


def run_convert(a) -> int:
    if a.chunk_rows is not None and a.chunk_rows < 1:
        raise UsageError(f"--chunk-rows must be >= 1, got {a.chunk_rows}")
    if a.n_features is not None and a.n_features < 1:
        raise UsageError(f"--n-features must be >= 1, got {a.n_features}")
    progress = stderr_is_tty() if a.progress is None else a.progress
    fmt = detect_format(a.src, a.format, a.delimiter)
    with conversion_progress(progress, "converting", a.src, fmt) as cb:
        info = convert_file(
            a.src,
            a.dst,
            a,
            n_features=a.n_features,
            sparse=a.sparse,
            rows_per_chunk=a.chunk_rows,
            overwrite=a.overwrite,
            progress=cb,
        )
    layout = "sparse (CSR)" if info.sparse else "dense"
    print(
        f"wrote {a.dst}: {info.n_samples} {plural(info.n_samples, 'row')} x "
        f"{info.n_features} {plural(info.n_features, 'feature')}, {layout}, "
        f"{info.n_chunks} {plural(info.n_chunks, 'chunk')} of {info.rows_per_chunk} "
        f"{plural(info.rows_per_chunk, 'row')}"
    )
    return 0


def _du(path) -> int:
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def store_summary(info) -> dict:
    """What ``dmcsvm info`` reports, as a dict."""
    from ..store import read_labels

    counts: dict = {}
    for lo, hi in info.chunk_bounds:
        vals, cnt = np.unique(read_labels(info, lo, hi), return_counts=True)
        for v, k in zip(vals.tolist(), cnt.tolist(), strict=False):
            counts[v] = counts.get(v, 0) + k
    keys = sorted(counts)
    names = [info.classes[k] for k in keys] if info.classes is not None else keys
    n, d = info.n_samples, info.n_features
    nnz = info.nnz if info.sparse else None
    out = {
        "store": info.url,
        "n_samples": n,
        "n_features": d,
        "layout": "sparse" if info.sparse else "dense",
        "rows_per_chunk": info.rows_per_chunk,
        "n_chunks": info.n_chunks,
        "nnz": nnz,
        "density": (nnz / (n * d)) if (nnz is not None and n * d) else None,
        "label_dtype": info.label_dtype,
        "label_kind": _label_kind(info),
        "n_classes": len(keys),
        "classes": [
            {"label": c, "count": int(counts[k])} for c, k in zip(names, keys, strict=False)
        ],
    }
    local = info.url[len("file://") :] if info.url.startswith("file://") else info.url
    out["bytes_on_disk"] = _du(local) if os.path.isdir(local) else None
    return out


def _label_kind(info) -> str:
    """How the labels were written: text (stored as codes and a ``classes`` list), integer or
    real numbers."""
    if info.classes is not None:
        return "text"
    return "real" if np.dtype(info.label_dtype).kind == "f" else "integer"


def _human(nbytes):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if nbytes < 1024 or unit == "TiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024


def run_info(a) -> int:
    from ..store import open_store

    if not os.path.exists(a.store) and "://" not in a.store:
        raise UsageError(f"{a.store} does not exist")
    info = open_store(a.store)
    s = store_summary(info)
    if a.check:
        from ..store.readers import verify_store

        s["check"] = f"ok: {verify_store(info)} rows read, every chunk present, decoded, finite"
    if a.json:
        print(json.dumps(s))
        return 0
    print(f"store          {s['store']}")
    print(
        f"shape          {s['n_samples']} {plural(s['n_samples'], 'row')} x "
        f"{s['n_features']} {plural(s['n_features'], 'feature')}"
    )
    if s["layout"] == "sparse":
        print(f"layout         sparse (CSR), {s['nnz']} stored entries, density {s['density']:.4f}")
    else:
        print("layout         dense float32")
    print(
        f"chunking       {s['n_chunks']} {plural(s['n_chunks'], 'chunk')} of "
        f"{s['rows_per_chunk']} {plural(s['rows_per_chunk'], 'row')}"
    )
    if s["bytes_on_disk"] is not None:
        print(f"size on disk   {_human(s['bytes_on_disk'])}")
    print(f"classes        {s['n_classes']} ({s['label_kind']} labels)")
    for c in s["classes"]:
        print(f"  {str(c['label']):>12}  {c['count']}")
    if a.check:
        print(f"check          {s['check']}")
    return 0
