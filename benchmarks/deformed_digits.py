"""A realistic larger problem: MNIST digits deformed as InfiMNIST makes MNIST8M.

Only MNIST's 10,000 test images are in the shared data folder.  The training rows are the first
5,000 of them followed by deformations of the same 5,000 (Loosli, Canu and Bottou 2007: smooth
random displacement fields as in Simard et al. 2003, translations and thickening, resampled and
stored as uint8 pixels); the test rows are the last 5,000 originals, which no training row
comes from.  Pixels are scaled to [-1, 1] (``x / 127.5 - 1``).  Every block of rows is drawn
from its own seeded stream, so any n is a prefix of any larger one and a block can be made on
any worker; :func:`write_store` writes them chunk by chunk to a dmcsvm zarr store.
"""

from __future__ import annotations

from pathlib import Path

import _data
import numpy as np

#: the deformation (elastic amplitude alpha in pixels, field smoothing sigma, largest shift in
#: pixels, largest thickening coefficient): the strongest of bench_scaling.DEFORMATIONS
ALPHA, SIGMA, SHIFT, THICK = 34.0, 4.0, 2.0, 1.0
N_SOURCE = 5000
BLOCK = 5000


def deform(imgs: np.ndarray, rng) -> np.ndarray:
    """Deformed copies (uint8, same shape) of 28 x 28 uint8 digits ``imgs`` (k, 28, 28)."""
    from scipy import ndimage

    yy, xx = np.meshgrid(np.arange(28.0), np.arange(28.0), indexing="ij")
    out = np.empty_like(imgs)
    for k, img in enumerate(imgs.astype(np.float64)):
        dy, dx = (
            ndimage.gaussian_filter(rng.uniform(-1, 1, img.shape), SIGMA) * ALPHA for _ in range(2)
        )
        ty, tx = rng.uniform(-SHIFT, SHIFT, 2)
        w = ndimage.map_coordinates(img, [yy + dy + ty, xx + dx + tx], order=1)
        # thickening along the stroke's normal: the image plus a multiple of its gradient
        # magnitude (Simard's thickness tangent)
        w = w + rng.uniform(-THICK, THICK) * np.hypot(*np.gradient(w))
        out[k] = np.clip(np.rint(w), 0, 255).astype(np.uint8)
    return out


def _source(data_dir):
    X, y = _data.mnist_test_images(data_dir)
    return X.astype(np.uint8).reshape(-1, 28, 28), y


def block(data_dir, b: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Training rows ``[b * BLOCK, (b + 1) * BLOCK)`` as float32 in [-1, 1] and their labels:
    block 0 holds the 5,000 source digits, block b > 0 a deformation of each of them."""
    imgs, y = _source(data_dir)
    src, lab = imgs[:N_SOURCE], y[:N_SOURCE]
    if b > 0:
        src = deform(src, np.random.default_rng([seed, b]))
    X = src.reshape(N_SOURCE, 784).astype(np.float32) / np.float32(127.5) - np.float32(1.0)
    return X, lab.astype(np.int64)


def training_rows(data_dir, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` training rows in memory, float64 (as a user reads them from the store),
    and their labels; the blocks made on threads (scipy's filters release the GIL)."""
    import dask

    blocks = dask.compute(
        *[dask.delayed(block)(str(data_dir), b, seed) for b in range(-(-n // BLOCK))],
        scheduler="threads",
    )
    X = np.concatenate([b[0] for b in blocks])[:n].astype(np.float64)
    return X, np.concatenate([b[1] for b in blocks])[:n]


def test_set(data_dir) -> tuple[np.ndarray, np.ndarray]:
    """The last 5,000 MNIST test digits, scaled as the training rows, float64."""
    imgs, y = _source(data_dir)
    X = imgs[N_SOURCE:].reshape(-1, 784).astype(np.float64) / 127.5 - 1.0
    return X, y[N_SOURCE:].astype(np.int64)


def write_store(path, n: int, data_dir, seed: int = 0, rows_per_chunk: int = BLOCK):
    """A dmcsvm zarr store of the first ``n`` training rows (a multiple of 5,000), written block
    by block (one dask task each: the whole set is never in one process's memory)."""
    import dask
    import dask.array as da

    from dmcsvm.store import from_dask

    if n % BLOCK:
        raise ValueError(f"n must be a multiple of {BLOCK}, got {n}")
    parts = [dask.delayed(block)(str(data_dir), b, seed) for b in range(n // BLOCK)]
    X = da.concatenate([da.from_delayed(p[0], (BLOCK, 784), np.float32) for p in parts])
    # every block holds the same 5,000 digits in the same order: the labels need no deforming
    y = np.tile(_source(data_dir)[1][:N_SOURCE].astype(np.int64), n // BLOCK)
    with dask.config.set(scheduler="threads"):
        return from_dask(X, y, str(Path(path)), rows_per_chunk=rows_per_chunk)
