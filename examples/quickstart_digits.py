"""Quickstart: train a multiclass SVM on scikit-learn's bundled digits, in this process.
=====================================================================================

    python examples/quickstart_digits.py

Fits MulticlassSVC (Crammer-Singer, RBF kernel) on threads, prints the test accuracy and the
support-vector count, saves the model without pickle and checks that the reloaded model predicts
the same labels.
"""

import argparse
import os
import tempfile
import time

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from dmcsvm import MulticlassSVC
from dmcsvm.model_io import load_model, save_model


def main(argv=None):
    p = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    p.add_argument("--C", type=float, default=10.0)
    p.add_argument("--n-jobs", type=int, default=None, help="threads (default: every core)")
    a = p.parse_args(argv)

    X, y = load_digits(return_X_y=True)
    X = X / 16.0  # pixels in [0, 1]
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)

    clf = MulticlassSVC(C=a.C, kernel="rbf", gamma="scale", n_jobs=a.n_jobs)
    t = time.perf_counter()
    clf.fit(Xtr, ytr)
    print(
        f"fit: {time.perf_counter() - t:.2f} s, {clf.n_iter_} rounds, "
        f"{len(clf.support_)} support vectors of {len(ytr)}"
    )
    acc = clf.score(Xte, yte)
    print(f"test accuracy: {acc:.4f}")

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "digits.npz")
        save_model(clf, path)  # arrays + JSON, no pickle
        same = np.array_equal(load_model(path).predict(Xte), clf.predict(Xte))
    print(f"reloaded model predicts the same labels: {same}")
    return acc


if __name__ == "__main__":
    main()
