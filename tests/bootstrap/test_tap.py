"""The replica-TAP equations against independent checks (specs/replica_tap.md section 9).

T3 against brute-force sampling of the scalar bootstrap mixture, chi against a finite-beta
truncated normal, the closed-form site update against the subtraction form, Eq. 19 at a
training input with its site removed against its cavity, the S/N = 30 limit against the SVM on
all data and Eq. 20, and independence of the start values.
"""

from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import log_ndtr

from ppl_bsvm import bootstrap, datasets, kernels
from ppl_bsvm.bootstrap import svm, tap, tap_newton, tap_solve


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


@pytest.fixture(scope="module")
def crabs():
    X, y = datasets.load("crabs", standardize=True)
    return X, y


def _kernel_matrix(X, lengthscale):
    with jax.enable_x64(True):
        k = kernels.RBF(lengthscale=lengthscale)
        return kernels.gram(k, k.init_params(X), jnp.asarray(X, jnp.float64), 1e-6)


def _scalar_cavity(mu, sd, chi):
    return tap.Cavity(
        jnp.array([chi]), jnp.array([mu]), jnp.array([sd**2]), jnp.array([1.0 / chi])
    )


def _scalar_data(y, ratio, C=1.0, noise=1.0):
    return tap.TAPData(
        jnp.eye(1), jnp.array([y]), jnp.asarray(ratio), jnp.asarray(C), jnp.asarray(noise)
    )


def _assert_moments(tilted, samples, chi_frac, chi_c, n):
    """Mean within 5 standard errors; variance within 5 s.e. of the sample variance."""
    z = samples
    se_mean = z.std() / np.sqrt(n)
    se_var = np.sqrt(np.mean((z - z.mean()) ** 4) - z.var() ** 2) / np.sqrt(n)
    assert abs(float(tilted.mean[0]) - z.mean()) < 5 * se_mean
    assert abs(float(tilted.var[0]) - z.var()) < 5 * se_var
    se_chi = chi_c * np.sqrt(chi_frac * (1 - chi_frac) / n)
    assert abs(float(tilted.chi[0]) - chi_c * chi_frac) < 5 * se_chi + 1e-12


CASES = [  # (y, cavity mean, cavity sd, cavity chi, S/N)
    (1.0, 0.5, 0.8, 0.7, 1.0),
    (-1.0, 0.4, 0.5, 0.3, 2.0),
    (1.0, 1.7, 0.4, 1.2, 0.5),
    (-1.0, -2.5, 1.5, 0.2, 4.0),
]


@pytest.mark.parametrize("y, mc, sd, chi, ratio", CASES)
def test_hard_margin_tilted_moments_match_sampling(rng, y, mc, sd, chi, ratio):
    """T3: the OOB field is present w.p. 1 - exp(-S/N) and then clipped at the margin."""
    n = 1_000_000
    t = y * mc + sd * rng.standard_normal(n)
    present = rng.random(n) < 1 - np.exp(-ratio)
    z = np.where(present, np.maximum(t, 1.0), t)
    tilted, _ = tap._hard(_scalar_cavity(mc, sd, chi), _scalar_data(y, ratio))
    clamped = np.mean(present & (t < 1.0))
    _assert_moments(tilted._replace(mean=y * tilted.mean), z, 1 - clamped, chi, n)


@pytest.mark.parametrize("y, mc, sd, chi, ratio", CASES)
def test_soft_margin_tilted_moments_match_sampling(rng, y, mc, sd, chi, ratio):
    """Spec 8.2: s ~ Poisson(S/N) copies shift the field by C s chi_c below 1 - C s chi_c."""
    n, C = 1_000_000, 0.8
    t = y * mc + sd * rng.standard_normal(n)
    s = rng.poisson(ratio, n)
    c = C * s * chi
    z = np.where((s == 0) | (t >= 1.0), t, np.where(t >= 1.0 - c, 1.0, t + c))
    on_margin = np.mean((s > 0) & (t < 1.0) & (t >= 1.0 - c))
    tilted, _ = tap._soft(_scalar_cavity(mc, sd, chi), _scalar_data(y, ratio, C=C), 40)
    _assert_moments(tilted._replace(mean=y * tilted.mean), z, 1 - on_margin, chi, n)


@pytest.mark.parametrize("y, mc, sd, chi, ratio", CASES)
def test_regression_tilted_moments_match_sampling(rng, y, mc, sd, chi, ratio):
    """Spec 8.3: with s copies the GP posterior mean is (1 - w_s) h + w_s y."""
    n, noise = 1_000_000, 0.4
    h = mc + sd * rng.standard_normal(n)
    s = rng.poisson(ratio, n)
    w = s * chi / (noise + s * chi)
    z = (1 - w) * h + w * y
    tilted, _ = tap._regression(_scalar_cavity(mc, sd, chi), _scalar_data(y, ratio, noise=noise), 40)
    _assert_moments(tilted, z, np.mean(1 - w), chi, n)


@pytest.mark.parametrize("mu, sd, ratio", [(0.5, 0.8, 1.0), (1.4, 0.5, 3.0), (-1.0, 1.2, 0.5)])
def test_chi_is_the_large_beta_limit_of_the_truncated_normal(mu, sd, ratio):
    """beta x the expected thermal variance of the Gibbs posterior tends to chi_c (1 - p Phi)."""
    chi_c = 0.7
    t = np.linspace(mu - 9 * sd, mu + 9 * sd, 400_001)
    dens = np.exp(-0.5 * ((t - mu) / sd) ** 2) / (sd * np.sqrt(2 * np.pi))
    p = 1 - np.exp(-ratio)
    tilted, _ = tap._hard(_scalar_cavity(mu, sd, chi_c), _scalar_data(1.0, ratio))
    errors = []
    for beta in (1e3, 1e5):
        s = np.sqrt(chi_c / beta)
        a = (1.0 - t) / s  # truncation point of N(t, s^2) at the margin, standardised
        mills = np.exp(-0.5 * a**2 - 0.5 * np.log(2 * np.pi) - log_ndtr(-a))
        var_trunc = s**2 * np.maximum(1 + a * mills - mills**2, 0.0)
        expected = np.trapezoid(dens * var_trunc, t)  # present: truncated to y f >= 1
        limit = beta * ((1 - p) * s**2 + p * expected)
        errors.append(abs(limit - float(tilted.chi[0])))
    assert errors[1] < 0.05 * errors[0] + 1e-6  # converges like 1/sqrt(beta)
    assert errors[1] < 1e-2 * chi_c


@pytest.mark.parametrize("delta", [-6.0, -1.0, 0.0, 0.7, 3.0, 8.0])
@pytest.mark.parametrize("ratio", [0.5, 2.0, 9.0])
def test_closed_form_site_update_equals_subtraction_form(delta, ratio):
    """Spec 5.1: the cancellation-free T4 equals Lambda = 1/chi - Lambda_c etc."""
    sd, chi_c, y = 0.6, 0.9, -1.0
    mc = y * (1.0 - delta * sd)
    cav = _scalar_cavity(mc, sd, chi_c)
    tilted, closed = tap._hard(cav, _scalar_data(y, ratio))
    Lc = 1.0 / chi_c
    Lambda = 1.0 / tilted.chi - Lc
    gamma = tilted.mean / tilted.chi - mc * Lc
    lam = -tilted.var / tilted.chi**2 + sd**2 * Lc**2
    scale = max(1.0, float(jnp.abs(1.0 / tilted.chi[0])))
    np.testing.assert_allclose(closed[0], Lambda, rtol=1e-9, atol=1e-12 * scale)
    np.testing.assert_allclose(closed[1], gamma, rtol=1e-9, atol=1e-12 * scale)
    np.testing.assert_allclose(closed[2], lam, rtol=1e-7, atol=1e-10 * scale**2)


def _exact_inverse(A):
    """Inverse of a square matrix of Fractions by Gauss-Jordan elimination (exact)."""
    n = len(A)
    M = [list(row) + [Fraction(int(i == j)) for j in range(n)] for i, row in enumerate(A)]
    for col in range(n):
        piv = next(r for r in range(col, n) if M[r][col] != 0)
        M[col], M[piv] = M[piv], M[col]
        inv = 1 / M[col][col]
        M[col] = [v * inv for v in M[col]]
        for r in range(n):
            if r != col and M[r][col] != 0:
                f = M[r][col]
                M[r] = [v - f * w for v, w in zip(M[r], M[col])]
    return [row[n:] for row in M]


def test_model_moments_match_exact_rational_arithmetic(crabs):
    """T1 against ``G = (K^-1 + diag Lambda)^-1`` in exact arithmetic, with sites from 0 to
    1e12 (small, mixed and clamping pairs of entries): every entry of ``G`` to 1e-10 of
    ``sqrt(G_ii G_jj)``, ``chi`` and ``diag(B^-1) = 1 - Lambda_i G_ii`` relatively to 1e-10."""
    X, _ = crabs
    idx = np.arange(0, 200, 17)[:12]
    K = np.asarray(_kernel_matrix(X[idx], 3.0))
    Lambda = np.array([0.0, 1e-12, 1e-6, 1e-3, 0.1, 0.9, 1.0, 3.0, 1e2, 1e5, 1e9, 1e12])
    Lambda = Lambda / np.diag(K)
    Kf = [[Fraction(float(v)) for v in row] for row in K]
    A = _exact_inverse(Kf)
    for i, v in enumerate(Lambda):
        A[i][i] += Fraction(float(v))
    G_exact = _exact_inverse(A)
    G_ref = np.array([[float(v) for v in row] for row in G_exact])
    binv_ref = np.array([float(1 - Fraction(float(Lambda[i])) * G_exact[i][i]) for i in range(12)])
    zeros = jnp.zeros(12)
    moments, _, G, binv = jax.jit(tap.model_moments)(jnp.asarray(K), jnp.asarray(Lambda), zeros, zeros)
    scale = np.sqrt(np.outer(np.diag(G_ref), np.diag(G_ref)))
    assert np.max(np.abs(np.asarray(G) - G_ref) / scale) < 1e-10
    np.testing.assert_allclose(np.asarray(moments.chi), np.diag(G_ref), rtol=1e-10)
    np.testing.assert_allclose(np.asarray(binv), binv_ref, rtol=1e-10)


@jax.jit
def _moments_and_cavity(K, Lambda, gamma, lam):
    moments, fac, G, binv = tap.model_moments(K, Lambda, gamma, lam)
    return moments, tap.cavity(moments, fac, G, binv, lam)


@jax.jit
def _field_without_site(K, Lambda, gamma, lam, k_cross, k_diag):
    fac = tap.factor(K, Lambda, gamma, lam)
    return tap.fields_at(fac, K, k_cross, k_diag)


def _fixed_point(K, y, ratio, model="hard", C=1.0, noise=0.3, Lambda0=None, tol=1e-10, max_iter=5000):
    config = tap.TAPConfig(model, 0 if model == "hard" else 30, 1.0)
    data = tap.TAPData(K, jnp.asarray(y), jnp.asarray(ratio), jnp.asarray(C), jnp.asarray(noise))
    state, _, n_iter, done = tap.solve(
        config, tap.init(None, None, data, tap.TAPStart(Lambda0)), data, tol=tol, max_iter=max_iter
    )
    assert bool(done), f"no convergence in {int(n_iter)} sweeps"
    moments, cav = _moments_and_cavity(K, state.Lambda, state.gamma, state.lam)
    return state, moments, cav


@pytest.mark.parametrize(
    "model, ratio, C", [("hard", 1.0, 1.0), ("hard", 6.0, 1.0), ("soft", 1.0, 0.5), ("regression", 2.0, 1.0)]
)
def test_eq19_at_a_training_input_without_its_site_is_its_cavity(crabs, model, ratio, C):
    X, y = crabs
    if model == "regression":
        y, X = X[:, 0], X[:, 1:]
    K = _kernel_matrix(X, 3.0)
    state, _, cav = _fixed_point(K, y, ratio, model, C)
    for i in (7, int(jnp.argmax(state.Lambda)), int(jnp.argmin(state.Lambda))):
        rest = np.flatnonzero(np.arange(len(y)) != i)
        out = _field_without_site(
            K[np.ix_(rest, rest)], state.Lambda[rest], state.gamma[rest], state.lam[rest],
            K[rest][:, [i]], K[i, i][None],
        )
        np.testing.assert_allclose(out.mean[0], cav.mean[i], rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(out.var[0], cav.var[i], rtol=1e-7)
        np.testing.assert_allclose(out.chi[0], cav.chi[i], rtol=1e-9)


@pytest.mark.slow
def test_large_sample_limit_is_the_svm_on_all_data_and_eq20(crabs):
    """Spec 9.4: at S/N = 30 the mean field is the SVM on D0 and eps(S) its approximate LOO
    (crabs, RBF width 3). The fixed point is found by the library's Newton-Krylov solver,
    each ratio of S/N = 1, 3, 10, 30 started from the fixed point of the one before (the damped
    sweeps of :func:`_fixed_point` need about 1,500 iterations here, 18 s at the tests' XLA
    level; ``test_tap_newton`` checks that both reach the same fixed points)."""
    X, y = crabs
    K = _kernel_matrix(X, 3.0)
    start = None
    for ratio in (1.0, 3.0, 10.0, 30.0):
        solution = tap_solve.solve_ratio(K, y, tap.TAPConfig("hard"), 1.0, 0.3, ratio,
                                         tol=1e-10, max_iter=200, start=start)
        assert solution.run.stop_reason == "tol", ratio
        start = solution.run.state
    moments, cav = tap_newton.outputs(solution.run.state)
    sol = svm.svm_without_bias(np.asarray(K), y)
    assert sol.kkt_violation < 1e-9
    assert np.max(np.abs(np.asarray(moments.mean) - sol.field)) < 1e-8
    loo, margin = bootstrap.approximate_loo(np.asarray(K), y, sol.alpha)
    np.testing.assert_allclose(y * np.asarray(cav.mean), margin, atol=1e-7)
    eps = float(jnp.mean(jax.scipy.special.ndtr(-jnp.asarray(y) * cav.mean / jnp.sqrt(cav.var))))
    assert eps == pytest.approx(loo, abs=1e-9)


def test_several_starts_reach_one_fixed_point(crabs, rng):
    X, y = crabs
    K = _kernel_matrix(X, 3.0)
    data = tap.TAPData(K, jnp.asarray(y), jnp.asarray(1.0), jnp.asarray(1.0), jnp.asarray(1.0))
    base = tap.init(None, None, data)
    starts = [base] + [tap.init(None, None, data, tap.TAPStart(c * base.Lambda[0]))
                       for c in (0.05, 20.0)]
    noisy = base._replace(
        Lambda=base.Lambda * jnp.exp(rng.normal(0, 1, len(y))),
        gamma=base.gamma * jnp.exp(rng.normal(0, 1, len(y))),
    )
    starts.append(noisy)
    config = tap.TAPConfig("hard")
    eps, means = [], []
    for start in starts:
        state, _, _, done = tap.solve(config, start, data, tol=1e-10, max_iter=5000)
        assert bool(done)
        _, cav = _moments_and_cavity(K, state.Lambda, state.gamma, state.lam)
        eps.append(float(jnp.mean(jax.scipy.special.ndtr(-data.y * cav.mean / jnp.sqrt(cav.var)))))
        means.append(np.asarray(cav.mean))
    np.testing.assert_allclose(eps, eps[0], atol=1e-9)
    np.testing.assert_allclose(np.stack(means), np.stack([means[0]] * len(means)), atol=1e-7)


def test_start_precision_solves_the_uniform_site_equation(crabs):
    X, _ = crabs
    K = _kernel_matrix(X, 3.0)
    target = 0.3
    omega = np.linalg.eigvalsh(np.asarray(K))
    lam0 = float(tap.start_precision(jnp.asarray(omega), target))
    assert np.mean(lam0 * omega / (1 + lam0 * omega)) == pytest.approx(target, rel=1e-10)


def test_poisson_copies_sum_to_one_minus_p0():
    s, P = tap.poisson_copies(jnp.asarray(3.0), 40)
    assert float(jnp.sum(P)) == pytest.approx(1 - np.exp(-3.0), abs=1e-12)
    assert s[0] == 1 and s[-1] == 40
