"""The conjugate-gradient solve of the GP sweep against dense linear algebra.

The draw of ``f | lam`` is a linear map of the sweep's normal draws; with the same normals the
conjugate-gradient path must give the dense formula's draw to working precision (so its mean
and covariance are the conditional's), reach its backward-error tolerance on well and badly
conditioned noise, and fall back to the Cholesky factor, chain by chain, when it does not.
The law of its draws is checked with the other conditionals (``test_mcmc.py``,
``test_sample_f_is_the_conditional_gaussian``), and the whole sampler on this path against
NUTS (``test_gibbs_and_nuts_agree_on_a_small_gp``).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_bsvm import datasets, kernels
from ppl_bsvm.inference.mcmc import conditionals, pcg
from ppl_bsvm.inference.mcmc.variates import standard_normal

ACCURACY = 1e-14
"""Largest error of a draw relative to ``||A|| ||x|| + ||b||``: about ten times pcg.TOL, a
fixed number so that a looser solver fails the tests."""


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _banana_K(n, seed=0, kernel=None):
    X, _ = datasets.load("banana", standardize=True)
    X = X[np.sort(np.random.default_rng(seed).choice(len(X), n, replace=False))]
    kernel = kernels.RBF() if kernel is None else kernel
    return np.asarray(kernels.gram(kernel, kernel.init_params(X), jnp.asarray(X), 1e-6))


def _noise(n, case, seed=1):
    """``lam / gamma`` as the sweep meets it: GIG draws around the margin, some of them tiny,
    some at the floor, or all large."""
    r = np.random.default_rng(seed)
    lam = r.gamma(0.5, 2.0, n) + np.abs(r.normal(0.0, 1.0, n))
    if case == "tiny":
        lam[r.choice(n, n // 6, replace=False)] = 1e-12
    elif case == "floor":
        lam[r.choice(n, n // 6, replace=False)] = conditionals.LAM_FLOOR
    elif case == "large":
        lam = lam * 1e4
    return lam


def _rule_by_brute_force(d, gamma, n, c):
    costs = {0: n**3 / 3}
    for r in range(pcg.RANK_STEP, min(pcg.RANK_MAX, n - 1, len(d) - 1) + 1, pcg.RANK_STEP):
        iters = pcg.ITER_BASE + pcg.ITER_SLOPE * gamma * np.sqrt(max(d[-r - 1] - c, 0.0))
        costs[r] = n * r**2 + r**3 / 3 + iters * (n**2 + 4 * n * r)
    return min(costs, key=costs.get)


def test_rank_rule():
    """The rank minimises the predicted flops of a solve over multiples of RANK_STEP (the
    Cholesky factor's n^3 / 3 against the preconditioner's set-up and the predicted
    iterations); small problems keep the Cholesky factor (rank 0), and so does a spectrum
    whose tail would take more iterations than the factor costs."""
    d = np.linalg.eigvalsh(_banana_K(300))
    r = pcg.pcg_rank(d)
    assert 0 < r < 100 and r % pcg.RANK_STEP == 0
    assert r == _rule_by_brute_force(d, 1.0, 300, d[0])
    assert pcg.pcg_rank(d, gamma=3.0) == _rule_by_brute_force(d, 3.0, 300, d[0])
    assert pcg.pcg_rank(np.linalg.eigvalsh(_banana_K(25))) == 0
    assert pcg.preconditioner(_banana_K(25)) is None
    assert pcg.pcg_rank(np.linalg.eigvalsh(_banana_K(64))) == 0  # below MIN_N
    assert pcg.pcg_rank(np.linalg.eigvalsh(_banana_K(80))) > 0
    # a flat spectrum far above the floor: 4 + 30 sqrt(100) iterations of n^2 > n^3 / 3
    flat = np.concatenate([[1e-6], np.full(299, 100.0)])
    assert pcg.pcg_rank(flat) == 0
    # the top of a spectrum: the same choice as from all of it
    assert pcg.pcg_rank(d[-100:], 1.0, n=300, floor=d[0]) == r


def test_range_finder_finds_the_top_of_the_spectrum(monkeypatch):
    """Beyond EXACT_MAX points the spectrum comes from the randomized range finder: its top
    Ritz values are the eigenvalues (to 1e-8 relative where the spectrum has decayed by less
    than 1e4), the floor is the jitter and below the smallest eigenvalue, and its
    preconditioner solves in the iterations of the exact eigenpairs' (within one)."""
    n = 400
    K = _banana_K(n)
    monkeypatch.setattr(pcg, "EXACT_MAX", 100)
    monkeypatch.setattr(pcg, "RANK_MAX", 48)
    monkeypatch.setattr(pcg, "OVERSAMPLE", 16)
    spec = pcg.spectrum(K, jitter=1e-6)
    exact = np.linalg.eigvalsh(K)
    assert spec.d.shape == (64,) and spec.U.shape == (n, 64)
    top = exact[-64:]
    settled = top >= 1e-4 * top[-1]
    np.testing.assert_allclose(spec.d[settled], top[settled], rtol=1e-8)
    assert np.all(spec.d <= top * (1 + 1e-12))  # Ritz values are below the eigenvalues
    floor = 1e-6 * np.mean(np.diag(K)) / (1 + 1e-6)
    # below the smallest eigenvalue, which rounding moves by up to n eps ||K||
    assert spec.c == pytest.approx(floor) and spec.c <= exact[0] + n * np.finfo(float).eps * top[-1]
    noise = _noise(n, "typical")
    b = np.random.default_rng(3).normal(size=n)
    iters = []
    for pre in (pcg.from_spectrum(spec, 32), pcg.preconditioner(K, rank=32)):
        out = pcg.solve(pre, jnp.asarray(K), jnp.asarray(noise), jnp.asarray(b))
        assert bool(out.ok)
        iters.append(int(out.iters))
    assert abs(iters[0] - iters[1]) <= 1
    # K's trace exactly; the weak share from the Ritz values an upper bound of the exact one
    assert spec.trace == pytest.approx(np.trace(K), rel=1e-12)
    for gamma in (1.0, 0.01):
        exact_share = _weak_share_by_brute_force(exact, gamma)
        assert exact_share <= pcg.weak_share(spec, gamma) <= exact_share + 1e-6


def _weak_share_by_brute_force(eigenvalues, gamma):
    return float(np.sum(eigenvalues[eigenvalues <= 1.0 / gamma]) / np.sum(eigenvalues))


def test_weak_share_is_the_trace_in_eigenvalues_at_most_one_over_gamma():
    """``pcg.weak_share`` (the GP sampler's default overrelaxation rests on it) on a ``K`` of
    known eigenvalues and on Banana's, by the eigendecomposition's path: the sum of the
    eigenvalues at most ``1 / gamma`` over the trace."""
    r = np.random.default_rng(5)
    Q, _ = np.linalg.qr(r.normal(size=(90, 90)))
    d = np.concatenate([np.full(60, 0.5), np.full(20, 2.0), np.full(10, 100.0)])
    spec = pcg.spectrum((Q * d) @ Q.T)
    assert spec.trace == pytest.approx(1070.0, rel=1e-12)
    assert pcg.weak_share(spec) == pytest.approx(30.0 / 1070.0, rel=1e-9)
    assert pcg.weak_share(spec, gamma=0.1) == pytest.approx(70.0 / 1070.0, rel=1e-9)
    assert pcg.weak_share(spec, gamma=0.001) == 1.0 and pcg.weak_share(spec, gamma=4.0) == 0.0
    K = _banana_K(300)
    exact = np.linalg.eigvalsh(K)
    for gamma in (1.0, 3.0):
        assert pcg.weak_share(pcg.spectrum(K), gamma) == pytest.approx(
            _weak_share_by_brute_force(exact, gamma), abs=1e-12)


@pytest.mark.parametrize("case", ["typical", "tiny", "floor", "large"])
def test_solve_reaches_the_backward_error_tolerance(case):
    """The accepted solution's normwise backward error, recomputed here, is below TOL, and it
    is the dense solution up to the conditioning of ``K + N``."""
    n = 200
    K = _banana_K(n)
    noise = _noise(n, case)
    b = np.random.default_rng(2).normal(size=n)
    pre = pcg.preconditioner(K)
    assert pre is not None
    out = pcg.solve(pre, jnp.asarray(K), jnp.asarray(noise), jnp.asarray(b))
    assert bool(out.ok) and 1 <= int(out.iters) <= 30
    A = K + np.diag(noise)
    x = np.asarray(out.x)
    residual = b - A @ x
    eta = np.linalg.norm(residual) / (np.linalg.norm(A, 2) * np.linalg.norm(x) + np.linalg.norm(b))
    assert eta <= ACCURACY / 10
    # K x as returned, against numpy's: each product's rounding is at most n u (|K| |x|)_i
    # elementwise (Higham, Accuracy and Stability, eq. 3.11), whatever order XLA sums in
    bound = 2 * n * np.finfo(float).eps * (np.abs(K) @ np.abs(x))
    assert np.all(np.abs(np.asarray(out.Kx) - K @ x) <= bound)
    exact = np.linalg.solve(A, b)
    kappa = np.linalg.cond(A)
    assert np.linalg.norm(x - exact) <= 1e3 * kappa * np.finfo(float).eps * np.linalg.norm(exact)


def _reference_draw(key, lam, K, L, y, gamma, prev, overrelax):
    """The sweep's draw of ``f | lam`` from the same normals, by a dense solve refined with
    residuals in extended precision, and the scale ``||A|| ||x|| + ||b||`` of its system.

    Matheron's rule is ``f = f0 + K (K + N)^{-1} (t - f0 - e)``; Adler's move with
    coefficient ``alpha`` is ``alpha f + beta f0 + K (K + N)^{-1} ((1 - alpha) t - beta (f0 +
    e))``, ``beta = sqrt(1 - alpha^2)`` (:func:`conditionals.sample_f`)."""
    n = y.shape[0]
    xi = np.asarray(standard_normal(key, (2, n), jnp.float64))
    noise = lam / gamma
    f0 = np.asarray(L) @ xi[0]
    f0_e = f0 + np.sqrt(noise) * xi[1]
    beta = np.sqrt(1.0 - overrelax**2)
    base = overrelax * prev + beta * f0
    b = (1.0 - overrelax) * y * (1.0 + lam) - beta * f0_e
    A = K + np.diag(noise)
    x = np.linalg.solve(A, b)
    wide = np.longdouble
    for _ in range(3):
        x = x + np.linalg.solve(A, (b.astype(wide) - A.astype(wide) @ x.astype(wide)).astype(float))
    f = (base.astype(wide) + K.astype(wide) @ x.astype(wide)).astype(float)
    return f, np.linalg.norm(A, 2) * np.linalg.norm(x) + np.linalg.norm(b)


def _check_whitened(key, draw, K, L, prev=None, overrelax=0.0):
    """The draw's whitened coordinates ``w = explicit + L^T pending`` and quadratic form,
    computed without a solve with ``K`` and without a product with ``L^T``
    (:class:`conditionals.Whitened`): ``L w`` is ``f`` to rounding, and ``quad`` is ``|w|^2``
    to rounding. Plain draw: ``w = xi + L^T x``; Adler's, from ``prev`` with ``w_prev =
    L^{-1} prev`` (solved here, to its own rounding): ``w = alpha w_prev + beta xi + L^T x``.
    (Comparing ``|w|^2`` with ``f^T K^-1 f`` itself would amplify those roundings by ``||L^-1||``,
    up to 1e3 here.) Each sum of ``n`` products is off by at most ``n u`` times the sum of
    their absolute values, and ``K = L L^T + E``, ``|E| <= n u |L| |L^T|`` (Higham, Accuracy
    and Stability, eqs. 3.11 and 10.5). So, to first order, ``|L w - f|`` is at most ``n u``
    times ``|alpha| 2 |L| |w_prev| + beta |L| |xi| + |K| |x| + 2 |L| |L^T| |x|`` elementwise,
    and ``|quad - |w|^2|`` (``quad = alpha^2 |w_prev|^2 + beta^2 |xi|^2 + x^T K x + 2 alpha
    beta w_prev^T xi + 2 alpha prev^T x + 2 beta f_0^T x``) at most ``n u`` times the sum of
    the absolute values of those terms, of ``|x|^T |L| |L^T| |x|`` (``E``), of ``2 |x|^T (|L|
    |w_prev| + |L| |xi|)`` (``f_0`` and ``prev`` against ``L w``) and of ``|w|^T |w|``."""
    n = K.shape[0]
    u = n * np.finfo(float).eps
    alpha, beta = overrelax, np.sqrt(1.0 - overrelax**2)
    xi = np.asarray(standard_normal(key, (2, n), jnp.float64))[0]
    f = np.asarray(draw.f)
    w = np.asarray(draw.white.full(jnp.asarray(L)))
    w_prev = np.zeros(n) if prev is None else np.linalg.solve(L, prev)
    f0 = L @ xi
    base = alpha * (L @ w_prev) + beta * f0
    x = np.linalg.solve(K, f - base)  # only its magnitude enters the bounds
    absL, ax, axi, aw = np.abs(L), np.abs(x), np.abs(xi), np.abs(w_prev)
    bound = u * (abs(alpha) * 2 * absL @ aw + beta * absL @ axi + np.abs(K) @ ax
                 + 2 * absL @ (absL.T @ ax))
    wide = np.longdouble
    residual = (L.astype(wide) @ w.astype(wide) - f.astype(wide)).astype(float)
    assert np.all(np.abs(residual) <= bound)
    terms = (alpha**2 * aw @ aw + beta**2 * axi @ axi + ax @ (np.abs(K) @ ax)
             + 2 * abs(alpha) * beta * aw @ axi + 2 * ax @ (absL @ (abs(alpha) * aw + beta * axi))
             + (absL.T @ ax) @ (absL.T @ ax) + 2 * ax @ (absL @ (aw + axi)) + w @ w)
    assert abs(float(draw.white.quad) - w @ w) <= u * terms


@pytest.mark.parametrize("overrelax", [0.0, -0.9])
@pytest.mark.parametrize("case", ["typical", "tiny"])
def test_cg_draw_is_the_dense_draw(case, overrelax):
    """Same normals, same draw: by conjugate gradients and by the Cholesky factor, both
    within :data:`ACCURACY` (relative to ``||A|| ||x|| + ||b||``) of a refined dense solve. So the conjugate-gradient path is as exact as the Cholesky one, on a
    well-conditioned system and on one with a sixth of the noise at 1e-12 (cond ~ 1e8)."""
    n, gamma = 200, 1.3
    K = _banana_K(n)
    r = np.random.default_rng(5)
    lam = _noise(n, case) * gamma
    y = np.sign(r.normal(size=n))
    prev = r.normal(size=n)
    pre = pcg.preconditioner(K, gamma)
    L = jnp.linalg.cholesky(jnp.asarray(K))
    args = (jnp.asarray(lam), jnp.asarray(K), L, jnp.asarray(y), gamma, jnp.asarray(prev),
            overrelax)
    w_prev = np.linalg.solve(np.asarray(L), prev)
    white = conditionals.Whitened(jnp.asarray(w_prev), jnp.zeros(n), jnp.asarray(w_prev @ w_prev))
    for seed in range(3):
        key = jax.random.key(seed)
        by_cg = conditionals.draw_f(key, *args, pre, white)
        by_chol = conditionals.draw_f(key, *args, None, white)
        assert int(by_cg.cg_fallback) == 0 and int(by_cg.cg_iters) > 0
        assert int(by_chol.cg_iters) == 0
        reference, scale = _reference_draw(key, lam, K, L, y, gamma, prev, overrelax)
        for draw in (by_cg, by_chol):
            assert np.linalg.norm(np.asarray(draw.f) - reference) <= ACCURACY * scale
            _check_whitened(key, draw, K, np.asarray(L), prev, overrelax)
        assert conditionals.draw_f(key, *args, pre).white is None or overrelax == 0


def test_failed_solves_fall_back_chain_by_chain(monkeypatch):
    """With vectorised chains, a chain whose solve misses the tolerance within MAX_ITER
    iterations takes the Cholesky draw; the others keep theirs."""
    n = 200
    K = jnp.asarray(_banana_K(n))
    L = jnp.linalg.cholesky(K)
    lam = jnp.asarray(np.stack([_noise(n, "large"), _noise(n, "floor")]))
    y = jnp.asarray(np.sign(np.random.default_rng(6).normal(size=n)))
    pre = pcg.preconditioner(np.asarray(K))
    keys = jax.random.split(jax.random.key(7), 2)

    def draws(pre):
        return jax.vmap(lambda k, l: conditionals.draw_f(k, l, K, L, y, 1.0, None, 0.0, pre))(
            keys, lam)

    full = draws(pre)
    iters = np.asarray(full.cg_iters)
    assert iters[0] < iters[1]  # the floored noise takes more iterations
    monkeypatch.setattr(pcg, "MAX_ITER", int(iters[0]))
    capped = draws(pre)
    np.testing.assert_array_equal(capped.cg_fallback, [0, 1])
    exact = draws(None)
    np.testing.assert_array_equal(capped.f[0], full.f[0])
    np.testing.assert_array_equal(capped.f[1], exact.f[1])
