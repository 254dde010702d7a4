"""mScatter-SVM on a 2-D checkerboard with many classes, against LIBSVM one-vs-rest.
=================================================================================

    python examples/scatter_checkerboard.py [--classes 100]

One class per field of a checkerboard whose fields overlap slightly (20 points per class, half for
training, half for testing), as in Table 1 of Jenssen et al. (2009).  Trains ScatterSVC (one
problem with N variables) and scikit-learn's one-vs-rest SVC (one LIBSVM problem per class) with the
same RBF kernel and prints error and time of both.
"""

import argparse
import time

import numpy as np
from sklearn.multiclass import OneVsRestClassifier
from sklearn.svm import SVC

from dmcsvm import ScatterSVC


def checkerboard(m, per_class=20, overlap=0.1, seed=0):
    rng = np.random.default_rng(seed)
    side = int(np.ceil(np.sqrt(m)))
    y = np.repeat(np.arange(m), per_class)
    X = np.stack(
        [
            (y % side) + rng.uniform(-overlap, 1 + overlap, y.size),
            (y // side) + rng.uniform(-overlap, 1 + overlap, y.size),
        ],
        axis=1,
    )
    train = np.tile(np.arange(per_class) < per_class // 2, m)
    return X[train], y[train], X[~train], y[~train]


def main(argv=None):
    p = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    p.add_argument("--classes", type=int, default=100)
    a = p.parse_args(argv)
    Xtr, ytr, Xte, yte = checkerboard(a.classes)
    gamma = 0.5  # sigma^2 = 1
    mu = 2 * a.classes / len(ytr)  # the paper's nu = 0.5 (mu = m / (nu N))
    for name, model in (
        ("ScatterSVC (mScatter)", ScatterSVC(mu=mu, gamma=gamma)),
        ("LIBSVM one-vs-rest", OneVsRestClassifier(SVC(C=10, gamma=gamma))),
    ):
        t = time.perf_counter()
        model.fit(Xtr, ytr)
        err = 100 * np.mean(model.predict(Xte) != yte)
        print(
            f"{name:22s} {a.classes} classes: error {err:5.1f}%  "
            f"train+test {time.perf_counter() - t:6.2f}s"
        )
    clf = ScatterSVC(mu=mu, gamma=gamma).fit(Xtr, ytr)
    print(
        f"ScatterSVC: {clf.support_.size} support vectors of {len(ytr)}, {clf.n_iter_} rounds, "
        f"between-class scatter 1/2 sum ||m_c - mbar||^2 = {clf.objective_:.4g}"
    )


if __name__ == "__main__":
    main()
