"""Kernel functions evaluated block-wise: one GEMM (BLAS) plus a fused numba element-wise pass.

Every kernel block ``K(XA, XB)`` is computed as ``G = XA @ XB.T`` in the inputs' precision (sgemm
for float32, the fast path) and then turned into the kernel value by a numba loop that works in
float64 (squared distances ``|a|^2 + |b|^2 - 2 a.b`` lose digits in float32 when points are close),
writing into a preallocated output, in place on the GEMM's own output when it can. A float32 RBF
block takes its ``exp`` from :func:`exp32`, vectorized arithmetic fused into the same row loop.
Dense arrays and ``scipy.sparse`` CSR matrices give the same results.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

KERNELS = ("linear", "poly", "rbf", "sigmoid")


@dataclass(frozen=True)
class KernelSpec:
    """A kernel and its resolved hyper-parameters (``gamma`` already a number).

    Parameters
    ----------
    name : {'linear', 'poly', 'rbf', 'sigmoid'}
    gamma : float
        Scale of the inner product (poly, sigmoid) or of the squared distance (rbf); > 0.
    degree : int
        Polynomial degree (poly only); >= 1.
    coef0 : float
        Offset of the inner product (poly and sigmoid: ``tanh(gamma <x, z> + coef0)``).
    """

    name: str = "rbf"
    gamma: float = 1.0
    degree: int = 3
    coef0: float = 0.0

    def __post_init__(self):
        if self.name not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}, got {self.name!r}")
        if not (np.isfinite(self.gamma) and self.gamma > 0):
            raise ValueError(f"gamma must be a positive finite number, got {self.gamma!r}")
        if self.name == "poly" and (int(self.degree) != self.degree or self.degree < 1):
            raise ValueError(f"degree must be an integer >= 1, got {self.degree!r}")
        if not np.isfinite(self.coef0):
            raise ValueError(f"coef0 must be finite, got {self.coef0!r}")

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "gamma": float(self.gamma),
            "degree": int(self.degree),
            "coef0": float(self.coef0),
        }


# --------------------------------------------------------------------------------------------
# numba element-wise kernels: plain functions on arrays, tested alone against NumPy references.
# --------------------------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True, inline="always")
def _rbf_arg(a, b, g, gamma):
    """``-gamma * max(a + b - 2 g, 0)`` in float64: the RBF exponent of one entry from the two
    squared norms and the Gram value (clipped: rounding can make the distance negative)."""
    return -gamma * max(a + b - 2.0 * np.float64(g), 0.0)


@numba.njit(cache=True, nogil=True)
def rbf_exponent(G, na, nb, gamma, out):
    """``out[i, j] = -gamma * max(na[i] + nb[j] - 2 G[i, j], 0)``, the distance formed in
    float64."""
    n, m = G.shape
    for i in range(n):
        a = na[i]
        for j in range(m):
            out[i, j] = _rbf_arg(a, nb[j], G[i, j], gamma)
    return out


@numba.njit(cache=True, nogil=True)
def rbf_exponent_inplace(G, na, nb, gamma):
    """:func:`rbf_exponent` with ``out = G``, the same values bit for bit.  A loop that reads one
    array and writes another is vectorized by LLVM only behind a run-time check that the two do
    not overlap; when they are the same block (the GEMM wrote into ``out``) the check fails and
    the scalar loop runs, about 3x slower.  One array read and written in place has no check."""
    n, m = G.shape
    for i in range(n):
        a = na[i]
        gi = G[i]
        for j in range(m):
            gi[j] = _rbf_arg(a, nb[j], gi[j], gamma)
    return G


#: below this float32 exponent exp(x) is under float32's smallest normal number: exp32 returns 0
EXP32_MIN = np.float32(-87.33654)


@numba.njit(cache=True, nogil=True, inline="always", fastmath={"contract"})
def exp32(x):
    """float32 ``exp(x)`` for ``x <= 0`` as plain arithmetic that LLVM vectorizes (llvmlite has no
    vector math library, so ``math.exp`` in a loop stays scalar): Cody-Waite reduction
    ``x = k ln2 + r``, ``|r| <= ln2 / 2``, a degree-7 minimax polynomial for ``e^r`` (Cephes
    ``expf``) and ``2^k`` built from its exponent bits.  Relative error <= 2e-7, ``exp32(0) == 1``
    exactly; results below the smallest normal float32 flush to 0."""
    xc = max(x, EXP32_MIN)
    k = np.floor(xc * np.float32(1.44269504088896341) + np.float32(0.5))
    r = xc - k * np.float32(0.693359375) - k * np.float32(-2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1.0)
    two_k = np.int32((np.int32(k) + np.int32(127)) << np.int32(23)).view(np.float32)
    return p * two_k if x > EXP32_MIN else np.float32(0.0)


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def rbf_f32(G, na, nb, gamma, out):
    """float32 RBF block, row by row: the exponent formed in float64 as in :func:`rbf_exponent`
    (one vectorized loop), then :func:`exp32` over the same row while it is in cache (a second
    vectorized loop).  ``out`` may be ``G`` itself (kernel_block's GEMM output): each row is read
    before it is written, and both loops see one row at a time."""
    n, m = G.shape
    for i in range(n):
        a = na[i]
        gi = G[i]
        oi = out[i]
        if gi.ctypes.data == oi.ctypes.data:
            # in place through ONE array: with two views of the same row LLVM's overlap check
            # fails and the loop runs scalar (see rbf_exponent_inplace)
            for j in range(m):
                gi[j] = _rbf_arg(a, nb[j], gi[j], gamma)
        else:
            for j in range(m):
                oi[j] = _rbf_arg(a, nb[j], gi[j], gamma)
        for j in range(m):
            oi[j] = exp32(oi[j])
    return out


def rbf_from_gram(G, na, nb, gamma, out):
    """``out[i, j] = exp(-gamma * max(na[i] + nb[j] - 2 G[i, j], 0))``, the distance formed in
    float64.  float32 output: :func:`rbf_f32` (exponent and exp fused per row); float64 output:
    the exponent by numba, then numpy's SIMD ``exp`` in place (2-3x faster than a scalar exp in
    the loop)."""
    if out.dtype == np.float32:
        return rbf_f32(G, na, nb, gamma, out)
    if G is out:
        rbf_exponent_inplace(out, na, nb, gamma)
    else:
        rbf_exponent(G, na, nb, gamma, out)
    np.exp(out, out=out)
    return out


@numba.njit(cache=True, nogil=True)
def poly_power(G, gamma, coef0, degree, out):
    """``out[i, j] = (gamma * G[i, j] + coef0) ** degree`` in float64, integer power by squaring."""
    n, m = G.shape
    for i in range(n):
        for j in range(m):
            base = gamma * np.float64(G[i, j]) + coef0
            r = 1.0
            e = degree
            while e > 0:
                if e & 1:
                    r *= base
                base *= base
                e >>= 1
            out[i, j] = r
    return out


@numba.njit(cache=True, nogil=True)
def poly_power_inplace(G, gamma, coef0, degree):
    """:func:`poly_power` with ``out = G``, the same products in the same order (bit for bit),
    one row at a time through float64 row buffers so that every loop runs over ``j`` and
    vectorizes (see :func:`rbf_exponent_inplace` for why the in-place form matters)."""
    n, m = G.shape
    if degree <= 4:
        # the common degrees as straight-line code, the products poly_power forms: r = 1 * b
        # is b, (b * b) is b^2 and b^2 * b^2 is b^4, so d = 3 is b * b^2 and d = 4 is b^2 * b^2
        for i in range(n):
            gi = G[i]
            for j in range(m):
                b = gamma * np.float64(gi[j]) + coef0
                if degree == 1:
                    gi[j] = b
                elif degree == 2:
                    gi[j] = b * b
                elif degree == 3:
                    gi[j] = b * (b * b)
                else:
                    b2 = b * b
                    gi[j] = b2 * b2
        return G
    base = np.empty(m)
    r = np.empty(m)
    for i in range(n):
        gi = G[i]
        for j in range(m):
            base[j] = gamma * np.float64(gi[j]) + coef0
            r[j] = 1.0
        e = degree
        while e > 0:
            if e & 1:
                for j in range(m):
                    r[j] *= base[j]
            e >>= 1
            if e > 0:
                for j in range(m):
                    base[j] *= base[j]
        for j in range(m):
            gi[j] = r[j]
    return G


def poly_from_gram(G, gamma, coef0, degree, out):
    """``out[i, j] = (gamma * G[i, j] + coef0) ** degree`` (in place when ``G`` is ``out``)."""
    if G is out:
        return poly_power_inplace(out, gamma, coef0, degree)
    return poly_power(G, gamma, coef0, degree, out)


@numba.njit(cache=True, nogil=True)
def copy_gram(G, out):
    """Linear kernel: the Gram block itself (cast into ``out``'s dtype)."""
    n, m = G.shape
    for i in range(n):
        for j in range(m):
            out[i, j] = G[i, j]
    return out


# --------------------------------------------------------------------------------------------
# orchestration
# --------------------------------------------------------------------------------------------


def row_norms_sq(X) -> np.ndarray:
    """Squared Euclidean row norms in float64 (dense or CSR)."""
    if sp.issparse(X):
        X = X.tocsr()
        if X.has_canonical_format:
            # each row's squares summed in stored order (bincount adds in sequence), without
            # building two more matrices as ``X.multiply(X).sum(axis=1)`` did: a round of a
            # sparse fit asks this of its batch (0.3 ms of a 40-row fit's 3.7 ms rounds)
            d = X.data.astype(np.float64)
            rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
            return np.bincount(rows, weights=d * d, minlength=X.shape[0]).astype(
                np.float64, copy=False
            )
        X64 = X.astype(np.float64)  # duplicates are summed before squaring
        return np.asarray(X64.multiply(X64).sum(axis=1)).ravel()
    X64 = np.asarray(X, dtype=np.float64)
    return np.einsum("ij,ij->i", X64, X64)


#: a sparse ``XB`` of at most this many entries (rows x features) is made dense for ``XA @ XB.T``
_DENSE_B_MAX = 2**17


def _gram(XA, XB) -> np.ndarray:
    """Dense ``XA @ XB.T`` in the common precision of the inputs."""
    if sp.issparse(XA) or sp.issparse(XB):
        if sp.issparse(XA) and sp.issparse(XB):
            if XB.shape[0] * XB.shape[1] <= _DENSE_B_MAX:
                # CSR times a dense block adds each entry's products in the order of XA's row,
                # as the sparse product does (the same values), without building a sparse
                # result: 15-20x faster for a round's small batch, 4x at 100 x 500
                G = np.asarray(XA @ XB.toarray().T)
            else:
                G = (XA @ XB.T).toarray()
        elif sp.issparse(XA):
            G = np.asarray(XA @ np.asarray(XB).T)
        else:
            G = np.asarray((XB @ np.asarray(XA).T).T)
        return np.ascontiguousarray(G)
    return np.asarray(XA) @ np.asarray(XB).T


# --------------------------------------------------------------------------------------------
# the same element-wise passes in NumPy, for a process that has not loaded numba's code yet
# --------------------------------------------------------------------------------------------

#: up to this many kernel entries a prediction in a process that has not run any of this
#: module's numba code yet computes them with NumPy: numba's first use in a process loads its
#: typing and target registries (0.3-0.4 s measured, benchmarks/results/start_up.md) besides the
#: cached machine code, more than NumPy's extra passes cost over 2**24 entries (~0.1 s)
NUMPY_FIRST_MAX = 2**24


def numba_loaded() -> bool:
    """Whether this process has already run (compiled or loaded from the cache) one of the
    element-wise numba kernels of this module."""
    return any(
        f.overloads
        for f in (
            rbf_exponent,
            rbf_exponent_inplace,
            rbf_f32,
            poly_power,
            poly_power_inplace,
            copy_gram,
        )
    )


def prefer_numpy(n_entries: int) -> bool:
    """Whether a prediction of ``n_entries`` kernel values should take the NumPy passes
    (``kernel_block(..., jit=False)``): numba not loaded yet and the job small enough."""
    return n_entries <= NUMPY_FIRST_MAX and not numba_loaded()


def _rbf_numpy(G, na, nb, gamma, out):
    """:func:`rbf_exponent` then ``exp`` in NumPy, the same float64 operations in the same
    order (``(na + nb) - 2 G``, clipped at 0, times ``-gamma``): the same values bit for bit."""
    d = np.add.outer(np.asarray(na, dtype=np.float64), np.asarray(nb, dtype=np.float64))
    d -= 2.0 * np.asarray(G, dtype=np.float64)
    np.maximum(d, 0.0, out=d)
    np.multiply(d, -gamma, out=out)
    np.exp(out, out=out)
    return out


def _poly_numpy(G, gamma, coef0, degree, out):
    """:func:`poly_power` in NumPy: ``gamma G + coef0`` raised by the same squarings and
    products (the same values bit for bit)."""
    base = np.asarray(G, dtype=np.float64) * gamma
    base += coef0
    r = np.ones_like(base)
    e = degree
    while e > 0:
        if e & 1:
            r *= base
        base *= base
        e >>= 1
    out[...] = r
    return out


def sigmoid_from_gram(G, gamma, coef0, out):
    """``out[i, j] = tanh(gamma * G[i, j] + coef0)`` (in place when ``G`` is ``out``): NumPy's
    vectorized ``tanh`` over the block, in ``out``'s precision."""
    np.multiply(G, gamma, out=out, casting="unsafe")
    out += coef0
    np.tanh(out, out=out)
    return out


def kernel_block(
    spec: KernelSpec,
    XA,
    XB,
    out: np.ndarray | None = None,
    norms_a: np.ndarray | None = None,
    norms_b: np.ndarray | None = None,
    dtype=np.float64,
    jit: bool = True,
) -> np.ndarray:
    """Evaluate ``K(XA, XB)`` (``len(XA) x len(XB)``) into ``out`` (allocated when None).

    Parameters
    ----------
    spec : KernelSpec
    XA, XB : ndarray or scipy.sparse matrix, shape (na, d) and (nb, d)
    out : ndarray, optional
        Preallocated C-contiguous output of shape (na, nb); float32 or float64.
    norms_a, norms_b : ndarray, optional
        Precomputed squared row norms (float64) for RBF; computed when absent.
    dtype : dtype
        Output dtype when ``out`` is None.
    jit : bool
        False: a float64 block's element-wise pass in NumPy instead of numba (the same values
        bit for bit; see :func:`prefer_numpy`).  float32 blocks always take numba's pass.

    Returns
    -------
    ndarray
        ``out``, holding the kernel values.
    """
    na_rows, nb_rows = XA.shape[0], XB.shape[0]
    if out is None:
        out = np.empty((na_rows, nb_rows), dtype=dtype)
    if na_rows == 0 or nb_rows == 0:
        return out
    if (
        out is not None
        and not sp.issparse(XA)
        and not sp.issparse(XB)
        and out.flags.c_contiguous
        and out.dtype == np.result_type(XA.dtype, XB.dtype)
    ):
        # the GEMM writes straight into ``out`` and the element-wise pass runs in place: no
        # second block is allocated (fresh blocks are page-faulted in again on every call in
        # Dask workers, whose nanny makes malloc return freed memory to the OS at once)
        G = np.matmul(np.asarray(XA), np.asarray(XB).T, out=out)
    else:
        G = _gram(XA, XB)
    numpy_pass = not jit and out.dtype == np.float64
    if spec.name == "rbf":
        if norms_a is None:
            norms_a = row_norms_sq(XA)
        if norms_b is None:
            norms_b = row_norms_sq(XB)
        if numpy_pass:
            _rbf_numpy(G, norms_a, norms_b, float(spec.gamma), out)
        else:
            rbf_from_gram(G, norms_a, norms_b, float(spec.gamma), out)
    elif spec.name == "poly":
        if numpy_pass:
            _poly_numpy(G, float(spec.gamma), float(spec.coef0), int(spec.degree), out)
        else:
            poly_from_gram(G, float(spec.gamma), float(spec.coef0), int(spec.degree), out)
    elif spec.name == "sigmoid":
        sigmoid_from_gram(G, float(spec.gamma), float(spec.coef0), out)
    elif G is not out:
        if numpy_pass:
            out[...] = G
        else:
            copy_gram(G, out)
    return out


def kernel_diag(spec: KernelSpec, X, norms: np.ndarray | None = None) -> np.ndarray:
    """``K(x_i, x_i)`` for every row, float64 (needed by every pair step: the 2 K_pp of Eq. 14)."""
    if spec.name == "rbf":
        return np.ones(X.shape[0])
    if norms is None:
        norms = row_norms_sq(X)
    if spec.name == "linear":
        return norms.astype(np.float64, copy=True)
    if spec.name == "sigmoid":
        return np.tanh(spec.gamma * norms + spec.coef0)
    return (spec.gamma * norms + spec.coef0) ** int(spec.degree)


def kernel_reference(spec: KernelSpec, XA, XB) -> np.ndarray:
    """Plain NumPy float64 reference of ``K(XA, XB)`` (tests and the exact QP oracle)."""
    A = XA.toarray() if sp.issparse(XA) else np.asarray(XA)
    B = XB.toarray() if sp.issparse(XB) else np.asarray(XB)
    A = A.astype(np.float64)
    B = B.astype(np.float64)
    if spec.name == "linear":
        return A @ B.T
    if spec.name == "poly":
        return (spec.gamma * (A @ B.T) + spec.coef0) ** spec.degree
    if spec.name == "sigmoid":
        return np.tanh(spec.gamma * (A @ B.T) + spec.coef0)
    d2 = ((A[:, None, :] - B[None, :, :]) ** 2).sum(-1)
    return np.exp(-spec.gamma * d2)


def resolve_gamma(gamma, X) -> float:
    """sklearn's rule: ``'scale'`` = 1 / (d * X.var()), ``'auto'`` = 1 / d, else the number."""
    d = X.shape[1]
    if isinstance(gamma, str):
        if gamma == "scale":
            if sp.issparse(X):
                Xc = X.tocsr()
                mean = Xc.mean()
                var = Xc.multiply(Xc).mean() - mean**2
            else:
                var = np.asarray(X, dtype=np.float64).var()
            return 1.0 / (d * var) if var > 0 else 1.0
        if gamma == "auto":
            return 1.0 / d
        raise ValueError(f"gamma must be 'scale', 'auto' or a positive number, got {gamma!r}")
    try:
        g = float(gamma)
    except (TypeError, ValueError):
        raise ValueError(
            f"gamma must be 'scale', 'auto' or a positive number, got {gamma!r}"
        ) from None
    if not (np.isfinite(g) and g > 0):
        raise ValueError(f"gamma must be a positive finite number, got {gamma!r}")
    return g
