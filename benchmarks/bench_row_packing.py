"""X rows on the wire as their nonzeros (issue 15: fewer bytes per round), on real MNIST digits.

Two parts.  **Costs**: on batches of MNIST test digits (784 pixels, about 19 % nonzero) the bytes
of a packed batch against the dense one, and the CPU a packed batch costs over a dense one at
each end (pack + pickle against pickle; unpickle + unpack against unpickle), per dense entry; the
scaling model (``scaling_model.py``, design ``tree_bank_packed``) takes these.  **Fits**: the same
MulticlassSVC fit on a LocalCluster of one-thread worker processes, rounds down the tree, with
``DaskExecutor(pack_rows=True)`` (the default) and ``False`` alternated: fit time, rounds, bytes
of the round messages and of the replies, and whether both end on the same dual bit for bit (they
must: only the wire form differs).

    python benchmarks/bench_row_packing.py [--n 4000] [--workers 2] [--repeat 2]
"""

from __future__ import annotations

import gzip
import pickle
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _report  # noqa: E402
from bench_bank_rows import fit_with  # noqa: E402
from bench_scaling import best  # noqa: E402


def load_mnist_test(data_dir) -> tuple[np.ndarray, np.ndarray]:
    """The 10000 MNIST test digits (the only MNIST images in the shared data), pixels / 255 as
    float32, and their labels."""
    d = Path(data_dir) / "mnist"
    with gzip.open(d / "t10k-images-idx3-ubyte.gz") as f:
        X = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784)
    with gzip.open(d / "t10k-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)
    return X.astype(np.float32) / np.float32(255.0), y.astype(np.int64)


#: deformations like MNIST8M's (InfiMNIST, Loosli, Canu & Bottou 2007: MNIST digits under
#: smooth random displacement fields and translations, stored as uint8 pixels), from the mildest
#: to the strongest: (name, elastic amplitude alpha in pixels, field smoothing sigma, largest
#: shift in pixels, largest thickening coefficient); elastic fields as in Simard et al. 2003
DEFORMATIONS = (("sub-pixel shifts (up to 1 px)", 0.0, 4.0, 1.0, 0.0),
                ("elastic alpha 16 + shifts (1 px)", 16.0, 4.0, 1.0, 0.0),
                ("elastic alpha 34 + shifts (2 px) + thickening", 34.0, 4.0, 2.0, 1.0))


def deformed_densities(X, n=None, seed=0) -> list[dict]:
    """The share of nonzero pixels in the first ``n`` digits of ``X`` (pixels / 255; None: all)
    after each of :data:`DEFORMATIONS`, resampled bilinearly and rounded back to uint8 as MNIST8M stores them:
    resampling at sub-pixel positions spreads a stroke's edge by up to one pixel, so deformed
    digits are denser than the originals (what the packed rows' bytes depend on)."""
    from scipy import ndimage
    rng = np.random.default_rng(seed)
    imgs = np.rint(X[:n] * 255.0).reshape(-1, 28, 28)
    yy, xx = np.meshgrid(np.arange(28.0), np.arange(28.0), indexing="ij")
    out = []
    for name, alpha, sigma, shift, thick in DEFORMATIONS:
        nnz = 0
        for img in imgs:
            dy, dx = (ndimage.gaussian_filter(rng.uniform(-1, 1, img.shape), sigma) * alpha
                      for _ in range(2))
            ty, tx = rng.uniform(-shift, shift, 2)
            warped = ndimage.map_coordinates(img, [yy + dy + ty, xx + dx + tx], order=1)
            if thick:
                # thickening along the stroke's normal: the image plus a multiple of its
                # gradient magnitude (Simard's thickness tangent)
                warped = warped + rng.uniform(-thick, thick) * np.hypot(*np.gradient(warped))
            nnz += np.count_nonzero(np.clip(np.rint(warped), 0, 255))
        out.append({"deformation": name, "alpha": alpha, "sigma": sigma, "shift_px": shift,
                    "thickening": thick, "digits": int(len(imgs)),
                    "density": nnz / imgs.size,
                    "original_density": float(np.count_nonzero(imgs) / imgs.size)})
    return out


def packing_costs(X, batch=1000, repeat=30, seed=0) -> dict:
    """Density, bytes and the CPU of a packed batch over a dense one (seconds per dense entry),
    min over ``repeat`` on ``batch`` random rows of ``X``."""
    from dmcsvm.engine.row_packing import PackedRows, pack_rows, unpack_rows
    rng = np.random.default_rng(seed)
    B = np.ascontiguousarray(X[rng.choice(X.shape[0], batch, replace=False)])
    p = pack_rows(B)
    assert isinstance(p, PackedRows)
    dumps = lambda v: pickle.dumps(v, protocol=pickle.HIGHEST_PROTOCOL)  # noqa: E731
    dense_blob, packed_blob = dumps(B), dumps(p)
    t_dense_out = best(lambda: dumps(B), repeat)
    t_packed_out = best(lambda: dumps(pack_rows(B)), repeat)
    t_dense_in = best(lambda: pickle.loads(dense_blob), repeat)
    t_packed_in = best(lambda: unpack_rows(pickle.loads(packed_blob)), repeat)
    back = unpack_rows(pickle.loads(packed_blob))
    entries = B.size
    return {"batch": batch, "d": B.shape[1], "density": float(np.count_nonzero(X) / X.size),
            "batch_density": float(np.count_nonzero(B) / B.size),
            "dense_bytes": len(dense_blob), "packed_bytes": len(packed_blob),
            "bytes_ratio": len(packed_blob) / len(dense_blob),
            "bit_for_bit": bool(np.array_equal(back.view(np.uint32), B.view(np.uint32))),
            "t_dense_out_s": t_dense_out, "t_packed_out_s": t_packed_out,
            "t_dense_in_s": t_dense_in, "t_packed_in_s": t_packed_in,
            # what the model charges: the packed path's CPU beyond the dense path's, per entry
            "k_pack": max(t_packed_out - t_dense_out, 0.0) / entries,
            "k_unpack": max(t_packed_in - t_dense_in, 0.0) / entries}


def main(argv=None):
    ap = _report.parser(__doc__, "row_packing.json", data_dir=True)
    ap.add_argument("--n", type=int, default=4000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--no-fits", action="store_true", help="only the packing costs")
    a = ap.parse_args(argv)
    run = _report.Run(__file__, "X rows on the wire as their nonzeros", _report.settings_of(a))
    X, y = load_mnist_test(a.data_dir)
    costs = packing_costs(X)
    print({k: (round(v, 12) if isinstance(v, float) else v) for k, v in costs.items()}, flush=True)
    res = []
    if not a.no_fits:
        from distributed import Client, LocalCluster

        from dmcsvm import MulticlassSVC
        Xf, yf = X[: a.n], y[: a.n]
        MulticlassSVC(C=10, batch_size=50, n_jobs=1).fit(Xf[:300], yf[:300])   # compile here
        with LocalCluster(n_workers=a.workers, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            MulticlassSVC(C=10, batch_size=50, client=client).fit(Xf[:300], yf[:300])  # warm
            for rep in range(a.repeat):
                for pack in ((True, False) if rep % 2 == 0 else (False, True)):
                    r = fit_with(client, Xf, yf, a.batch, pack_rows=pack, tree=True)
                    r["repeat"] = rep
                    res.append(r)
                    print(f"pack_rows={pack!s:5}: {r['fit_s']:.2f} s, {r['rounds']} rounds, "
                          f"{r['bytes_sent'] / 1e6:.2f} MB sent, "
                          f"{r['bytes_received'] / 1e6:.2f} MB received", flush=True)
    summary = None
    if res:
        on = [r for r in res if r["pack_rows"]]
        off = [r for r in res if not r["pack_rows"]]
        summary = {
            "same_dual": len({(r["dual"], r["coef_sum"], r["rounds"]) for r in res}) == 1,
            "fit_s_min": {"packed": min(r["fit_s"] for r in on),
                          "dense": min(r["fit_s"] for r in off)},
            "bytes_sent": {"packed": on[0]["bytes_sent"], "dense": off[0]["bytes_sent"]},
            "bytes_received": {"packed": on[0]["bytes_received"],
                               "dense": off[0]["bytes_received"]}}
        print(summary)
    _report.write(run.envelope({"costs": costs, "fits": res, "summary": summary}), a.out)


if __name__ == "__main__":
    main()
