"""Out of core: train from a zarr store, re-reading rows chunk by chunk.
=====================================================================

Converts a LIBSVM file to a zarr store, trains from the store with partitions that re-read their
rows chunk by chunk (never holding the data in memory), and predicts chunk-parallel.

    python examples/out_of_core_store.py [--max-rows 4435] [--chunk-rows 512]

Uses satimage (LIBSVM format, 36 features, 6 classes).  The same code trains on stores far larger
than memory, on this machine or (with client=...) on a Dask cluster whose workers read the store.
Data: --data-dir or $DMCSVM_DATA (default ../shared/data beside the repository).
"""

import argparse
import itertools
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from dmcsvm import MulticlassSVC
from dmcsvm.store import from_svmlight, read_labels

DEFAULT_DATA = os.environ.get(
    "DMCSVM_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")
)


def _head(src, dst, rows):
    """The first ``rows`` lines of a text file (all when rows is None)."""
    with open(src, "rb") as f, open(dst, "wb") as g:
        g.writelines(itertools.islice(f, rows))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=DEFAULT_DATA)
    p.add_argument("--max-rows", type=int, default=None, help="use the first rows only")
    p.add_argument("--chunk-rows", type=int, default=512, help="rows per store chunk")
    p.add_argument("--C", type=float, default=10.0)
    p.add_argument("--gamma", type=float, default=1.0)
    a = p.parse_args(argv)

    folder = os.path.join(a.data_dir, "satimage")
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, fn in (("train", "satimage.scale"), ("test", "satimage.scale.t")):
            src = os.path.join(folder, fn)
            if a.max_rows:
                _head(src, os.path.join(tmp, fn), a.max_rows)
                src = os.path.join(tmp, fn)
            # streaming conversion: two passes over the text, one chunk in memory at a time
            info = from_svmlight(
                src, os.path.join(tmp, f"{name}.zarr"), n_features=36, rows_per_chunk=a.chunk_rows
            )
            paths[name] = info
            print(
                f"{name}: {info.n_samples} rows in {info.n_chunks} chunks "
                f"({'sparse' if info.sparse else 'dense'})"
            )

        clf = MulticlassSVC(
            C=a.C,
            gamma=a.gamma,
            solver_options={"data_in_memory": False, "cache_dir": tmp, "disk_cache_size": 64},
        )
        t = time.perf_counter()
        clf.fit(paths["train"].url)  # rows re-read from the store chunk by chunk
        print(
            f"fit: {time.perf_counter() - t:.1f} s, {clf.n_iter_} rounds, "
            f"{len(clf.support_)} support vectors"
        )
        pred = clf.predict(paths["test"].url)  # chunk-parallel, never gathered
        acc = float(np.mean(pred == read_labels(paths["test"])))
        print(f"test accuracy: {acc:.4f}")
    return acc


if __name__ == "__main__":
    main()
