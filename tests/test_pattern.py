"""Per-pattern numba functions (dmcsvm.numerics.pattern) against independent references.

A *state* is one pattern's row: coefficients ``b`` (feasible), scores ``f = f_other + kpp b``,
assigned prototype ``y``, class ``c`` and the class of every prototype ``pcls``.  The reduced
problem of the pattern (docs/design.md, 'The Crammer-Singer dual', AS 2005 units) is

    max_b  2 b[y] - (kpp ||b||^2 + 2 b . f_other)
    s.t.   sum b = 0,  0 <= b[y] <= C,  b[r] <= 0 (pcls[r] != c),  b[r] = 0 (other positives).
"""

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from dmcsvm.numerics import pattern as pt

C_VALUES = (1.0, 0.3, 5.0)


def _make_state(rng, kind, k):
    """A feasible random state.  kind: 'cs' (one prototype per class), 'multi' (two prototypes
    for some classes; the other positive prototype must stay 0), 'zero_kpp' (x = 0: K_pp = 0)."""
    C = C_VALUES[k % 3]
    if kind == "multi":
        pcls = np.array([0, 0, 1, 1, 2, 3, 3], dtype=np.int64)
    else:
        pcls = np.arange(int(rng.integers(2, 7)), dtype=np.int64)
    P = pcls.shape[0]
    y = int(rng.integers(P))
    c = int(pcls[y])
    neg = np.flatnonzero(pcls != c)
    mode = k % 4
    if mode == 0:
        ay = 0.0
    elif mode == 1:
        ay = C
    else:
        ay = C * rng.uniform(0.05, 0.95)
    b = np.zeros(P)
    b[y] = ay
    if ay > 0:
        sub = neg[rng.random(neg.shape[0]) < 0.6]
        if sub.shape[0] == 0:
            sub = neg[:1]
        b[sub] = -ay * rng.dirichlet(np.ones(sub.shape[0]))
        b[y] = -b[neg].sum()  # exact row sum 0
    kpp = 0.0 if kind == "zero_kpp" else float(rng.uniform(0.2, 3.0))
    f_other = rng.normal(scale=1.5, size=P)
    f_other[y] += rng.uniform(-1.0, 2.0)
    f = f_other + kpp * b
    return dict(b=b, f=f, y=y, c=c, pcls=pcls, kpp=kpp, C=C, f_other=f_other)


def _states(seed, kind, count):
    rng = np.random.default_rng(seed)
    return [_make_state(rng, kind, k) for k in range(count)]


CS_STATES = _states(0, "cs", 24)
MULTI_STATES = _states(1, "multi", 12)
ZERO_STATES = _states(2, "zero_kpp", 8)
ALL_STATES = CS_STATES + MULTI_STATES + ZERO_STATES
POS_STATES = CS_STATES + MULTI_STATES  # kpp > 0: unique optimum


def _args(s):
    return s["y"], s["c"], s["pcls"], s["kpp"], s["C"]


def _copy(s):
    return s["b"].copy(), s["f"].copy()


def _pairs(s):
    y, c, pcls = s["y"], s["c"], s["pcls"]
    P = pcls.shape[0]
    cand_a = [y] + [r for r in range(P) if pcls[r] != c]
    return [(ra, rb) for ra in cand_a for rb in range(P) if rb != ra and pcls[rb] != c]


def _assert_feasible(b, s, atol=1e-12):
    y, c, pcls, C = s["y"], s["c"], s["pcls"], s["C"]
    assert abs(b.sum()) <= atol * max(1.0, C) * 10, f"row sum {b.sum()}"
    assert -atol <= b[y] <= C, f"b[y] = {b[y]} outside [0, {C}]"
    for r in range(b.shape[0]):
        if r == y:
            continue
        if pcls[r] != c:
            assert b[r] <= atol, f"b[{r}] = {b[r]} > 0 for a negative prototype"
        else:
            assert b[r] == 0.0, f"other positive prototype {r} moved to {b[r]}"


def _value(s, b):
    return 2.0 * b[s["y"]] - (s["kpp"] * b @ b + 2.0 * b @ s["f_other"])


def _gain(s, b_new):
    return _value(s, b_new) - _value(s, s["b"])


def _line_interval(s, ra, rb):
    """Feasible v for ``b + v (e_ra - e_rb)``, derived from the constraints coordinate by
    coordinate (independent of pair_step's own case analysis)."""
    b, y, C = s["b"], s["y"], s["C"]
    lo, hi = -np.inf, np.inf
    for r, d in ((ra, 1.0), (rb, -1.0)):
        if r == y:
            lb, ub = 0.0, C
        else:
            lb, ub = -np.inf, 0.0
        # lb <= b[r] + d v <= ub
        if d > 0:
            lo, hi = max(lo, lb - b[r]), min(hi, ub - b[r])
        else:
            lo, hi = max(lo, b[r] - ub), min(hi, b[r] - lb)
    return lo, hi


@pytest.fixture(scope="module")
def qp_solutions(cs):
    """Exact reduced optimum (cvxpy) of every state with kpp > 0: list of ``(b*, gain*)``."""
    return [
        cs.reduced_pattern_qp(s["b"], s["f"], s["y"], s["c"], s["pcls"], s["kpp"], s["C"])
        for s in POS_STATES
    ]


# ------------------------------------------------------------------------------------------------
# the basic step
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", range(len(ALL_STATES)))
def test_pair_step_is_the_best_step_on_the_line(k):
    s = ALL_STATES[k]
    y, c, pcls, kpp, C = _args(s)
    for ra, rb in _pairs(s):
        b, f = _copy(s)
        v, g = pt.pair_step(b, f, y, ra, rb, kpp, C)
        np.testing.assert_array_equal(b, s["b"])  # pair_step does not move anything
        np.testing.assert_array_equal(f, s["f"])
        lo, hi = _line_interval(s, ra, rb)
        assert lo - 1e-12 <= v <= hi + 1e-12, (ra, rb, v, lo, hi)

        def gain_at(t, ra=ra, rb=rb):
            bn = s["b"].copy()
            bn[ra] += t
            bn[rb] -= t
            return _gain(s, bn)

        # the reported gain is the true change of the reduced objective
        assert g == pytest.approx(gain_at(v), rel=1e-9, abs=1e-12)
        # brute force: dense grid + bounded scalar maximization of the concave 1-D gain
        assert np.isfinite(lo) and np.isfinite(hi) and lo <= hi + 1e-15
        if hi - lo <= 1e-15:
            assert v == pytest.approx(lo, abs=1e-15)
            continue
        grid = np.linspace(lo, hi, 2001)
        vals = [gain_at(t) for t in grid]
        res = minimize_scalar(
            lambda t: -gain_at(t), bounds=(lo, hi), method="bounded", options={"xatol": 1e-13}
        )
        cands = [(vals[j], grid[j]) for j in range(len(grid))] + [(-res.fun, res.x)]
        best, t_best = max(cands)
        assert g >= best - 1e-9 * max(1.0, abs(best)), (ra, rb, g, best)
        assert g >= 0.0
        if kpp > 0.0:
            # strictly concave: the maximizer is unique
            assert v == pytest.approx(t_best, abs=1e-5 * max(1.0, hi - lo))
        elif g > 0.0:
            # linear along the line: the best step goes to an end of the interval
            assert v == lo or v == hi


def test_pair_step_closed_form_case1_and_case2():
    # Case 1 (ra = y, Eq. 12): v = (1 - f_y + f_rb) / (2 kpp), clipped to [max(-b_y, b_rb), C - b_y]
    b = np.array([0.4, -0.1, -0.3])
    f = np.array([0.2, 0.5, -0.4])
    v, g = pt.pair_step(b, f, 0, 0, 1, 2.0, 1.0)
    assert v == pytest.approx((1 - 0.2 + 0.5) / 4.0)
    assert g == pytest.approx(2 * v * (1.3 - 2.0 * v))
    v, g = pt.pair_step(b, f, 0, 0, 1, 0.5, 1.0)  # unclipped 1.3 > C - b_y = 0.6
    assert v == pytest.approx(0.6)
    # Case 2 (both in N_p, Eq. 13): v = (f_rb - f_ra) / (2 kpp), clipped to [b_rb, -b_ra]
    v, g = pt.pair_step(b, f, 0, 1, 2, 1.0, 1.0)
    assert v == pytest.approx(max(-0.45, -0.3))  # (f2 - f1)/2 = -0.45 clipped to b_2
    assert g == pytest.approx(2 * v * ((-0.4 - 0.5) - v))


def test_apply_step_updates_row_and_own_scores():
    s = CS_STATES[3]
    y, c, pcls, kpp, C = _args(s)
    for ra, rb in _pairs(s):
        b, f = _copy(s)
        v, g = pt.pair_step(b, f, y, ra, rb, kpp, C)
        pt.apply_step(b, f, y, ra, rb, v, kpp, C)
        exp_b = s["b"].copy()
        exp_b[ra] += v
        exp_b[rb] -= v
        np.testing.assert_allclose(b, exp_b, rtol=0, atol=1e-14)
        np.testing.assert_allclose(f, s["f_other"] + kpp * b, rtol=0, atol=1e-12)
        _assert_feasible(b, s)


# ------------------------------------------------------------------------------------------------
# optimizers
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", range(len(POS_STATES)))
def test_opt_exact_solves_reduced_problem(k, qp_solutions):
    s = POS_STATES[k]
    y, c, pcls, kpp, C = _args(s)
    b_star, g_star = qp_solutions[k]
    b, f = _copy(s)
    g = pt.opt_exact(b, f, y, c, pcls, kpp, C, 0.0)
    _assert_feasible(b, s)
    np.testing.assert_allclose(b, b_star, atol=1e-7 * max(1.0, C))
    assert g == pytest.approx(g_star, rel=1e-7, abs=1e-9)
    assert g == pytest.approx(_gain(s, b), rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(f, s["f_other"] + kpp * b, atol=1e-12)
    # the optimum is a fixed point: no further gain
    g2 = pt.opt_exact(b, f, y, c, pcls, kpp, C, 0.0)
    assert g2 <= 1e-12


@pytest.mark.parametrize("seed", range(6))
def test_opt_exact_equals_the_full_sort(seed):
    """Sorting only the D_r above max D - 1 gives, bit for bit, the full sort's solution, with
    many prototypes and values crowded at the cut (ties, values just below / above it)."""
    rng = np.random.default_rng(seed)
    m, q = 13, 20
    pcls = np.repeat(np.arange(m), q).astype(np.int64)
    P = pcls.shape[0]
    c = int(rng.integers(m))
    y = c * q + int(rng.integers(q))
    kpp, C = float(rng.uniform(0.5, 3.0)), float(10.0 ** rng.uniform(-1, 1))
    part = pcls != c
    part[y] = True
    b = np.zeros(P)
    f = rng.normal(-1.0, 0.6, P) if seed % 2 else rng.normal(0.0, 0.05, P)
    f[y] = rng.normal(0.3, 0.3)
    D = np.where(np.arange(P) == y, (f - 1.0) / (C * kpp) + 1.0, f / (C * kpp))
    # values exactly at, just below and just above the cut max D - 1
    neg = np.flatnonzero(part & (np.arange(P) != y))[:6]
    cut = D[part].max() - 1.0
    for r, dv in zip(neg, (0.0, 0.0, -1e-12, 1e-12, -1e-6, 1e-6), strict=False):
        f[r] = (cut + dv) * C * kpp
    D = np.where(np.arange(P) == y, (f - 1.0) / (C * kpp) + 1.0, f / (C * kpp))
    theta = pt.theta_sorted(np.sort(D[part])[::-1])  # over ALL participating D_r
    tau = np.where(part, np.minimum(theta, D) - (D - (np.arange(P) == y)), 0.0)
    b_ref = np.where(part, C * tau, 0.0)
    b_ref[y] = min(b_ref[y], C)
    f_got = f.copy()
    pt.opt_exact(b, f_got, y, c, pcls, kpp, C, 0.0)
    np.testing.assert_array_equal(b, b_ref)
    assert np.abs(b).max() > 0


OPTIMIZERS_TIGHT = {
    "fixed_point": lambda b, f, y, c, pcls, kpp, C: pt.opt_fixed_point(
        b, f, y, c, pcls, kpp, C, 1e-15
    ),
    "all_pairs": lambda b, f, y, c, pcls, kpp, C: pt.opt_all_pairs(b, f, y, c, pcls, kpp, C, 1e-20),
    "opt_kkt": lambda b, f, y, c, pcls, kpp, C: pt.opt_kkt(b, f, y, c, pcls, kpp, C, 1e-20),
}


def _basic_until_done(b, f, y, c, pcls, kpp, C, max_calls=100000):
    total = 0.0
    for _ in range(max_calls):
        g = pt.opt_basic(b, f, y, c, pcls, kpp, C, 1e-20)
        if g == 0.0:
            break
        total += g
    return total


OPTIMIZERS_TIGHT["basic (repeated)"] = _basic_until_done


@pytest.mark.parametrize("name", list(OPTIMIZERS_TIGHT))
def test_iterative_optimizers_reach_reduced_optimum(name, qp_solutions):
    opt = OPTIMIZERS_TIGHT[name]
    for k, s in enumerate(POS_STATES):
        y, c, pcls, kpp, C = _args(s)
        b_star, g_star = qp_solutions[k]
        b, f = _copy(s)
        g = opt(b, f, y, c, pcls, kpp, C)
        _assert_feasible(b, s)
        np.testing.assert_allclose(b, b_star, atol=2e-6 * max(1.0, C), err_msg=f"state {k}")
        assert g == pytest.approx(g_star, rel=1e-6, abs=1e-9), k
        # the reported total gain is the true change of the reduced objective
        assert g == pytest.approx(_gain(s, b), rel=1e-8, abs=1e-10), k
        np.testing.assert_allclose(f, s["f_other"] + kpp * b, atol=1e-10)
        assert pt.psi_value(b, f, y, c, pcls, C) <= 1e-6


@pytest.mark.parametrize("code", list(pt.OPTIMIZERS.values()), ids=list(pt.OPTIMIZERS))
def test_every_optimizer_keeps_feasibility_and_never_loses(code):
    for k, s in enumerate(ALL_STATES):
        y, c, pcls, kpp, C = _args(s)
        b, f = _copy(s)
        for rep in range(3):
            before = _value(s, b)
            g = pt.optimize_pattern(code, b, f, y, c, pcls, kpp, C, 0.0, 1e-3)
            _assert_feasible(b, s)
            after = _value(s, b)
            assert g >= 0.0
            assert after >= before - 1e-12, (k, rep, before, after)
            assert g == pytest.approx(after - before, rel=1e-8, abs=1e-12), (k, rep)
            np.testing.assert_allclose(f, s["f_other"] + kpp * b, atol=1e-10)


@pytest.mark.parametrize("k", range(len(ZERO_STATES)))
def test_zero_kpp_optimizers_agree(k):
    # K_pp = 0 (a zero input vector under the linear kernel): the objective is linear in b, the
    # optimum is on a vertex; every optimizer must reach the same optimal value.
    s = ZERO_STATES[k]
    y, c, pcls, kpp, C = _args(s)
    vals = []
    for code in pt.OPTIMIZERS.values():
        b, f = _copy(s)
        for _ in range(50):
            if pt.optimize_pattern(code, b, f, y, c, pcls, kpp, C, 0.0, 1e-12) == 0.0:
                break
        vals.append(_value(s, b))
        assert pt.psi_value(b, f, y, c, pcls, C) == 0.0
    # the linear program's optimum: 2 C max(0, 1 - f_y + max_N f_r) (alpha_y = C on the best r)
    neg = [r for r in range(pcls.shape[0]) if pcls[r] != c]
    best = max(0.0, 2.0 * C * (1.0 - s["f_other"][y] + max(s["f_other"][r] for r in neg)))
    np.testing.assert_allclose(vals, best, rtol=1e-12, atol=1e-12)


def test_opt_basic_takes_the_amg_step_only():
    s = CS_STATES[5]
    y, c, pcls, kpp, C = _args(s)
    b, f = _copy(s)
    amg = pt.amg_value(b, f, y, c, pcls, kpp, C)
    assert amg > 0
    g = pt.opt_basic(b, f, y, c, pcls, kpp, C, 0.0)
    assert g == pytest.approx(amg, rel=1e-14)
    assert np.count_nonzero(b - s["b"]) <= 2
    # phi above the best gain: nothing happens
    b, f = _copy(s)
    assert pt.opt_basic(b, f, y, c, pcls, kpp, C, amg * 1.01) == 0.0
    np.testing.assert_array_equal(b, s["b"])


# ------------------------------------------------------------------------------------------------
# selection values
# ------------------------------------------------------------------------------------------------


def _psi_reference(s, b, f):
    """CS 2001 Eq. 32 in margin units: max_r (f_r - d_ry) - min_{r free} (f_r - d_ry), where
    free = (r = y and b_y < C) or (r in N and b_r < 0); other positive prototypes take no part."""
    y, c, pcls, C = s["y"], s["c"], s["pcls"], s["C"]
    g, free = [], []
    for r in range(b.shape[0]):
        if r == y:
            g.append(f[r] - 1.0)
            free.append(b[y] < C * (1 - 1e-12))
        elif pcls[r] != c:
            g.append(f[r])
            free.append(b[r] < 0.0)
    g = np.array(g)
    free = np.array(free)
    return max(0.0, g.max() - g[free].min()) if free.any() else 0.0


@pytest.mark.parametrize("k", range(len(ALL_STATES)))
def test_psi_value_matches_reference_and_eq15(k, cs):
    s = ALL_STATES[k]
    y, c, pcls, kpp, C = _args(s)
    b, f = _copy(s)
    psi = pt.psi_value(b, f, y, c, pcls, C)
    assert psi == pytest.approx(_psi_reference(s, b, f), rel=1e-14, abs=0)
    if pcls.shape[0] == len(set(pcls.tolist())):
        # one prototype per class: psi > 0 exactly when a condition of AS 2005 Eq. 15 holds,
        # and psi bounds each of their violations
        viol, _ = cs.kkt_violation(b[None], f[None], np.array([y]), C, zero=0.0, at_c=1e-12)
        assert (psi > 0) == (viol > 0)
        assert psi >= viol - 1e-14


def test_psi_is_exactly_zero_at_constructed_optima():
    pcls = np.arange(4, dtype=np.int64)
    # (1) no coefficients and a margin >= 1 against every other class
    b = np.zeros(4)
    f = np.array([0.0, 3.0, 2.0, 1.5])
    assert pt.psi_value(b, f, 1, 1, pcls, 1.0) == 0.0
    # (2) alpha_y = C, supports on the top competitors with equal scores, f_y - 1 below them
    b = np.array([-0.5, 1.0, -0.5, 0.0])
    f = np.array([0.75, 1.5, 0.75, 0.25])
    assert pt.psi_value(b, f, 1, 1, pcls, 1.0) == 0.0
    # (3) 0 < alpha_y < C: f_y - 1 equal to the score of every support, others below
    b = np.array([-0.25, 0.5, -0.25, 0.0])
    f = np.array([0.5, 1.5, 0.5, -1.0])
    assert pt.psi_value(b, f, 1, 1, pcls, 1.0) == 0.0
    # ... and the same rows moved off the optimum violate
    assert pt.psi_value(np.zeros(4), np.array([0.0, 1.5, 0.75, 0.0]), 1, 1, pcls, 1.0) == 0.25
    assert pt.psi_value(b, np.array([0.5, 1.5, 0.625, -1.0]), 1, 1, pcls, 1.0) == 0.125


@pytest.mark.parametrize("k", range(len(POS_STATES)))
def test_psi_positive_before_and_zero_after_exact(k, qp_solutions):
    s = POS_STATES[k]
    y, c, pcls, kpp, C = _args(s)
    b, f = _copy(s)
    g_star = qp_solutions[k][1]
    psi0 = pt.psi_value(b, f, y, c, pcls, C)
    if g_star > 1e-8:
        assert psi0 > 0.0
    if psi0 == 0.0:
        assert g_star <= 1e-8
    pt.opt_exact(b, f, y, c, pcls, kpp, C, 0.0)
    assert pt.psi_value(b, f, y, c, pcls, C) <= 1e-12 * max(1.0, np.abs(f).max())


@pytest.mark.parametrize("k", range(len(ALL_STATES)))
def test_amg_is_best_pair_and_lower_bound_of_bmg(k):
    s = ALL_STATES[k]
    y, c, pcls, kpp, C = _args(s)
    b, f = _copy(s)
    amg = pt.amg_value(b, f, y, c, pcls, kpp, C)
    bmg = pt.bmg_value(b, f, y, c, pcls, kpp, C)
    np.testing.assert_array_equal(b, s["b"])  # both work on copies
    np.testing.assert_array_equal(f, s["f"])
    best_pair = max([0.0] + [pt.pair_step(b, f, y, ra, rb, kpp, C)[1] for ra, rb in _pairs(s)])
    assert amg == pytest.approx(best_pair, rel=1e-14, abs=0)
    assert amg <= bmg * (1 + 1e-12) + 1e-14
    b2, f2 = _copy(s)
    assert bmg == pytest.approx(pt.opt_exact(b2, f2, y, c, pcls, kpp, C, 0.0), rel=1e-14, abs=0)


@pytest.mark.parametrize("k", range(len(POS_STATES)))
def test_bmg_is_the_exact_gain(k, qp_solutions):
    s = POS_STATES[k]
    y, c, pcls, kpp, C = _args(s)
    b, f = _copy(s)
    assert pt.bmg_value(b, f, y, c, pcls, kpp, C) == pytest.approx(
        qp_solutions[k][1], rel=1e-7, abs=1e-9
    )


def test_selection_values_codes():
    # selection_values: KKT gives psi, AMG/BMG give the gains (0 for non-violators)
    P, C = 4, 1.0
    rng = np.random.default_rng(11)
    sub = []
    k = 0
    while len(sub) < 8:  # k % 3 == 0 gives C = 1; keep the states with P = 4
        st = _make_state(rng, "cs", 3 * k)
        k += 1
        if st["pcls"].shape[0] == P:
            sub.append(st)
    pcls = np.arange(P, dtype=np.int64)
    B = np.stack([s["b"] for s in sub])
    F = np.stack([s["f"] for s in sub])
    yp = np.array([s["y"] for s in sub], dtype=np.int64)
    kd = np.array([s["kpp"] for s in sub])
    rows = np.arange(len(sub), dtype=np.int64)[::-1].copy()
    for sel, fn in ((pt.SEL_KKT, None), (pt.SEL_AMG, pt.amg_value), (pt.SEL_BMG, pt.bmg_value)):
        V = np.full(len(sub), np.nan)
        psi = np.full(len(sub), np.nan)
        pt.selection_values(sel, B, F, yp, yp, pcls, kd, C, rows, V, psi)
        for j, i in enumerate(rows):
            s = sub[i]
            p = pt.psi_value(s["b"], s["f"], s["y"], s["y"], pcls, C)
            assert psi[j] == p
            if sel == pt.SEL_KKT:
                assert V[j] == p
            elif p <= 0:
                assert V[j] == 0.0
            else:
                assert V[j] == fn(s["b"], s["f"], s["y"], s["y"], pcls, s["kpp"], C)


# ------------------------------------------------------------------------------------------------
# batch solve and objective pieces
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", list(pt.OPTIMIZERS.values()), ids=list(pt.OPTIMIZERS))
def test_solve_batch_is_sequential_pattern_optimization(code):
    rng = np.random.default_rng(7)
    nb, P, d, C, tol = 5, 4, 3, 1.0, 1e-6
    X = rng.normal(size=(nb, d))
    Kbb = X @ X.T + 0.5
    pcls = np.arange(P, dtype=np.int64)
    yb = rng.integers(0, P, nb).astype(np.int64)
    Bb = np.zeros((nb, P))
    Fb = rng.normal(scale=0.5, size=(nb, P))
    kd = np.diag(Kbb).copy()
    dB, gains = pt.solve_batch(code, Bb, Fb, Kbb, yb, yb, pcls, kd, C, tol, 1e-4, 1)
    # reference: optimize the rows one after the other, propagating each change to later rows
    Fc = Fb.copy()
    dref = np.zeros((nb, P))
    for j in range(nb):
        b = Bb[j].copy()
        f = Fc[j].copy()
        phi = (0.1 * tol) ** 2 / (2.0 * kd[j])
        g = pt.optimize_pattern(code, b, f, yb[j], yb[j], pcls, kd[j], C, phi, 1e-4)
        assert gains[j] == pytest.approx(g, rel=1e-12, abs=1e-15)
        dref[j] = b - Bb[j]
        Fc += np.outer(Kbb[:, j], dref[j])
    np.testing.assert_allclose(dB, dref, atol=1e-13)
    np.testing.assert_allclose(dB.sum(axis=1), 0.0, atol=1e-13)
    assert np.any(dB != 0.0)


def test_objective_parts_matches_numpy(cs):
    rng = np.random.default_rng(9)
    n, P = 12, 4
    B = np.zeros((n, P))
    y = rng.integers(0, P, n).astype(np.int64)
    for i in range(n):
        a = rng.uniform(0, 1)
        neg = [r for r in range(P) if r != y[i]]
        B[i, neg] = -a * rng.dirichlet(np.ones(P - 1))
        B[i, y[i]] = a
    X = rng.normal(size=(n, 3))
    K = X @ X.T
    F = K @ B
    sa, sbf, sxi = pt.objective_parts(B, F, y, y, np.arange(P, dtype=np.int64))
    assert sa == pytest.approx(B[np.arange(n), y].sum(), rel=1e-13)
    assert sbf == pytest.approx(np.sum(B * F), rel=1e-12)
    assert sa - 0.5 * sbf == pytest.approx(cs.dual_value(B, K, y), rel=1e-12)
    C = 0.7
    assert 0.5 * sbf + C * sxi == pytest.approx(
        cs.primal_from_scores(F, np.sum(B * F), y, C), rel=1e-12
    )


@pytest.mark.parametrize("k", [0, 1, 2, 5, 16, 17, 40, 301])
def test_sort_descending_equals_numpy(k):
    """The exact optimizer's own sort (insertion sort up to 16 values, heapsort beyond) orders
    like NumPy, ties and repeated values included."""
    rng = np.random.default_rng(k)
    v = np.round(rng.normal(size=k), 1)  # rounding makes ties
    got = pt.sort_descending(v.copy())
    np.testing.assert_array_equal(got, np.sort(v)[::-1])


@pytest.mark.parametrize("sel", sorted(pt.SELECTIONS.values()))
def test_scan_all_rows_matches_the_partitions_scan_and_a_numpy_objective(sel):
    """The coordinator's scan of every row (rounds in its Gram block) gives the psi and
    selection values a partition's scan gives, and the dual's and primal's pieces from NumPy:
    ``sum alpha_y``, ``sum B*F`` and ``sum_i C_i max(0, max_{r not in c_i} F + 1 - F_y)``."""
    rng = np.random.default_rng(7)
    n, P, tol = 40, 4, 1e-3
    pcls = np.arange(P, dtype=np.int64)
    cls = rng.integers(0, P, n).astype(np.int64)
    yp = cls.copy()
    C = rng.uniform(0.5, 2.0, n)
    B = np.zeros((n, P))
    for i in range(0, n, 2):  # half the rows support vectors, feasible: sum 0, B_y in [0, C]
        a = rng.uniform(0, C[i])
        B[i, yp[i]] = a
        B[i, (yp[i] + 1) % P] = -a
    F = rng.normal(size=(n, P))
    kdiag = rng.uniform(0.5, 1.5, n)
    V, psi = np.empty(n), np.empty(n)
    sa, sbf, sxi = pt.scan_all_rows(sel, B, F, yp, cls, pcls, kdiag, C, tol, V, psi)
    V0, psi0 = np.empty(n), np.empty(n)
    rows = np.arange(n, dtype=np.int64)
    pt.scan_rows(
        sel, B, F, yp, cls, pcls, kdiag, C, tol, rows, 0.0, np.zeros(n, np.int64), V0, psi0
    )
    np.testing.assert_array_equal(psi, psi0)
    np.testing.assert_array_equal(V, V0)
    assert np.count_nonzero(psi > tol) > 0 and np.all(V[psi <= tol] == 0.0)
    other = np.where(pcls[None, :] != cls[:, None], F, -np.inf).max(axis=1)
    assert sa == pytest.approx(B[rows, yp].sum(), rel=1e-12)
    assert sbf == pytest.approx(np.sum(B * F), rel=1e-12)
    assert sxi == pytest.approx(np.sum(C * np.maximum(0.0, other + 1.0 - F[rows, yp])), rel=1e-12)
