"""The UCI letter data (26 classes) trained on a Dask LocalCluster started for the run.
====================================================================================

    python examples/letter_localcluster.py [--n-train 15000] [--workers 2]

The CSV (label first, letters A-Z) is converted to a zarr store by streaming; the workers read
their row partitions from the store; prediction of the held-out rows runs chunk-parallel on the
same cluster.  Data: --data-dir or $DMCSVM_DATA (default ../shared/data beside the repository).
"""

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from dmcsvm import MulticlassSVC
from dmcsvm.store import from_csv, open_store, read_all, read_labels, write_arrays

DEFAULT_DATA = os.environ.get(
    "DMCSVM_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")
)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=DEFAULT_DATA)
    p.add_argument(
        "--n-train",
        type=int,
        default=15000,
        help="first rows for training (LIBSVM's split: 15000; the next 5000 are the test rows)",
    )
    p.add_argument("--n-test", type=int, default=5000)
    p.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes")
    p.add_argument("--C", type=float, default=10.0)
    p.add_argument("--gamma", type=float, default=0.05)
    a = p.parse_args(argv)

    from distributed import Client, LocalCluster

    src = os.path.join(a.data_dir, "letter", "letter-recognition.data")
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        full = from_csv(src, os.path.join(tmp, "letter.zarr"), label_column=0)
        X, y = read_all(full)  # 20000 x 16: small enough to split here
        y = np.asarray(full.classes)[y]
        lo, hi = a.n_train, min(a.n_train + a.n_test, len(y))
        Xmin, Xmax = X[:lo].min(0), X[:lo].max(0)  # scale to [-1, 1] with training min/max

        def scale(Z):
            return 2 * (Z - Xmin) / np.maximum(Xmax - Xmin, 1e-12) - 1

        train = write_arrays(
            os.path.join(tmp, "train.zarr"), scale(X[:lo]), y[:lo], rows_per_chunk=2048
        )
        test = write_arrays(
            os.path.join(tmp, "test.zarr"), scale(X[lo:hi]), y[lo:hi], rows_per_chunk=2048
        )
        print(
            f"stores written in {time.perf_counter() - t:.1f} s: {train.n_samples} train, "
            f"{test.n_samples} test rows"
        )

        with (
            LocalCluster(
                n_workers=a.workers, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            print(f"LocalCluster: {a.workers} workers at {cluster.scheduler_address}")
            clf = MulticlassSVC(C=a.C, gamma=a.gamma, client=client)
            t = time.perf_counter()
            clf.fit(train.url)  # partitions read the store on the workers
            print(
                f"fit: {time.perf_counter() - t:.1f} s, {clf.n_iter_} rounds, "
                f"{len(clf.support_)} support vectors"
            )
            t = time.perf_counter()
            pred = clf.predict(test.url)  # one task per chunk on the cluster
            yte = np.asarray(open_store(test.url).classes)[read_labels(test)]
            acc = float(np.mean(pred == yte))
            print(f"test accuracy: {acc:.4f} ({time.perf_counter() - t:.2f} s to predict)")
    return acc


if __name__ == "__main__":
    main()
