"""The MCMC ground truth against independent checks.

Building blocks against scipy and closed forms (inverse Gaussian, GIG(1/2), the scale step,
the Gaussian conditionals); whole samplers against grid quadrature of a 2-d posterior and
against each other on a small GP. Tolerances are 4 Monte-Carlo standard errors from ArviZ
(fixed seeds); distribution checks use KS / NumPyro goodness-of-fit tests at p > 1e-3.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.distributions.gof import auto_goodness_of_fit
from numpyro.infer import MCMC
from scipy import stats

import arviz as az
import ppl_bsvm
from tests._plane import plane_posterior
from ppl_bsvm import kernels, models
from ppl_bsvm.inference.mcmc import (
    BSVMGibbs,
    ConvergenceWarning,
    DivergenceWarning,
    InverseGaussian,
    check_finite,
    default_hyperpriors,
    chi2_1,
    gram_rows,
    sample_beta,
    sample_f,
    sample_gig_half,
    sample_lam,
    sample_line,
    sample_scale,
)
from ppl_bsvm.inference.mcmc import gibbs_kernel, line_moves, pcg, sweep
from ppl_bsvm.inference.mcmc._common import thin_draws

P_MIN = 1e-3
N_DRAWS = 20000


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _keys(seed, n):
    return jax.random.split(jax.random.key(seed), n)


# --- inverse Gaussian and GIG(1/2) ----------------------------------------------------------

@pytest.mark.parametrize("mean, shape", [(0.3, 1.0), (1.0, 1.0), (5.0, 2.0), (0.01, 0.5), (1e8, 1.0)])
def test_inverse_gaussian_matches_scipy(mean, shape):
    d = InverseGaussian(mean, shape)
    x = np.asarray(d.sample(jax.random.key(1), (N_DRAWS,)))
    ref = stats.invgauss(mu=mean / shape, scale=shape)
    assert np.all(x > 0) and np.all(np.isfinite(x))
    assert stats.kstest(x, ref.cdf).pvalue > P_MIN
    probe = np.quantile(x, [0.01, 0.3, 0.5, 0.9, 0.999])
    np.testing.assert_allclose(d.log_prob(probe), ref.logpdf(probe), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(d.cdf(probe), ref.cdf(probe), rtol=1e-7, atol=1e-12)
    assert auto_goodness_of_fit(x, np.exp(np.asarray(d.log_prob(x)))) > P_MIN
    if mean < 100:  # finite, moderate variance mean**3 / shape: sample moments
        se = np.sqrt(mean**3 / shape / N_DRAWS)
        assert abs(x.mean() - mean) < 5 * se


def test_inverse_gaussian_with_infinite_mean_is_levy():
    # the margin case 1/|r| = inf: the cancellation-free sampler returns the Levy limit
    x = np.asarray(InverseGaussian(jnp.inf, 2.0).sample(jax.random.key(2), (N_DRAWS,)))
    assert stats.kstest(x, stats.levy(scale=2.0).cdf).pvalue > P_MIN


@pytest.mark.parametrize("a, b", [(1.0, 0.25), (1.0, 4.0), (2.5, 1e-6), (0.7, 9.0)])
def test_gig_half_moments_and_law(a, b):
    lam = np.asarray(sample_gig_half(jax.random.key(3), a, b, (N_DRAWS,)))
    omega = np.sqrt(a * b)
    e_lam = np.sqrt(b / a) + 1 / a  # K_{3/2}/K_{1/2} = 1 + 1/omega
    var_lam = (b / a) * (1 + 3 / omega + 3 / omega**2) - e_lam**2
    e_inv = np.sqrt(a / b)
    var_inv = (a / b) / omega
    assert abs(lam.mean() - e_lam) < 5 * np.sqrt(var_lam / N_DRAWS)
    assert abs((1 / lam).mean() - e_inv) < 5 * np.sqrt(var_inv / N_DRAWS)
    ref = stats.geninvgauss(0.5, omega, scale=np.sqrt(b / a))  # numerical cdf: slow, 3000 draws
    assert stats.kstest(lam[:3000], ref.cdf).pvalue > P_MIN


def test_gig_half_at_b_zero_is_the_gamma_limit():
    lam = np.asarray(sample_gig_half(jax.random.key(4), 0.8, 0.0, (N_DRAWS,)))
    assert stats.kstest(lam, stats.gamma(0.5, scale=2 / 0.8).cdf).pvalue > P_MIN


@pytest.mark.parametrize("gamma", [1.0, 0.5])
def test_sample_lam_is_the_gig_conditional(gamma):
    margins = jnp.array([1.0, 0.7, 2.5, -1.0])  # r = 0 (exactly on the margin), 0.3, -1.5, 2
    draws = np.asarray(jax.vmap(lambda k: sample_lam(k, margins, gamma))(_keys(5, N_DRAWS)))
    for j, r in enumerate(np.abs(1 - np.asarray(margins))):
        if r == 0:
            assert stats.kstest(draws[:, j], stats.gamma(0.5, scale=2 / gamma).cdf).pvalue > P_MIN
        else:  # 1/lam ~ IG(1/r, gamma)
            ref = stats.invgauss(mu=1 / (r * gamma), scale=gamma)
            assert stats.kstest(1 / draws[:, j], ref.cdf).pvalue > P_MIN


def test_chi2_draws_are_independent_chi_square():
    # both halves of every Box-Muller pair are used: an odd count checks the split, and the
    # two squares of one pair (first and second half) must be uncorrelated
    x = np.asarray(chi2_1(jax.random.key(5), (N_DRAWS + 1,)))
    assert x.shape == (N_DRAWS + 1,) and np.all(x >= 0) and np.all(np.isfinite(x))
    assert stats.kstest(x, stats.chi2(1).cdf).pvalue > P_MIN
    half = (N_DRAWS + 2) // 2
    first, second = x[: half - 1], x[half : 2 * half - 1]
    assert abs(np.corrcoef(first, second)[0, 1]) < 5 / np.sqrt(half)
    assert stats.kstest(second, stats.chi2(1).cdf).pvalue > P_MIN


# --- the scale step -------------------------------------------------------------------------

def _scale_cdf(quad, margins, dim, gamma):
    """CDF of ``c^(dim-1) exp(-quad c^2/2 - 2 gamma sum max(0, 1 - c m))`` on a fine grid."""
    c = np.linspace(0.0, 8.0, 400001)[1:]
    log_h = ((dim - 1) * np.log(c) - 0.5 * quad * c**2
             - 2 * gamma * np.maximum(0, 1 - c[:, None] * margins[None, :]).sum(1))
    pdf = np.exp(log_h - log_h.max())
    assert pdf[-1] < 1e-12 * pdf.max()  # the grid holds the density
    cum = np.concatenate([[0.0], np.cumsum(0.5 * (pdf[1:] + pdf[:-1]) * np.diff(c))])
    return lambda x: np.interp(x, c, cum / cum[-1])


@pytest.mark.parametrize(
    "case",
    ["typical", "dim_one_mode_at_zero", "few_points"],
)
def test_sample_scale_matches_its_density(case):
    r = np.random.default_rng(11)
    if case == "typical":
        margins, quad, dim, gamma = r.normal(1.2, 1.0, 60), 30.0, 21, 1.0
    elif case == "dim_one_mode_at_zero":
        margins, quad, dim, gamma = -np.abs(r.normal(0.5, 0.3, 5)), 0.5, 1, 0.7
    else:
        margins, quad, dim, gamma = np.array([0.9, 1.4, -0.2]), 2.0, 2, 1.0
    fn = jax.jit(jax.vmap(lambda k: sample_scale(k, quad, jnp.asarray(margins), dim, gamma)))
    c, trials, _ = (np.asarray(v) for v in fn(_keys(6, 4000)))
    assert np.all(c > 0) and trials.max() <= 20 and trials.mean() < 2.0
    cdf = _scale_cdf(quad, margins, dim, gamma)
    assert stats.kstest(c, cdf).pvalue > P_MIN


# --- the line moves -------------------------------------------------------------------------

def _hinge_sum(t, c, d):
    """``sum_i max(0, c_i - t d_i)`` at every ``t``, exactly, from the sorted kinks
    ``c_i / d_i`` and suffix (``d_i > 0``) or prefix (``d_i < 0``) sums of ``c`` and ``d``:
    a piecewise linear function evaluated without the (len(t), len(c)) array."""
    out = np.full(t.shape, np.maximum(0.0, c[d == 0]).sum())
    for positive in (True, False):
        sel = d > 0 if positive else d < 0
        if not sel.any():
            continue
        kinks = c[sel] / d[sel]
        order = np.argsort(kinks)
        kinks, cs, ds = kinks[order], c[sel][order], d[sel][order]
        if positive:  # the term is positive for t < kink: sum over the kinks above t
            C = np.concatenate([np.cumsum(cs[::-1])[::-1], [0.0]])
            D = np.concatenate([np.cumsum(ds[::-1])[::-1], [0.0]])
            j = np.searchsorted(kinks, t, side="right")
        else:  # positive for t > kink: sum over the kinks below t
            C = np.concatenate([[0.0], np.cumsum(cs)])
            D = np.concatenate([[0.0], np.cumsum(ds)])
            j = np.searchsorted(kinks, t, side="left")
        out += C[j] - t * D[j]
    return out


def test_hinge_sum_is_the_sum_of_the_hinges():
    r = np.random.default_rng(5)
    c, d = r.normal(size=9), np.concatenate([r.normal(size=8), [0.0]])
    t = np.concatenate([np.linspace(-30.0, 30.0, 1001), c[:8] / d[:8]])
    direct = np.maximum(0.0, c[None, :] - t[:, None] * d[None, :]).sum(1)
    np.testing.assert_allclose(_hinge_sum(t, c, d), direct, rtol=1e-12, atol=1e-12)


_sample_lines = jax.jit(jax.vmap(sample_line, in_axes=(0,) + (None,) * 7))
"""Draws for many keys; the line's parameters are arguments, not constants of the program, so
that the cases of equal sizes share one compiled program."""


def _line_log_density(t, margins, dm, a, b, gamma):
    return -0.5 * a * t**2 - b * t - 2 * gamma * _hinge_sum(t, 1.0 - margins, dm)


def _line_cdf(margins, dm, a, b, gamma):
    """CDF of the line's density on a grid wide enough to hold it (checked)."""
    t = np.linspace(-150.0, 150.0, 1500001)
    log_h = _line_log_density(t, margins, dm, a, b, gamma)
    pdf = np.exp(log_h - log_h.max())
    assert pdf[0] < 1e-12 and pdf[-1] < 1e-12
    cum = np.concatenate([[0.0], np.cumsum(0.5 * (pdf[1:] + pdf[:-1]) * np.diff(t))])
    return lambda x: np.interp(x, t, cum / cum[-1])


@pytest.mark.parametrize(
    "case",
    ["unit_sd", "mode_far_left", "wide", "narrow", "flat_prior_kinked", "few_points",
     "start_off_mode", "start_too_fine"],
)
def test_sample_line_matches_its_density(case):
    """Exact draws along a line against quadrature: the grid search must cope with a mode
    far from where it starts, a spread far from its starting spacing, and a density made of
    a few kinks."""
    r = np.random.default_rng(31)
    n, a, b, gamma, center, width = 80, 0.05, 0.0, 1.0, 0.0, 1.5
    margins, dm = r.normal(1.0, 1.5, n), r.normal(0.0, 0.15, n)
    if case == "mode_far_left":
        b = 6.0
    elif case == "wide":
        dm, a = dm / 8.0, 0.002
    elif case == "narrow":
        dm = dm * 10.0
    elif case == "flat_prior_kinked":
        a, margins, dm = 1e-9, np.array([0.5, 1.2, 2.0, -0.3]), np.array([0.8, -0.6, 1.1, -0.9])
    elif case == "few_points":
        margins, dm, gamma = np.array([0.2, 1.7]), np.array([0.4, -0.3]), 0.7
    elif case == "start_off_mode":  # a poor prediction of the mode
        center = 9.0
    elif case == "start_too_fine":
        width = 1e-4
    t, trials, _ = (np.asarray(v) for v in _sample_lines(
        _keys(32, 4000), jnp.asarray(margins), jnp.asarray(dm), a, b, gamma, center, width))
    assert trials.max() <= 30 and trials.mean() < 2.0  # never a failed draw (129)
    assert stats.kstest(t, _line_cdf(margins, dm, a, b, gamma)).pvalue > P_MIN


@pytest.mark.parametrize("lower", [-np.inf, 0.0])
def test_tangent_envelope_lies_above_the_density(lower):
    """Each linear piece of the log envelope bounds the log density on its interval, and the
    intervals tile ``(lower, inf)``."""
    r = np.random.default_rng(33)
    for _ in range(20):
        margins, dm = r.normal(1.0, 1.5, 30), r.normal(0.0, 0.5, 30)
        a, b = r.uniform(0.01, 2.0), r.normal()
        t = np.sort(r.uniform(0.1 if lower == 0 else -4, 4, 3))
        h, slope = line_moves._line_eval(jnp.asarray(t), jnp.asarray(1.0 - margins),
                                         jnp.asarray(dm), a, b, 1.0)
        envelope = line_moves._tangent_envelope(jnp.asarray(t), h, slope, lower)
        lo, hi, at, ah, sl = (np.asarray(v) for v in envelope)
        assert lo[0] == lower and hi[-1] == np.inf
        np.testing.assert_array_equal(hi[:-1], lo[1:])
        assert np.all(hi >= lo)
        for j in range(lo.size):
            x = np.linspace(max(lo[j], -12.0), min(hi[j], 12.0), 201)
            bound = ah[j] + sl[j] * (x - at[j])
            assert np.all(bound >= _line_log_density(x, margins, dm, a, b, 1.0) - 1e-9)


# --- the Gaussian conditionals --------------------------------------------------------------

def _check_gaussian(draws, mean, cov):
    n = draws.shape[0]
    se_mean = np.sqrt(np.diag(cov) / n)
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * se_mean)
    emp = np.cov(draws.T)
    se_cov = np.sqrt((np.outer(np.diag(cov), np.diag(cov)) + cov**2) / n)
    assert np.all(np.abs(emp - cov) < 5 * se_cov)


def test_sample_beta_is_the_conditional_gaussian():
    r = np.random.default_rng(12)
    Z = r.normal(size=(15, 3))
    lam = r.gamma(1.0, 1.0, 15)
    s, gamma = 1.7, 0.8
    W = gamma / lam
    cov = np.linalg.inv(Z.T @ (W[:, None] * Z) + np.eye(3) / s**2)
    mean = cov @ Z.T @ (W * (1 + lam))
    draws = jax.vmap(lambda k: sample_beta(k, jnp.asarray(lam), jnp.asarray(Z), s, gamma))(_keys(7, N_DRAWS))
    _check_gaussian(np.asarray(draws), mean, cov)


def test_gram_rows_give_the_same_beta_draw():
    r = np.random.default_rng(16)
    Z = jnp.asarray(r.normal(size=(40, 5)))
    lam = jnp.asarray(r.gamma(1.0, 1.0, 40))
    w = 0.8 / np.asarray(lam)
    rows = gram_rows(Z)
    np.testing.assert_allclose(rows.R[:, -5:], Z)
    packed = np.asarray(w @ rows.R)
    np.testing.assert_allclose(packed[np.asarray(rows.index)], np.asarray(Z).T @ (w[:, None] * np.asarray(Z)), rtol=1e-12)
    key, prev = jax.random.key(17), jnp.asarray(r.normal(size=5))
    for alpha in (0.0, -0.9):
        plain = sample_beta(key, lam, Z, 1.3, 0.8, prev, alpha)
        fast = sample_beta(key, lam, Z, 1.3, 0.8, prev, alpha, rows)
        np.testing.assert_allclose(fast, plain, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("rank", [None, 4])
def test_sample_f_is_the_conditional_gaussian(rank):
    """By the Cholesky factor, and by conjugate gradients with a rank-4 preconditioner."""
    r = np.random.default_rng(13)
    X = r.normal(size=(8, 2))
    y = np.sign(r.normal(size=8))
    kern = kernels.RBF(lengthscale=1.2)
    K = np.asarray(kernels.gram(kern, kern.init_params(), jnp.asarray(X)))
    lam = r.gamma(1.0, 1.0, 8)
    gamma = 1.5
    N = np.diag(lam / gamma)
    A = K @ np.linalg.inv(K + N)
    mean, cov = A @ (y * (1 + lam)), K - A @ K
    Kj, L = jnp.asarray(K), jnp.linalg.cholesky(jnp.asarray(K))
    pre = None if rank is None else pcg.preconditioner(K, gamma, rank=rank)
    draws = jax.vmap(lambda k: sample_f(k, jnp.asarray(lam), Kj, L, jnp.asarray(y), gamma,
                                        pre=pre))(_keys(8, N_DRAWS))
    _check_gaussian(np.asarray(draws), mean, cov)


@pytest.mark.parametrize("rank", [None, 16])
def test_the_whitened_coordinates_carried_through_the_sweeps_stay_exact(rank):
    """The GP sweep carries ``w = L^{-1} f`` as ``white + L^T pending``, and ``quad = |w|^2``,
    through the scale step, the line moves and Adler's move instead of solving for them
    (``sweep._full``): after 200 overrelaxed sweeps of 4 chains, with the directions learned
    in warmup, ``w`` is the triangular solve's to a relative 1e-11 and ``quad`` is ``f^T K^-1
    f`` to 1e-11, on both solve paths."""
    from ppl_bsvm.inference.mcmc.gibbs_kernel import gibbs_init, gibbs_sample, gibbs_settings

    r = np.random.default_rng(21)
    n = 80
    X = r.normal(size=(n, 2))
    y = np.sign(X[:, 0] + 0.3 * r.normal(size=n))
    kern = kernels.RBF(lengthscale=0.8)
    K = jnp.asarray(kernels.gram(kern, kern.init_params(), jnp.asarray(X)))
    L = jnp.linalg.cholesky(K)
    pre = None if rank is None else pcg.preconditioner(K, 1.0, rank=rank, jitter=1e-6)
    data = sweep.GPData(K, jnp.asarray(y), jnp.asarray(1.0), chol_K=L, pcg=pre)
    settings = gibbs_settings(True, -0.5, 10, 100, dim=n)
    state = gibbs_init(jax.random.split(jax.random.key(3), 4), data, 10)
    step = jax.jit(lambda s: gibbs_sample(s, data, settings, True))
    for _ in range(200):
        state = step(state)
    f = state.z["f"]
    exact = jax.vmap(lambda v: jax.scipy.linalg.solve_triangular(L, v, lower=True))(f)
    scale = np.max(np.abs(np.asarray(exact)))
    w = state.white + state.pending @ L
    assert np.max(np.abs(np.asarray(w - exact))) <= 1e-11 * scale
    np.testing.assert_allclose(state.quad, np.sum(np.asarray(exact) ** 2, axis=1), rtol=1e-11)
    if rank is not None:
        assert np.all(np.asarray(state.cg_iters) > 0)


def _check_overrelaxed(prev, draws, mean, cov, alpha):
    """``draws`` keeps ``N(mean, cov)`` (the law of ``prev``) and lags it by ``alpha``."""
    _check_gaussian(draws, mean, cov)
    n = draws.shape[0]
    cross = (prev - mean).T @ (draws - mean) / n
    se_cross = np.sqrt(np.outer(np.diag(cov), np.diag(cov)) / n)
    assert np.all(np.abs(cross - alpha * cov) < 5 * se_cross)


@pytest.mark.parametrize("alpha", [-0.9, 0.5])
def test_overrelaxed_beta_move_keeps_the_conditional(alpha):
    r = np.random.default_rng(14)
    Z = r.normal(size=(15, 3))
    lam = r.gamma(1.0, 1.0, 15)
    W = 1.0 / lam
    cov = np.linalg.inv(Z.T @ (W[:, None] * Z) + np.eye(3))
    mean = cov @ Z.T @ (W * (1 + lam))
    prev = r.multivariate_normal(mean, cov, N_DRAWS)
    draws = jax.vmap(lambda k, b: sample_beta(k, jnp.asarray(lam), jnp.asarray(Z), 1.0, 1.0, b, alpha))(
        _keys(9, N_DRAWS), jnp.asarray(prev)
    )
    _check_overrelaxed(prev, np.asarray(draws), mean, cov, alpha)


def test_overrelaxed_f_move_keeps_the_conditional():
    r = np.random.default_rng(15)
    X = r.normal(size=(6, 2))
    y = np.sign(r.normal(size=6))
    kern = kernels.RBF(lengthscale=1.2)
    K = np.asarray(kernels.gram(kern, kern.init_params(), jnp.asarray(X)))
    lam = r.gamma(1.0, 1.0, 6)
    A = K @ np.linalg.inv(K + np.diag(lam))
    mean, cov = A @ (y * (1 + lam)), K - A @ K
    prev = r.multivariate_normal(mean, cov, N_DRAWS)
    Kj, L = jnp.asarray(K), jnp.linalg.cholesky(jnp.asarray(K))
    draws = jax.vmap(lambda k, f: sample_f(k, jnp.asarray(lam), Kj, L, jnp.asarray(y), 1.0, f, -0.8))(
        _keys(10, N_DRAWS), jnp.asarray(prev)
    )
    _check_overrelaxed(prev, np.asarray(draws), mean, cov, -0.8)


# --- whole samplers: a 2-d linear posterior by grid quadrature -------------------------------

@pytest.fixture(scope="module")
def plane():
    return plane_posterior()


class _LazyFits(dict):
    """Fits made on first use: under xdist a module fixture is built once per worker, and a
    worker should only pay for the fits its tests read."""

    def __init__(self, makers):
        super().__init__()
        self._makers = makers

    def __missing__(self, name):
        self[name] = self._makers[name]()
        return self[name]


@pytest.fixture(scope="module")
def plane_fits(plane):
    X, y = plane[:2]
    common = dict(model="linear", intercept=False, num_samples=2000, num_warmup=500, num_chains=4)
    return _LazyFits({
        "gibbs": lambda: ppl_bsvm.fit(X, y, method="gibbs", seed=1, **common),
        # the default collapses its kept sweeps; the full sweep with line moves beside it
        "gibbs_full": lambda: ppl_bsvm.fit(X, y, method="gibbs", collapse=False, seed=8,
                                           **common),
        "gibbs_textbook": lambda: ppl_bsvm.fit(X, y, method="gibbs", scale_step=False,
                                               directions=0, seed=2, **common),
        "gibbs_overrelaxed": lambda: ppl_bsvm.fit(X, y, method="gibbs", overrelax=-0.9,
                                                  directions=0, seed=6, **common),
        # line moves alone, along two fixed directions that are neither orthogonal nor scaled
        "gibbs_fixed_lines": lambda: ppl_bsvm.fit(X, y, method="gibbs", scale_step=False,
                                                  directions=[[0.9, 0.2], [-0.1, 0.3]], seed=7,
                                                  **common),
        "nuts": lambda: ppl_bsvm.fit(X, y, method="nuts", seed=3, **common),
        "ess": lambda: ppl_bsvm.fit(X, y, method="ess", seed=9, **common),
        "mclmc": lambda: ppl_bsvm.fit(X, y, method="mclmc", seed=10, **common),
    })


@pytest.mark.parametrize(
    "sampler",
    ["gibbs", "gibbs_full", "gibbs_textbook", "gibbs_overrelaxed", "gibbs_fixed_lines", "nuts",
     "ess", "mclmc"],
)
def test_linear_2d_posterior_matches_grid_quadrature(plane, plane_fits, sampler):
    mean, sd = plane[2:]
    fit = plane_fits[sampler]
    s = az.summary(fit.idata, var_names="beta", round_to="none")
    assert np.all(np.abs(s["mean"].values - mean) < 4 * s["mcse_mean"].values)
    assert np.all(np.abs(s["sd"].values - sd) < 4 * s["mcse_sd"].values)
    assert s["r_hat"].max() < 1.01
    assert fit.stop_reason == "draws" and fit.n_iter == 2500
    assert fit.posterior["beta"].shape == (4, 2000, 2)
    assert fit.idata.attrs["rhat_max"] == pytest.approx(s["r_hat"].max(), abs=1e-12)


def test_gibbs_fit_face(plane, plane_fits):
    fit = plane_fits["gibbs"]
    stats_ = fit.idata.sample_stats
    assert set(stats_.data_vars) >= {"lp", "scale", "scale_trials", "n_floored", "line_trials",
                                     "line_failed"}
    assert int(stats_["n_floored"].sum()) == 0
    assert 1.0 <= float(stats_["scale_trials"].mean()) < 2.0
    assert 2.0 <= float(stats_["line_trials"].mean()) < 4.0  # two directions, < 2 proposals each
    assert int(stats_["line_failed"].sum()) == 0
    assert fit.timings["mcmc"] > 0 and fit.timings["compile"] >= 0
    assert fit.options["scale_step"] is True and fit.options["num_chains"] == 4
    # the recorded lp is the marginal log posterior of the stored draw
    b = fit.posterior["beta"].values[1, 7]
    X, y = plane[:2]
    lp = -0.5 * b @ b - 2 * np.maximum(0, 1 - y * (X @ b)).sum()
    assert float(stats_["lp"].values[1, 7]) == pytest.approx(lp, rel=1e-10)


def test_mclmc_fit_face(plane, plane_fits):
    """Adjusted MCLMC's fields: each chain keeps the step size its tuning found, the step is
    tuned to the target acceptance, trajectories average ``num_integration_steps`` steps, and
    ``lp`` is the whitened log posterior of the stored draw."""
    fit = plane_fits["mclmc"]
    stats_ = fit.idata.sample_stats
    assert set(stats_.data_vars) >= {"lp", "acceptance_rate", "diverging", "n_steps",
                                     "step_size"}
    step = stats_["step_size"].values
    assert np.all(step == step[:, :1]) and np.all(step > 0)
    # 8000 draws of an acceptance probability in [0, 1]: the mean's standard error is < 0.006
    assert abs(float(stats_["acceptance_rate"].mean()) - 0.9) < 0.05
    # lengths uniform on 1..31 (mean 16, sd 9): over 8000 draws a standard error of 0.1
    assert abs(float(stats_["n_steps"].mean()) - 16) < 0.5
    assert int(stats_["diverging"].sum()) == 0
    assert fit.n_iter == 2500 and fit.options["num_warmup"] == 500
    b = fit.posterior["beta"].values[2, 11]
    X, y = plane[:2]
    lp = -0.5 * b @ b - 2 * np.maximum(0, 1 - y * (X @ b)).sum()  # prior_scale 1: v = beta
    assert float(stats_["lp"].values[2, 11]) == pytest.approx(lp, rel=1e-10)


def test_mclmc_without_a_usable_tuning_keeps_its_start_and_warns(plane, monkeypatch):
    """Too short a warmup (a NaN step size at num_warmup=4 once left the chains where they
    started) or a tuner's answer that is not finite: the chains run with the starting step
    size, which moves them, and the fit says so."""
    from ppl_bsvm.inference.mcmc import mclmc

    X, y = plane[:2]
    common = dict(model="linear", intercept=False, num_samples=50, num_chains=2, seed=0)
    start = float(mclmc._starting_params(2, mclmc.TRAJECTORY_STEPS, np.float64).step_size)
    with pytest.warns(ppl_bsvm.ConvergenceWarning, match=r"num_warmup=4 is below the 30"):
        fit = ppl_bsvm.fit(X, y, method="mclmc", num_warmup=4, **common)
    stats_ = fit.idata.sample_stats
    assert np.all(stats_["step_size"].values == pytest.approx(start))
    assert float(stats_["acceptance_rate"].mean()) > 0.5
    assert np.unique(fit.posterior["beta"].values[0, :, 0]).size > 10  # the chain moves

    def nan_tuner(*args, params, **kwargs):
        return args[3], params._replace(step_size=params.step_size * np.nan), 0

    monkeypatch.setattr(mclmc, "adjusted_mclmc_find_L_and_step_size", nan_tuner)
    with pytest.warns(ppl_bsvm.ConvergenceWarning, match="not finite"):
        fit = ppl_bsvm.fit(X, y, method="mclmc", num_warmup=31, **common)
    assert np.all(fit.idata.sample_stats["step_size"].values == pytest.approx(start))


def test_learned_directions_are_the_posterior_principal_axes(plane_fits):
    """After warmup, ``sum_j v_j v_j^T`` is the covariance of the last window's 250 draws
    (shrunk a little): it matches the covariance of the kept draws to within that window's
    sampling error (relative error about sqrt(2 / ESS), ESS ~ 100 per chain)."""
    fit = plane_fits["gibbs"]
    V = np.asarray(fit.checkpoint.last_state.moves.V)  # (chain, k, d)
    assert V.shape == (4, 2, 2)
    draws = fit.posterior["beta"].values.reshape(-1, 2)
    cov = np.cov(draws.T)
    for chain in range(4):
        learned = V[chain].T @ V[chain]
        assert np.linalg.norm(learned - cov) < 0.3 * np.linalg.norm(cov)
        # sorted by variance, largest first
        assert np.linalg.norm(V[chain, 0]) >= np.linalg.norm(V[chain, 1])


def test_direction_schedule(plane):
    """Directions start as the prior-scaled axes and are learned when a warmup window closes
    (the last one at the end of warmup), with a fresh window each time."""
    X, y = plane[:2]
    kernel = BSVMGibbs(models.linear_bsvm)
    start = kernel.init(jax.random.split(jax.random.key(2), 2), 40, None, (X, y.astype(float)),
                        {"prior_scale": 2.0})
    np.testing.assert_array_equal(start.moves.V, np.broadcast_to(2.0 * np.eye(2), (2, 2, 2)))
    mcmc = MCMC(kernel, num_warmup=40, num_samples=3, num_chains=2, chain_method="vectorized",
                progress_bar=False)
    mcmc.run(jax.random.key(2), X, y.astype(float), prior_scale=2.0)
    learned = mcmc.last_state
    assert np.all(np.asarray(learned.it) == 43)
    assert not np.allclose(learned.moves.V, 2.0 * np.eye(2))
    assert np.all(np.asarray(learned.moves.count) == 0)  # the window was closed and reset
    np.testing.assert_allclose(
        learned.moves.dm, np.einsum("ckd,nd->ckn", learned.moves.V, y[:, None] * X), rtol=1e-12
    )


def test_a_chain_started_at_zero_recovers(plane):
    """At ``beta = 0`` the scale's orbit is a point (the step is a no-op, and its grid search
    runs away): the next sweeps must start their searches afresh, not from that one."""
    X, y = plane[:2]
    mcmc = MCMC(BSVMGibbs(models.linear_bsvm), num_warmup=20, num_samples=50, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(4), X, y.astype(float), init_params={"beta": jnp.zeros((2, 2))},
             extra_fields=("scale_trials", "line_failed"))
    extra = mcmc.get_extra_fields()
    assert int(np.max(extra["scale_trials"])) < 20 and int(np.sum(extra["line_failed"])) == 0


def test_nuts_fit_face(plane_fits):
    fit = plane_fits["nuts"]
    ss = fit.idata.sample_stats
    assert {"diverging", "acceptance_rate", "n_steps", "tree_depth", "energy", "lp", "step_size"} <= set(ss.data_vars)
    assert ss["diverging"].shape == (4, 2000) and int(ss["diverging"].sum()) == 0
    assert fit.trace["diverging"].shape == (4, 2000)


def test_predictions_of_the_linear_fit(plane, plane_fits):
    X, y = plane[:2]
    fit = plane_fits["gibbs"]
    Xt = np.array([[0.5, 0.1], [-1.0, 2.0], [0.2, -0.3]])
    p = fit.predict_proba(Xt)
    assert p.shape == (3,) and np.all((p > 0) & (p < 1))
    np.testing.assert_array_equal(fit.predict(Xt), np.where(p >= 0.5, 1, -1))
    betas = thin_draws(fit.posterior["beta"].values, 1000)  # the predictor's 1000 draws
    mean, var = fit.predict_latent(Xt)
    np.testing.assert_allclose(mean, (betas @ Xt.T).mean(0), rtol=1e-12)
    np.testing.assert_allclose(var, (betas @ Xt.T).var(0), rtol=1e-10)
    sign = fit.predict_proba(Xt, link="sign")  # P(f* > 0) over the draws, exactly
    np.testing.assert_allclose(sign, ((betas @ Xt.T) > 0).mean(0))


# --- whole samplers: Gibbs against NUTS on a small GP ----------------------------------------

@pytest.fixture(scope="module")
def curve():
    r = np.random.default_rng(21)
    X = np.sort(r.uniform(-3, 3, 25))[:, None]
    y = np.where(np.sin(1.5 * X[:, 0]) + 0.4 * r.normal(size=25) > 0, 1, -1)
    return X, y, kernels.RBF(lengthscale=1.0, variance=1.5)


@pytest.fixture(scope="module")
def curve_fits(curve):
    X, y, kern = curve
    common = dict(model="gp", kernel=kern, num_samples=2000, num_warmup=500, num_chains=4)
    return _LazyFits({
        # the default (half overrelaxed at this kernel: default_overrelax); plain Gibbs
        # beside it
        "gibbs": lambda: ppl_bsvm.fit(X, y, method="gibbs", seed=4, **common),
        "gibbs_plain": lambda: ppl_bsvm.fit(X, y, method="gibbs", overrelax=0.0, seed=7,
                                            **common),
        "gibbs_cg": lambda: _fit_by_cg(X, y, seed=8, **common),
        "nuts": lambda: ppl_bsvm.fit(X, y, method="nuts", seed=5, **common),
        # elliptical slice moves are small where the likelihood is sharp (an ESS of 0.015 per
        # draw here): ten times the draws, thinned to the others' number
        "ess": lambda: ppl_bsvm.fit(X, y, method="ess", seed=6, **{
            **common, "num_samples": 20000, "num_warmup": 2000, "thinning": 10}),
        "mclmc": lambda: ppl_bsvm.fit(X, y, method="mclmc", seed=11, **common),
    })


def _fit_by_cg(X, y, **kwargs):
    """The Gibbs fit with ``f | lam`` solved by conjugate gradients (``mcmc.pcg``), which the
    rank rule keeps for larger problems: forced here with rank 8."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pcg, "pcg_rank", lambda *args: 8)
        fit = ppl_bsvm.fit(X, y, method="gibbs", **kwargs)
    iters = fit.idata.sample_stats["cg_iters"].values
    assert iters.min() > 0 and int(fit.idata.sample_stats["cg_fallback"].sum()) == 0
    return fit


def _summary(fit, var):
    return az.summary(fit.idata, var_names=var, round_to="none")


@pytest.mark.parametrize("gibbs", ["gibbs", "gibbs_plain", "gibbs_cg", "ess", "mclmc"])
def test_gibbs_and_nuts_agree_on_a_small_gp(curve_fits, gibbs):
    g, n = _summary(curve_fits[gibbs], "f"), _summary(curve_fits["nuts"], "f")
    se_mean = np.hypot(g["mcse_mean"].values, n["mcse_mean"].values)
    se_sd = np.hypot(g["mcse_sd"].values, n["mcse_sd"].values)
    assert np.all(np.abs(g["mean"].values - n["mean"].values) < 4 * se_mean)
    assert np.all(np.abs(g["sd"].values - n["sd"].values) < 4 * se_sd)
    assert g["r_hat"].max() < 1.01 and n["r_hat"].max() < 1.01


def test_gp_predictions(curve, curve_fits):
    X, y, _ = curve
    Xt = np.linspace(-3.5, 3.5, 9)[:, None]
    pg = curve_fits["gibbs"].predict_proba(Xt)
    pn = curve_fits["nuts"].predict_proba(Xt)
    assert np.all(np.abs(pg - pn) < 0.02)
    fit = curve_fits["gibbs"]
    # at the training inputs the conditional mean k*^T K^-1 f_s is f_s itself (up to jitter)
    f = thin_draws(fit.posterior["f"].values, 1000)
    mean, var = fit.predict_latent(X)
    np.testing.assert_allclose(mean, f.mean(0), atol=1e-4)
    np.testing.assert_allclose(var, f.var(0), rtol=1e-3, atol=1e-5)
    mean_far, var_far = fit.predict_latent(np.array([[50.0]]))  # far away: the prior
    assert abs(mean_far[0]) < 1e-12 and var_far[0] == pytest.approx(1.5)


# --- failure modes --------------------------------------------------------------------------

def test_divergences_are_counted_and_warned(plane):
    X, y = plane[:2]
    with pytest.warns(DivergenceWarning, match=r"NUTS had (\d+) divergent") as record, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = ppl_bsvm.fit(X, y, model="linear", method="nuts", augmented=True, intercept=False,
                           num_samples=300, num_warmup=300, num_chains=1,
                           target_accept_prob=0.6, seed=0)
    count = int(fit.idata.sample_stats["diverging"].sum())
    message = str(next(w.message for w in record if w.category is DivergenceWarning))
    assert count > 0 and f"NUTS had {count} divergent" in message and "augmented=False" in message


def test_a_nan_draw_stops_the_sampler_and_names_the_site(plane, monkeypatch):
    X, y = plane[:2]
    real = sweep.sample_beta

    def broken(key, lam, Z, *args):
        beta = real(key, lam, Z, *args)
        return jnp.where(jax.random.uniform(key) < 0.01, jnp.nan, beta)  # a rare numerical failure

    monkeypatch.setattr(sweep, "sample_beta", broken)
    with pytest.raises(FloatingPointError, match=r"non-finite value\(s\) in site 'beta'"):
        ppl_bsvm.fit(X, y, model="linear", method="gibbs", num_samples=200, num_warmup=10,
                     num_chains=2, intercept=False, collapse=False)  # sample_beta every sweep


def test_check_finite_names_chain_and_draw():
    good = np.zeros((2, 5, 3))
    bad = good.copy()
    bad[1, 3, 2] = np.inf
    check_finite({"f": good})
    with pytest.raises(FloatingPointError, match=r"site 'f' \(first at chain 1, draw 3\)"):
        check_finite({"beta": good, "f": bad}, sampler="X")


def test_nuts_without_a_finite_starting_point_is_a_value_error(plane):
    X, y = plane[:2]
    with pytest.raises(ValueError, match="no starting point with a finite log density"):
        ppl_bsvm.fit(X, y, model="linear", method="nuts", prior_scale=1e-200,
                     num_samples=10, num_warmup=10, num_chains=1)


class _NegativeKernel(kernels.RBF):
    def K(self, params, X1, X2):
        return -super().K(params, X1, X2)


def test_gibbs_refuses_a_kernel_matrix_that_is_not_positive_definite(plane):
    X, y = plane[:2]
    with pytest.raises(ValueError, match="not positive definite"):
        ppl_bsvm.fit(X, y, model="gp", method="gibbs", kernel=_NegativeKernel(lengthscale=1.0),
                     num_samples=10, num_warmup=10)


def test_the_gp_sampler_factors_its_kernel_matrix_once(curve, monkeypatch):
    """The check that ``K`` is positive definite, the chains' factor and the predictor's are
    one factorisation (``kernel_factor``; at 10^4 points each took 5-7 s), and NumPy makes
    none."""
    from ppl_bsvm.inference.mcmc import _common

    shapes = []
    factor = _common._checked_cholesky
    monkeypatch.setattr(_common, "_checked_cholesky",
                        lambda K: shapes.append(K.shape) or factor(K))

    def numpy_factor(*args, **kwargs):
        raise AssertionError("K factorised again, by NumPy")

    monkeypatch.setattr(np.linalg, "cholesky", numpy_factor)
    X, y, kern = curve
    # four chains: the programs of curve_fits' Gibbs run (one compilation for both)
    fit = ppl_bsvm.fit(X, y, model="gp", method="gibbs", kernel=kern, num_samples=5,
                       num_warmup=5, num_chains=4, seed=0)
    assert shapes == [(len(X), len(X))]
    assert np.all(np.isfinite(fit.predict_proba(X)))
    # the number of line-move directions the default chose is recorded with the options
    assert fit.options["directions"] == gibbs_kernel.gp_directions(len(X)) > 0


def test_the_gp_samplers_factor_and_predictor_solve_on_every_core_from_the_rules_size(
        curve, monkeypatch):
    """``K``'s factorisation and the predictor's solves with every kept draw follow the
    library's thread rule (``PARALLEL_MIN_SIZE`` rows and more: every core; 7.0 -> 4.7 s and
    6.3 -> 3.3 s at 10^4 points on 2 cores): the rule's size lowered to this problem's, each
    runs with every core's BLAS threads, and the caller's count is as it was after the fit."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from ppl_bsvm import _runtime
    from ppl_bsvm.inference.mcmc import _common

    def blas():
        return {lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"}

    seen = {}
    factor, solve = _common._checked_cholesky, _common.cho_solve
    monkeypatch.setattr(_common, "_checked_cholesky",
                        lambda K: seen.setdefault("factor", blas()) and factor(K))
    monkeypatch.setattr(_common, "cho_solve",
                        lambda *a: seen.setdefault("predictor", blas()) and solve(*a))
    X, y, kern = curve
    monkeypatch.setattr(_runtime, "PARALLEL_MIN_SIZE", len(X))
    with threadpool_limits(1, user_api="blas"):
        fit = ppl_bsvm.fit(X, y, model="gp", method="gibbs", kernel=kern, num_samples=5,
                           num_warmup=5, num_chains=1, seed=0)
        assert blas() == {1}
    cores = _runtime.available_cores()
    assert seen == {"factor": {cores}, "predictor": {cores}}
    assert np.all(np.isfinite(fit.predict_proba(X)))


@pytest.mark.parametrize(
    "method, options, message",
    [
        ("gibbs", {"chain_method": "threads"}, "chain_method"),
        ("gibbs", {"num_chains": 0}, "num_chains"),
        ("gibbs", {"thinning": 0}, "thinning"),
        ("gibbs", {"num_samples": 5, "thinning": 10}, "thinning"),
        ("gibbs", {"scale_step": 1}, "scale_step"),
        ("gibbs", {"overrelax": -1.0}, "overrelax"),
        ("gibbs", {"overrelax": "yes"}, "overrelax"),
        ("gibbs", {"collapse": "yes"}, "collapse must be True or False"),
        ("gibbs", {"directions": -1}, "directions must be >= 0"),
        ("gibbs", {"directions": "some"}, "directions must be a number"),
        ("gibbs", {"directions": True}, "directions must be a number"),
        ("gibbs", {"directions": 4}, "exceeds the dimension 3"),
        ("gibbs", {"directions": [[1.0, 0.0]]}, "2 columns"),
        ("gibbs", {"directions": [[0.0, 0.0, 0.0]]}, "no zero row"),
        ("gibbs", {"directions": [[np.nan, 1.0, 0.0]]}, "finite"),
        ("nuts", {"target_accept_prob": 1.5}, "target_accept_prob"),
        ("nuts", {"store_lam": True}, "augmented=True"),
        ("nuts", {"max_predictive_draws": 0}, "max_predictive_draws"),
    ],
)
def test_bad_options(plane, method, options, message):
    X, y = plane[:2]
    with pytest.raises(ValueError, match=message):
        ppl_bsvm.fit(X, y, model="linear", method=method, **options)


def test_default_hyperpriors():
    kern = kernels.RBF(lengthscale=(0.5, 2.0), ard=True, variance=3.0)
    priors = default_hyperpriors(kern, kern.init_params())
    assert set(priors) == {"lengthscale", "variance"}
    assert priors["lengthscale"].event_shape == (2,)
    np.testing.assert_allclose(np.exp(priors["lengthscale"].base_dist.loc), [0.5, 2.0])
    assert float(priors["variance"].loc) == pytest.approx(np.log(3.0))


def test_bad_hyperpriors(curve):
    X, y, kern = curve
    with pytest.raises(ValueError, match="unknown hyperparameter"):
        ppl_bsvm.fit(X, y, model="gp", method="nuts", kernel=kern,
                     hyperpriors={"period": dist.LogNormal(0, 1)})
    with pytest.raises(ValueError, match="hyperpriors must be"):
        ppl_bsvm.fit(X, y, model="gp", method="nuts", kernel=kern, hyperpriors="flat")


# --- the kernel as a plain NumPyro MCMCKernel ------------------------------------------------

def test_bsvm_gibbs_under_numpyro_mcmc(plane, curve):
    X, y, kern = curve
    mcmc = MCMC(BSVMGibbs(models.gp_bsvm), num_warmup=50, num_samples=100, num_chains=2,
                chain_method="vectorized", progress_bar=False)
    mcmc.run(jax.random.key(0), X, y.astype(float), kernel=kern, extra_fields=("lam", "lp"))
    assert mcmc.get_samples(group_by_chain=True)["f"].shape == (2, 100, 25)
    assert mcmc.get_extra_fields(group_by_chain=True)["lam"].shape == (2, 100, 25)
    idata = az.from_numpyro(mcmc)  # needs the kernel's `model`
    assert idata.posterior["f"].shape == (2, 100, 25)
    # one chain at a time, started from given values
    X2, y2 = plane[:2]
    seq = MCMC(BSVMGibbs(models.linear_bsvm, scale_step=False, directions=0), num_warmup=0,
               num_samples=3, num_chains=2, chain_method="sequential", progress_bar=False)
    start = jnp.array([[0.5, -0.5], [2.0, 1.0]])
    seq.run(jax.random.key(1), X2, y2.astype(float), init_params={"beta": start},
            extra_fields=("lp",))
    assert seq.get_samples(group_by_chain=True)["beta"].shape == (2, 3, 2)
    assert np.all(np.isfinite(seq.get_extra_fields()["lp"]))


def test_the_gp_samplers_default_overrelaxation_follows_ks_spectrum(curve, plane):
    """The engine and the kernel resolve the same default from ``K``'s spectrum
    (``gibbs_kernel.default_overrelax``): strong overrelaxation where at most
    ``WEAK_SHARE_MAX`` of ``K``'s trace lies in eigenvalues at most ``1 / gamma`` (the curve's
    kernel at twice its variance: 0.6 %), half where more does (the curve's own: 2.2 %);
    an explicit value wins, and the linear sampler does not overrelax."""
    from ppl_bsvm.inference.mcmc.gibbs_kernel import (GP_OVERRELAX, GP_STRONG_OVERRELAX,
                                                      WEAK_SHARE_MAX, default_overrelax)

    X, y, kern = curve
    strong = kernels.RBF(lengthscale=1.0, variance=3.0)
    for kernel, expected in ((strong, GP_STRONG_OVERRELAX), (kern, GP_OVERRELAX)):
        with jax.enable_x64(True):
            K = kernels.gram(kernel, kernel.init_params(X), jnp.asarray(X, float), 1e-6)
            share = pcg.weak_share(pcg.spectrum(K, 1e-6))
        assert (share <= WEAK_SHARE_MAX) == (expected == GP_STRONG_OVERRELAX)
        assert default_overrelax(False, share) == expected
        # four chains: the programs of curve_fits' Gibbs run (one compilation for all)
        fit = ppl_bsvm.fit(X, y, model="gp", method="gibbs", kernel=kernel, num_samples=5,
                           num_warmup=5, num_chains=4, seed=0)
        assert fit.options["overrelax"] == expected
    sampler = BSVMGibbs(models.gp_bsvm)
    assert sampler.overrelax is None  # chosen from the data in init
    with jax.enable_x64(True):
        MCMC(sampler, num_warmup=5, num_samples=5, progress_bar=False).run(
            jax.random.key(0), X, y, kernel=strong, jitter=1e-6)
    assert sampler.overrelax == GP_STRONG_OVERRELAX
    assert default_overrelax(False) == GP_OVERRELAX  # the spectrum unknown
    assert BSVMGibbs(models.gp_bsvm, overrelax=-0.7).overrelax == -0.7
    fit = ppl_bsvm.fit(X, y, model="gp", method="gibbs", kernel=kern, num_samples=5,
                       num_warmup=5, num_chains=4, seed=0, overrelax=GP_STRONG_OVERRELAX)
    assert fit.options["overrelax"] == GP_STRONG_OVERRELAX
    assert BSVMGibbs(models.linear_bsvm).overrelax == 0.0
    fit = ppl_bsvm.fit(*plane[:2], model="linear", method="gibbs", num_samples=5,
                       num_warmup=5, num_chains=4, intercept=False, seed=0, overrelax=None)
    assert fit.options["overrelax"] == 0.0


def test_bsvm_gibbs_refuses_other_models():
    with pytest.raises(ValueError, match="linear_bsvm and .*gp_bsvm"):
        BSVMGibbs(models.sparse_gp_bsvm)
    X = np.zeros((3, 1))
    mcmc = MCMC(BSVMGibbs(models.linear_bsvm), num_warmup=1, num_samples=1, progress_bar=False)
    with pytest.raises(ValueError, match="labels in"):
        mcmc.run(jax.random.key(0), X, np.array([0.0, 1.0, 1.0]))


def test_short_chains_are_flagged(plane):
    X, y = plane[:2]
    with pytest.warns(ConvergenceWarning, match=r"R-hat 1\.\d+ > 1.01 in site 'beta'"):
        fit = ppl_bsvm.fit(X, y, model="linear", method="gibbs", intercept=False, num_samples=15,
                           num_warmup=0, num_chains=4, scale_step=False, directions=0,
                           prior_scale=5.0, seed=3)
    assert fit.idata.attrs["rhat_max"] > 1.01 and fit.idata.attrs["ess_bulk_min"] < 45


def test_store_lam_and_thinning(plane):
    X, y = plane[:2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)  # 2 x 50 draws: short on purpose
        fit = ppl_bsvm.fit(X, y, model="linear", method="gibbs", intercept=False, num_samples=200,
                           num_warmup=50, num_chains=2, thinning=4, store_lam=True)
    lam = fit.posterior["lam"]
    assert lam.dims == ("chain", "draw", "obs") and lam.shape == (2, 50, 30)
    assert float(lam.min()) > 0
    assert fit.posterior["beta"].shape == (2, 50, 2)
    # the kept sweeps are collapsed (two learned directions span the plane) and draw lam
    # given each kept beta: 1/lam_i ~ IG(1/|1 - y_i x_i beta|, 1), independently, so the
    # probability integral transforms of all 3000 are uniform
    beta = fit.posterior["beta"].values.reshape(-1, 2)
    r = np.abs(1.0 - (y[:, None] * (X @ beta.T)).T)
    u = stats.invgauss(mu=1.0 / r).cdf(1.0 / lam.values.reshape(-1, 30))
    assert stats.kstest(u.ravel(), "uniform").pvalue > P_MIN


def test_sweeps_collapse_only_where_the_directions_span_the_space():
    from ppl_bsvm.inference.mcmc.gibbs_kernel import gibbs_settings

    def collapsed(directions, dim=3, warmup=100, collapse=True):
        return gibbs_settings(True, 0.0, directions, warmup, dim=dim,
                              collapse=collapse).collapsed

    assert collapsed(3) and not collapsed(3, collapse=False)
    assert not collapsed(2)  # two directions in three dimensions
    assert not collapsed(np.eye(3))  # fixed directions: not learned
    assert not collapsed(3, warmup=4)  # too short a warmup to learn them
    assert not collapsed(0)
    # lam is drawn in every sweep that is not collapsed, whatever draw_lam says
    assert gibbs_settings(True, 0.0, 2, 100, dim=3, collapse=True, draw_lam=False).draw_lam
    assert not gibbs_settings(True, 0.0, 3, 100, dim=3, collapse=True, draw_lam=False).draw_lam


def test_collapsed_sweeps_without_lam_keep_it_and_match_the_full_sampler(plane, plane_fits):
    """``draw_lam=False``: the kept draws of beta are those of the collapsed sampler with
    lam (same keys), and lam stays at its value at the end of warmup."""
    X, y = plane[:2]
    runs = {}
    for draw_lam in (True, False):
        mcmc = MCMC(BSVMGibbs(models.linear_bsvm, draw_lam=draw_lam), num_warmup=40,
                    num_samples=20, num_chains=2, chain_method="vectorized", progress_bar=False)
        mcmc.run(jax.random.key(9), X, y.astype(float), extra_fields=("lam", "n_floored"))
        runs[draw_lam] = (np.asarray(mcmc.get_samples(group_by_chain=True)["beta"]),
                          np.asarray(mcmc.get_extra_fields(group_by_chain=True)["lam"]))
    np.testing.assert_allclose(runs[False][0], runs[True][0], rtol=1e-12)
    stale, fresh = runs[False][1], runs[True][1]
    assert np.all(stale == stale[:, :1]) and not np.all(fresh == fresh[:, :1])


# --- NUTS extras: hyperparameters, the sparse model ------------------------------------------

@pytest.mark.slow
def test_nuts_with_hyperpriors_uses_each_draws_kernel(curve):
    X, y, kern = curve
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DivergenceWarning)
        # 2 x 100 draws, trees of at most 16 steps: what is checked is how predictions use
        # the draws, not convergence
        warnings.simplefilter("ignore", ConvergenceWarning)
        fit = ppl_bsvm.fit(X, y, model="gp", method="nuts", kernel=kernels.RBF(), seed=6,
                           hyperpriors={"lengthscale": dist.LogNormal(0.0, 0.5)},
                           num_samples=100, num_warmup=100, num_chains=2, max_tree_depth=4)
    ell = fit.posterior["lengthscale"].values.ravel()
    assert ell.shape == (200,) and np.all(ell > 0) and np.ptp(ell) > 0
    assert float(fit.hyperparameters["lengthscale"]) == pytest.approx(np.median(ell))
    # predictions: average over draws of N(k*^T K^-1 f_s, ...) with draw s's own lengthscale
    Xt = np.array([[0.3], [2.0]])
    f = fit.posterior["f"].values.reshape(200, -1)

    def draw_mean(ls, fs):  # one program for the 200 draws, not 200 x 3 eager operations
        params = {"log_lengthscale": jnp.log(ls), "log_variance": jnp.array(0.0)}
        K = kernels.gram(fit.kernel, params, jnp.asarray(X))
        Ks = fit.kernel.K(params, jnp.asarray(X), jnp.asarray(Xt))
        return Ks.T @ jnp.linalg.solve(K, fs)

    means = jax.jit(jax.vmap(draw_mean))(jnp.asarray(ell), jnp.asarray(f))
    np.testing.assert_allclose(fit.predict_latent(Xt)[0], np.mean(means, 0), rtol=1e-6, atol=1e-8)


@pytest.mark.slow
def test_sparse_nuts_with_inducing_points_at_the_data_matches_the_gp(curve, curve_fits):
    """The sparse model with ``Z = X`` is the GP: NUTS on ``u`` against Gibbs on ``f``, 4 x
    1000 draws (issue 31: half the earlier 2000). Measured: the means within 1.7 combined MCSEs
    (1.5 with 2000), R-hat 1.0007, probabilities within 0.005."""
    X, y, kern = curve
    fit = ppl_bsvm.fit(X, y, model="sparse_gp", method="nuts", kernel=kern, inducing=X,
                       num_samples=1000, num_warmup=500, num_chains=4, seed=7)
    assert fit.posterior["u"].dims == ("chain", "draw", "inducing")
    s, g = _summary(fit, "u"), _summary(curve_fits["gibbs"], "f")
    se = np.hypot(s["mcse_mean"].values, g["mcse_mean"].values)
    assert np.all(np.abs(s["mean"].values - g["mean"].values) < 4 * se)
    assert s["r_hat"].max() < 1.01
    Xt = np.array([[-1.0], [0.4]])
    assert np.all(np.abs(fit.predict_proba(Xt) - curve_fits["gibbs"].predict_proba(Xt)) < 0.02)


def test_convergence_diagnostics_are_arviz_rank_normalised_ones():
    """rank_rhat and bulk_ess (computed without importing ArviZ in a fit) against ArviZ's
    rhat and ess, on AR(1) chains with a shifted chain and tied values, antithetic chains
    (negative autocorrelation, as overrelaxed Gibbs gives: NumPyro's estimate went negative
    there) and a constant coordinate."""
    import arviz as az

    from ppl_bsvm.inference.mcmc._common import bulk_ess, rank_rhat, tail_ess

    r = np.random.default_rng(0)
    for chains, draws, rho in [(4, 1000, 0.5), (4, 1000, 0.95), (2, 300, 0.8), (4, 100, 0.0),
                               (4, 1000, -0.9), (4, 500, -0.99), (1, 500, -0.7), (4, 7, 0.2)]:
        x = np.zeros((chains, draws, 4))
        e = r.standard_normal((chains, draws, 4))
        for t in range(1, draws):
            x[:, t] = rho * x[:, t - 1] + e[:, t]
        x[1 % chains] += 0.3
        x[..., 2] = np.round(x[..., 2], 1)
        x[..., 3] = 2.0
        if chains > 1:
            np.testing.assert_allclose(rank_rhat(x[..., :3]), np.asarray(az.rhat(x[..., :3])),
                                       rtol=1e-10)
        ess = bulk_ess(x)
        np.testing.assert_allclose(ess, np.asarray(az.ess(x)), rtol=1e-10)
        np.testing.assert_allclose(tail_ess(x[..., :3]), np.asarray(
            az.ess(x[..., :3], method="tail", prob=(0.05, 0.95))), rtol=1e-10)
        assert np.all(ess > 0) and np.all(ess <= chains * draws * np.log10(chains * draws))


def test_average_ranks_are_scipys_with_ties_averaged():
    """The vectorised ranks behind rank normalisation equal ``scipy.stats.rankdata``'s
    exactly: without ties; with ties in pairs only (the folded draws ``|x - median|`` of an
    even number of draws, where the two middle draws tie; pairs beside pairs too); with runs of
    three or more (NUTS repeats states; rounded draws tie often)."""
    from scipy.stats import rankdata

    from ppl_bsvm.inference.mcmc._common import _average_ranks

    r = np.random.default_rng(3)
    x = r.standard_normal((240, 30))
    folded = np.abs(x - np.median(x, axis=0))
    pairs = np.repeat(r.standard_normal((6, 4)), 2, axis=0)  # 1 1 2 2 3 3 ...: adjacent pairs
    cases = [x, x[:2, :3], folded, pairs, np.round(x, 0), np.round(x[:7, :5], 1)]
    cases[-2][:, 0] = cases[-1][:, 0] = 1.5  # a constant column: one run of ties

    def longest_run(a):  # the most equal values in a row of a sorted column
        tied = np.diff(np.sort(a, axis=0), axis=0) == 0
        run = best = np.zeros(a.shape[1], int)
        for row in tied:
            run = np.where(row, run + 1, 0)
            best = np.maximum(best, run)
        return best.max() + 1

    # the paths: no ties, pairs only, runs of three or more
    assert [min(longest_run(c), 3) for c in cases] == [1, 1, 2, 2, 3, 3]
    for case in cases:
        np.testing.assert_array_equal(_average_ranks(case), rankdata(case, axis=0))


@pytest.mark.parametrize("name", ["gibbs", "gibbs_plain"])
def test_a_sampler_fits_diagnostics_are_arviz_ones_on_the_sites_the_user_sees(curve_fits, name):
    """idata.attrs' R-hat, bulk and tail ESS of the overrelaxed (antithetic: the default) and
    the plain GP Gibbs sampler equal ArviZ's on f; the augmentation variables are left out."""
    import arviz as az

    from ppl_bsvm.inference.mcmc._common import convergence_summary

    fit = curve_fits[name]
    f = fit.posterior["f"].values
    ess_all = np.asarray(az.ess(f))
    tail = np.asarray(az.ess(f, method="tail", prob=(0.05, 0.95)))
    assert fit.idata.attrs["ess_bulk_min"] == pytest.approx(float(ess_all.min()), rel=1e-8)
    assert fit.idata.attrs["ess_tail_min"] == pytest.approx(float(tail.min()), rel=1e-8)
    assert fit.idata.attrs["rhat_max"] == pytest.approx(float(np.asarray(az.rhat(f)).max()),
                                                        rel=1e-8)
    if name == "gibbs":
        assert ess_all.max() > f.shape[0] * f.shape[1]  # antithetic: more than the draws
    stuck = np.repeat(np.arange(4.0)[:, None, None], f.shape[1], axis=1)  # 4 stuck chains
    summary = convergence_summary({"f": f, "lam": stuck + 1e-3 * np.abs(f[..., :1])})
    assert summary["rhat_max"] == fit.idata.attrs["rhat_max"]
    assert summary["rhat_worst_site"] == "f"
