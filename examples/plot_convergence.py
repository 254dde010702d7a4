"""Convergence of a fit: dual, primal and duality gap round by round.
==================================================================

    python examples/plot_convergence.py [-o convergence.png]

Trains MulticlassSVC on scikit-learn's bundled digits and plots its ``history_``: the primal
falls and the dual rises to the same optimum, and the relative duality gap ``(P - D) / P`` falls
below ``1e-3`` as the fit stops on its KKT rule.  Needs matplotlib (``pip install
"dmcsvm[plot]"``).
"""

import argparse

import matplotlib.pyplot as plt
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from dmcsvm import MulticlassSVC


def main(argv=None):
    p = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    p.add_argument("-o", "--output", help="PNG to write (default: show the figure)")
    a = p.parse_args(argv)

    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    # a small working set per round, so that the history has rounds to show
    clf = MulticlassSVC(C=10, solver_options={"batch_size": 100}).fit(Xtr, ytr)
    print(f"test accuracy: {clf.score(Xte, yte):.4f}")
    h = clf.history_
    print(f"{len(h['round'])} rounds, final gap {h['gap'][-1]:.1e}")

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    ax1.plot(h["round"], h["primal"], label="primal P")
    ax1.plot(h["round"], h["dual"], label="dual D")
    ax1.set_ylabel("objective")
    ax1.legend()
    ax2.semilogy(h["round"], h["gap"])
    ax2.set_ylabel("relative gap (P - D) / P")
    ax2.set_xlabel("round")
    fig.suptitle("MulticlassSVC on digits")
    fig.tight_layout()
    if a.output:
        fig.savefig(a.output)
    else:
        plt.show()


if __name__ == "__main__":
    main()
