"""Multi-prototype SVM on UCI letter: a few linear prototypes per class against one.
=================================================================================

Aiolli & Sperduti (2005) train ``q`` linear prototypes per class (the paper's kernel
``<x, z> + 1``) and classify by the class of the best-scoring prototype; the assignment of every
training pattern to one prototype of its class is searched by annealing.  This example trains
q = 1 (the Crammer-Singer linear model) and q = 3 on a 3000-pattern subset of letter with a short
schedule and prints test errors, the explicit prototype matrix and the energy along the search.
Runs in well under a minute; ``benchmarks/bench_mprotsvm.py`` reproduces the paper's table.

Usage::

    python examples/multiprototype_letter.py [--data-dir ../shared/data]
"""

import argparse
import time
from pathlib import Path

import numpy as np

from dmcsvm import MultiPrototypeSVC

DATA = Path(__file__).resolve().parent.parent / ".." / "shared" / "data"


def load_letter(data_dir, n_train=3000, n_test=2000):
    """First ``n_train`` rows to train, the last ``n_test`` rows to test, features in [-1, 1]."""
    raw = np.loadtxt(
        Path(data_dir) / "letter" / "letter-recognition.data", delimiter=",", dtype=str
    )
    y = raw[:, 0]
    X = raw[:, 1:].astype(np.float64)
    X = 2.0 * X / 15.0 - 1.0  # the 16 features are integers in 0..15
    return X[:n_train], y[:n_train], X[-n_test:], y[-n_test:]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", default=str(DATA))
    a = p.parse_args()
    Xtr, ytr, Xte, yte = load_letter(a.data_dir)
    for q in (1, 3):
        # the paper's kernel <x, z> + 1 is the default (kernel='poly', degree=1, gamma=1, coef0=1)
        model = MultiPrototypeSVC(
            n_prototypes=q, C=10.0, T0=10.0, tau=0.15, max_epochs=30, random_state=0
        )
        t = time.perf_counter()
        model.fit(Xtr, ytr)
        dt = time.perf_counter() - t
        err = 100.0 * (1.0 - model.score(Xte, yte))
        print(
            f"q={q}: test error {err:.2f} %  ({dt:.1f} s, {model.n_epochs_} epochs, "
            f"{model.n_iter_} solver rounds, energy {model.energy_:.1f})"
        )
        print(
            f"      prototypes_ {model.prototypes_.shape}, classes of the first prototypes: "
            f"{model.prototype_class_[:7].tolist()}"
        )
        if model.n_epochs_:
            h = model.epoch_history_
            step = max(1, len(h["epoch"]) // 6)
            print("      epoch  temperature  energy  re-assigned")
            for i in range(0, len(h["epoch"]), step):
                print(
                    f"      {h['epoch'][i]:5d}  {h['temperature'][i]:11.3f}  "
                    f"{h['energy'][i]:7.1f}  {h['n_changed'][i]:6d}"
                )


if __name__ == "__main__":
    main()
