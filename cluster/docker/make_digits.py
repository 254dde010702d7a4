"""Data for the compose demo: scikit-learn's bundled digits as dmcsvm stores.

``python cluster/docker/make_digits.py OUT_DIR`` writes OUT_DIR/digits-{train,test}.svm (LIBSVM
text, a 75/25 stratified split with a fixed seed) and converts them to the stores
OUT_DIR/digits-{train,test}.zarr that the workers read. Files that exist are kept.
"""

import sys
from pathlib import Path

from sklearn.datasets import dump_svmlight_file, load_digits
from sklearn.model_selection import train_test_split

from dmcsvm.store import from_svmlight


def main(out: str) -> None:
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    X, y = load_digits(return_X_y=True)
    X_tr, X_te, y_tr, y_te = train_test_split(
        X / 16.0, y, test_size=0.25, random_state=0, stratify=y
    )
    for name, (Xp, yp) in {"train": (X_tr, y_tr), "test": (X_te, y_te)}.items():
        svm, store = out_dir / f"digits-{name}.svm", out_dir / f"digits-{name}.zarr"
        if not svm.exists():
            dump_svmlight_file(Xp, yp, str(svm), zero_based=False)
        if not store.exists():
            # 256-row chunks: a partition spans several chunks, as with real data
            from_svmlight(
                str(svm),
                str(store),
                n_features=X.shape[1],
                sparse=False,
                zero_based=False,
                rows_per_chunk=256,
            )
        print(f"{store}: {len(yp)} rows")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python cluster/docker/make_digits.py OUT_DIR")
    main(sys.argv[1])
