"""Kernel blocks: the numba element-wise passes against NumPy, kernel_block against the plain
reference for every kernel, dtype and input format, kernel_diag, gamma resolution, KernelSpec."""

import numba
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.svm import SVC

from dmcsvm import kernels as kn
from dmcsvm.kernels import (
    KernelSpec,
    kernel_block,
    kernel_diag,
    kernel_reference,
    resolve_gamma,
    row_norms_sq,
)

SPECS = [
    KernelSpec("linear"),
    KernelSpec("poly", gamma=0.3, degree=3, coef0=1.0),
    KernelSpec("poly", gamma=0.7, degree=2, coef0=0.0),
    KernelSpec("rbf", gamma=0.25),
]
SPEC_IDS = ["linear", "poly3", "poly2", "rbf"]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    XA = rng.normal(size=(23, 7))
    XB = rng.normal(size=(17, 7))
    XB[3] = XA[5]  # an exact duplicate: RBF distance 0, kernel exactly 1
    return XA, XB


def _sparsify(X, rng, frac=0.5):
    X = X.copy()
    X[rng.random(X.shape) < frac] = 0.0
    return X


# ------------------------------------------------------------------------------------------------
# numba element-wise kernels vs NumPy
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("gdtype", [np.float64, np.float32])
def test_rbf_exponent_and_from_gram_match_numpy(data, gdtype):
    XA, XB = data
    G = (XA @ XB.T).astype(gdtype)
    na, nb = row_norms_sq(XA), row_norms_sq(XB)
    gamma = 0.37
    ref_exp = -gamma * np.maximum(na[:, None] + nb[None, :] - 2.0 * G.astype(np.float64), 0.0)
    out = np.full(G.shape, np.nan)
    res = kn.rbf_exponent(G, na, nb, gamma, out)
    assert res is out
    np.testing.assert_allclose(out, ref_exp, rtol=1e-13, atol=1e-13)
    out2 = np.full(G.shape, np.nan)
    res2 = kn.rbf_from_gram(G, na, nb, gamma, out2)
    assert res2 is out2
    np.testing.assert_allclose(out2, np.exp(ref_exp), rtol=1e-13, atol=1e-15)


def test_rbf_exponent_clips_negative_squared_distance():
    # na + nb - 2G < 0 (rounding in a real Gram block) must give distance 0, never exp(+x) > 1
    G = np.array([[1.0 + 1e-9, 0.0]])
    na = np.array([1.0])
    nb = np.array([1.0, 1.0])
    out = np.empty((1, 2))
    kn.rbf_exponent(G, na, nb, 2.0, out)
    assert out[0, 0] == 0.0
    assert out[0, 1] == -4.0
    kn.rbf_from_gram(G, na, nb, 2.0, out)
    assert out[0, 0] == 1.0


@pytest.mark.parametrize("degree", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("coef0", [0.0, 1.5, -0.5])
def test_poly_from_gram_matches_numpy(data, degree, coef0):
    XA, XB = data
    G = XA @ XB.T
    out = np.empty_like(G)
    res = kn.poly_from_gram(G, 0.3, coef0, degree, out)
    assert res is out
    np.testing.assert_allclose(out, (0.3 * G + coef0) ** degree, rtol=1e-12, atol=1e-12)


def test_poly_from_gram_float32_gram_into_float32_out(data):
    XA, XB = data
    G = (XA @ XB.T).astype(np.float32)
    out = np.empty(G.shape, dtype=np.float32)
    kn.poly_from_gram(G, 0.3, 1.0, 3, out)
    ref = (0.3 * G.astype(np.float64) + 1.0) ** 3
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)


def test_exp32_matches_numpy_exp_over_its_range():
    """The float32 exp of the RBF pass: relative error <= 2.5e-7 against float64 exp wherever the
    result is a normal float32, exactly 1 at 0 (K(x, x) = 1), 0 below the normal range, and
    monotone (a larger distance never gives a larger kernel value)."""

    @numba.njit
    def apply(x):
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = kn.exp32(x[i])
        return out

    x = -np.concatenate(
        [np.linspace(0, 1, 200001), np.linspace(1, 87.3, 400001), np.geomspace(1e-30, 1e-3, 1000)]
    ).astype(np.float32)
    x = np.sort(x)
    got = apply(x)
    assert got.dtype == np.float32
    ref = np.exp(x.astype(np.float64))
    assert np.max(np.abs(got / ref - 1.0)) <= 2.5e-7
    assert np.all(np.diff(got.astype(np.float64)) >= 0)
    assert apply(np.array([0.0, -0.0], dtype=np.float32)).tolist() == [1.0, 1.0]
    assert apply(np.array([-87.34, -100.0, -1e30, -np.inf], dtype=np.float32)).tolist() == [0.0] * 4


def test_float32_rbf_pass_matches_float64_reference(data):
    """The fused float32 pass (exponent in float64, exp32) against the float64 formula, from a
    separate Gram block and in place on it (bit for bit the same)."""
    XA, XB = data
    G = (XA @ XB.T).astype(np.float32)
    na, nb = row_norms_sq(XA), row_norms_sq(XB)
    ref = np.exp(-0.37 * np.maximum(na[:, None] + nb[None, :] - 2.0 * G.astype(np.float64), 0))
    out = kn.rbf_from_gram(G, na, nb, 0.37, np.empty_like(G))
    assert out.dtype == np.float32
    # the exponent x is rounded to float32 before exp32 (as numpy's exp pass did): that adds up
    # to |x| * 2^-24 to exp32's own 2.5e-7
    x = 0.37 * np.maximum(na[:, None] + nb[None, :] - 2.0 * G.astype(np.float64), 0)
    assert np.all(np.abs(out / ref - 1.0) <= 2.5e-7 + x * 2.0**-24)
    inplace = G.copy()
    kn.rbf_from_gram(inplace, na, nb, 0.37, inplace)
    np.testing.assert_array_equal(inplace, out)
    assert 1.0 - 1e-6 < out[5, 3] <= 1.0  # the float32 Gram entry's rounding, not exp32's


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("degree", [1, 2, 3, 4, 5, 8])
def test_in_place_passes_equal_the_two_array_passes_bit_for_bit(data, dtype, degree):
    """kernel_block runs the element-wise pass on the GEMM's own output (the in-place forms,
    which vectorize); they must give exactly what the two-array forms give, including the
    clipped (duplicate-row) distance and a tiny negative one from rounding."""
    XA, XB = data
    G = (XA @ XB.T).astype(dtype)
    na, nb = row_norms_sq(XA), row_norms_sq(XB)
    G[5, 3] *= 1 + 1e-5  # the duplicate pair (fixture): na + nb - 2G < 0, clipped to 0
    assert na[5] + nb[3] - 2.0 * np.float64(G[5, 3]) < 0
    two = kn.rbf_exponent(G, na, nb, 0.37, np.empty_like(G))
    one = G.copy()
    assert kn.rbf_exponent_inplace(one, na, nb, 0.37) is one
    np.testing.assert_array_equal(one, two)
    one = G.copy()
    assert kn.rbf_from_gram(one, na, nb, 0.37, one) is one
    np.testing.assert_array_equal(one, kn.rbf_from_gram(G, na, nb, 0.37, np.empty_like(G)))
    for coef0 in (0.0, 1.5, -0.5):
        two = kn.poly_power(G, 0.3, coef0, degree, np.empty_like(G))
        one = G.copy()
        assert kn.poly_from_gram(one, 0.3, coef0, degree, one) is one
        np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize(
    "src,dst",
    [
        (np.float64, np.float64),
        (np.float64, np.float32),
        (np.float32, np.float64),
        (np.float32, np.float32),
    ],
)
def test_copy_gram_casts_into_out(data, src, dst):
    XA, XB = data
    G = (XA @ XB.T).astype(src)
    out = np.zeros(G.shape, dtype=dst)
    res = kn.copy_gram(G, out)
    assert res is out
    np.testing.assert_array_equal(out, G.astype(dst))


# ------------------------------------------------------------------------------------------------
# kernel_block vs reference
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_kernel_block_float64_matches_reference(data, spec):
    XA, XB = data
    ref = kernel_reference(spec, XA, XB)
    K = kernel_block(spec, XA, XB)
    assert K.shape == (23, 17) and K.dtype == np.float64
    np.testing.assert_allclose(K, ref, rtol=1e-12, atol=1e-12)
    if spec.name == "rbf":
        assert K[5, 3] == 1.0


def test_kernel_reference_rbf_is_the_textbook_formula(data):
    XA, XB = data
    spec = KernelSpec("rbf", gamma=0.25)
    i, j = 4, 9
    assert kernel_reference(spec, XA, XB)[i, j] == pytest.approx(
        np.exp(-0.25 * np.sum((XA[i] - XB[j]) ** 2)), rel=1e-14
    )


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@pytest.mark.parametrize("out_dtype", [np.float32, np.float64])
def test_kernel_block_float32_inputs(data, spec, out_dtype):
    XA, XB = data
    A32, B32 = XA.astype(np.float32), XB.astype(np.float32)
    ref = kernel_reference(spec, A32, B32)  # exact kernel of the float32 points
    K = kernel_block(spec, A32, B32, dtype=out_dtype)
    assert K.dtype == out_dtype
    scale = np.abs(ref).max()
    np.testing.assert_allclose(K, ref, rtol=1e-5, atol=1e-5 * scale)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@pytest.mark.parametrize("which", ["A", "B", "both"])
def test_kernel_block_sparse_equals_dense(spec, which):
    rng = np.random.default_rng(1)
    XA = _sparsify(rng.normal(size=(19, 11)), rng)
    XB = _sparsify(rng.normal(size=(13, 11)), rng)
    A = sp.csr_matrix(XA) if which in ("A", "both") else XA
    B = sp.csr_matrix(XB) if which in ("B", "both") else XB
    Kd = kernel_block(spec, XA, XB)
    Ks = kernel_block(spec, A, B)
    assert isinstance(Ks, np.ndarray) and Ks.shape == Kd.shape
    np.testing.assert_allclose(Ks, Kd, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Ks, kernel_reference(spec, A, B), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@pytest.mark.parametrize("out_dtype", [np.float32, np.float64])
def test_kernel_block_fills_preallocated_out(data, spec, out_dtype):
    XA, XB = data
    out = np.full((23, 17), np.nan, dtype=out_dtype)
    res = kernel_block(spec, XA, XB, out=out)
    assert res is out
    assert not np.isnan(out).any()
    tol = 1e-6 if out_dtype == np.float32 else 1e-12
    ref = kernel_reference(spec, XA, XB)
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_kernel_block_uses_given_norms(data):
    # the precomputed squared norms are what the RBF block uses (partitions pass them in)
    XA, XB = data
    spec = KernelSpec("rbf", gamma=0.25)
    na, nb = row_norms_sq(XA), row_norms_sq(XB)
    np.testing.assert_allclose(
        kernel_block(spec, XA, XB, norms_a=na, norms_b=nb),
        kernel_reference(spec, XA, XB),
        rtol=1e-12,
        atol=1e-14,
    )
    shifted = kernel_block(spec, XA, XB, norms_a=na + 1.0, norms_b=nb)
    np.testing.assert_allclose(
        shifted, kernel_reference(spec, XA, XB) * np.exp(-0.25), rtol=1e-12, atol=1e-14
    )


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_kernel_block_empty(spec):
    K = kernel_block(spec, np.zeros((0, 3)), np.ones((4, 3)))
    assert K.shape == (0, 4)
    K = kernel_block(spec, np.ones((2, 3)), np.zeros((0, 3)))
    assert K.shape == (2, 0)


def test_row_norms_sq_dense_sparse_float32():
    rng = np.random.default_rng(2)
    X = _sparsify(rng.normal(size=(9, 5)), rng)
    ref = (X**2).sum(axis=1)
    np.testing.assert_allclose(row_norms_sq(X), ref, rtol=1e-14)
    np.testing.assert_allclose(row_norms_sq(sp.csr_matrix(X)), ref, rtol=1e-14)
    r32 = row_norms_sq(X.astype(np.float32))
    assert r32.dtype == np.float64
    np.testing.assert_allclose(
        r32, (X.astype(np.float32).astype(np.float64) ** 2).sum(1), rtol=1e-14
    )


def test_row_norms_sq_of_csr_rows_sums_each_rows_squares_in_order():
    """CSR norms: each row's squares added in stored order (float32 data squared in float64),
    empty rows 0.0, and a matrix with duplicate or unsorted entries normed as the matrix it
    stands for (duplicates summed before squaring)."""
    rng = np.random.default_rng(5)
    X = sp.random(30, 400, density=0.3, format="csr", random_state=5, dtype=np.float32)
    X.data = (X.data * rng.normal(size=X.nnz) * 1e3).astype(np.float32)
    keep = np.ones(X.shape[0], dtype=np.float32)
    keep[3] = 0.0
    X = (sp.diags(keep) @ X).tocsr()  # row 3 empty
    X.eliminate_zeros()
    X.sum_duplicates()  # (sorts the indices: the canonical form)
    assert X.has_canonical_format and X.indptr[3] == X.indptr[4]
    got = row_norms_sq(X)
    want = np.array(
        [
            sum(float(v) * float(v) for v in X.data[X.indptr[i] : X.indptr[i + 1]])
            for i in range(X.shape[0])
        ]
    )
    assert got.dtype == np.float64 and got[3] == 0.0
    np.testing.assert_array_equal(got, want)
    dup = sp.csr_matrix(
        (np.array([1.0, 2.0, 3.0, 4.0]), np.array([1, 1, 0, 2]), np.array([0, 3, 3, 4])),
        shape=(3, 3),
    )
    assert not dup.has_canonical_format
    np.testing.assert_array_equal(row_norms_sq(dup), [3.0**2 + 3.0**2, 0.0, 16.0])
    assert row_norms_sq(sp.csr_matrix((0, 4))).dtype == np.float64


# ------------------------------------------------------------------------------------------------
# kernel_diag
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@pytest.mark.parametrize("sparse", [False, True])
def test_kernel_diag_is_reference_diagonal(data, spec, sparse):
    XA, _ = data
    X = sp.csr_matrix(XA) if sparse else XA
    diag = kernel_diag(spec, X)
    assert diag.dtype == np.float64 and diag.shape == (23,)
    np.testing.assert_allclose(diag, np.diag(kernel_reference(spec, XA, XA)), rtol=1e-12)
    np.testing.assert_allclose(kernel_diag(spec, X, row_norms_sq(X)), diag, rtol=1e-14)


# ------------------------------------------------------------------------------------------------
# gamma and KernelSpec
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sparse", [False, True])
def test_resolve_gamma_scale_matches_sklearn_svc(sparse):
    rng = np.random.default_rng(3)
    X = _sparsify(rng.normal(loc=0.5, scale=2.0, size=(40, 6)), rng, 0.3)
    y = np.arange(40) % 3
    Xin = sp.csr_matrix(X) if sparse else X
    svc = SVC(gamma="scale").fit(Xin, y)
    assert resolve_gamma("scale", Xin) == pytest.approx(svc._gamma, rel=1e-12)
    svc_auto = SVC(gamma="auto").fit(Xin, y)
    assert resolve_gamma("auto", Xin) == pytest.approx(svc_auto._gamma, rel=1e-15)


def test_resolve_gamma_numbers_and_constant_data():
    X = np.ones((5, 4))
    assert resolve_gamma("scale", X) == 1.0  # zero variance: sklearn's fallback
    assert resolve_gamma(0.5, X) == 0.5
    assert resolve_gamma(np.float32(2.0), X) == 2.0
    assert resolve_gamma(3, X) == 3.0


@pytest.mark.parametrize("bad", [0, -1.0, np.nan, np.inf])
def test_resolve_gamma_rejects_non_positive(bad):
    with pytest.raises(ValueError, match="gamma must be a positive finite number"):
        resolve_gamma(bad, np.ones((3, 2)))


@pytest.mark.parametrize("bad", ["bogus", None, [1.0]])
def test_resolve_gamma_rejects_other_types(bad):
    with pytest.raises(ValueError, match="gamma must be 'scale', 'auto' or a positive number"):
        resolve_gamma(bad, np.ones((3, 2)))


def test_kernelspec_errors():
    with pytest.raises(
        ValueError,
        match=r"kernel must be one of \('linear', 'poly', 'rbf', "
        r"'sigmoid'\), got 'laplacian'",
    ):
        KernelSpec("laplacian")
    for g in (0.0, -2.0, np.nan, np.inf):
        with pytest.raises(ValueError, match="gamma must be a positive finite number"):
            KernelSpec("rbf", gamma=g)
    with pytest.raises(ValueError, match="degree must be an integer >= 1, got 0"):
        KernelSpec("poly", gamma=1.0, degree=0)
    with pytest.raises(ValueError, match="degree must be an integer >= 1, got 2.5"):
        KernelSpec("poly", gamma=1.0, degree=2.5)
    with pytest.raises(ValueError, match="coef0 must be finite"):
        KernelSpec("poly", gamma=1.0, coef0=np.nan)


def test_kernelspec_roundtrip():
    spec = KernelSpec("poly", gamma=0.5, degree=4, coef0=2.0)
    assert KernelSpec(**spec.to_dict()) == spec
    # degree is only meaningful for poly; other kernels accept any value there
    assert KernelSpec("rbf", gamma=1.0, degree=0).name == "rbf"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sparse_gram_with_a_dense_made_batch_equals_the_sparse_product(monkeypatch, dtype):
    """A small sparse ``XB`` is made dense for ``XA @ XB.T`` (``_DENSE_B_MAX``): the same values
    bit for bit as the sparse product, so the threshold never changes a model."""
    from dmcsvm import kernels

    rng = np.random.default_rng(7)
    XA = sp.random(120, 300, density=0.05, format="csr", random_state=1, dtype=dtype)
    XB = sp.random(9, 300, density=0.2, format="csr", random_state=2, dtype=dtype)
    XA.data = ((XA.data - 0.5) * 10.0 ** rng.integers(-3, 3, XA.nnz)).astype(dtype)
    XB.data = (XB.data - 0.5).astype(dtype)
    want = (XA @ XB.T).toarray()
    for limit in (0, XB.shape[0] * XB.shape[1]):  # the sparse product, the dense batch
        monkeypatch.setattr(kernels, "_DENSE_B_MAX", limit)
        got = kernels._gram(XA, XB)
        assert got.dtype == want.dtype and got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)
