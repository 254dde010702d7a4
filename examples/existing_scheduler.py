"""Train on an existing Dask cluster given its scheduler address.
==============================================================

    dask scheduler &  dask worker tcp://127.0.0.1:8786 &      # a cluster, somewhere
    python examples/existing_scheduler.py tcp://127.0.0.1:8786

With an address the script starts nothing: it connects, trains with the cluster's workers as the
partitions' hosts and predicts there.  Without an address it starts a LocalCluster to stand in for
one (and closes it at the end).
"""

import argparse
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from dmcsvm import MulticlassSVC


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("address", nargs="?", help="scheduler address, e.g. tcp://10.0.0.5:8786")
    p.add_argument("--C", type=float, default=10.0)
    a = p.parse_args(argv)

    from distributed import Client, LocalCluster

    cluster = None
    if a.address:
        client = Client(a.address, timeout="30s")
        print(f"connected to {a.address}: {len(client.scheduler_info()['workers'])} workers")
    else:
        cluster = LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
        client = Client(cluster)
        print(f"no address given: started a LocalCluster at {cluster.scheduler_address}")
    try:
        X, y = load_digits(return_X_y=True)
        Xtr, Xte, ytr, yte = train_test_split(
            X / 16.0, y, test_size=0.25, random_state=0, stratify=y
        )
        # a Client: used, never closed for us.  Digits is small enough for this process to
        # solve alone (every row in one working set, its rounds in the coordinator's kernel
        # block, no worker needed); working sets of 500 rows run the partitions' rounds on the
        # workers, as a problem too large for that block does
        clf = MulticlassSVC(C=a.C, client=client, solver_options={"batch_size": 500})
        t = time.perf_counter()
        clf.fit(Xtr, ytr)
        where = clf.engine_stats_[0]["executor"]
        print(f"fit ({where}): {time.perf_counter() - t:.2f} s, {clf.n_iter_} rounds")
        acc = float(np.mean(clf.predict(Xte) == yte))
        print(f"test accuracy: {acc:.4f}")
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
    return acc


if __name__ == "__main__":
    main()
