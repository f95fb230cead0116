"""The closed-form ELBO (spec section 3) against quadrature, oracles and its own stationarity."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

import ppl_bsvm
from ppl_bsvm import kernels
from ppl_bsvm.inference import gaussian
from ppl_bsvm.inference.vi import elbo


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def test_collapsed_oracle_values():
    # spec section 3: (m, s) = (1, 1) gives -1.0 and (0.3, 0.5) gives -1.695 (y = +1)
    assert float(elbo.collapsed_data_term(1.0, 1.0, 1.0)) == pytest.approx(-1.0, abs=1e-12)
    assert float(elbo.collapsed_data_term(0.3, 0.5, 1.0)) == pytest.approx(-1.695, abs=5e-4)
    # the label enters through y m only; the temperature scales the whole term
    assert float(elbo.collapsed_data_term(-0.3, 0.5, -1.0)) == pytest.approx(-1.695, abs=5e-4)
    assert float(elbo.collapsed_data_term(0.3, 0.5, 1.0, gamma=2.5)) == pytest.approx(
        2.5 * float(elbo.collapsed_data_term(0.3, 0.5, 1.0)), rel=1e-12)


def _log_p_y_lam(f, lam, y, gamma):
    """log N(1 + lam; y f, lam / gamma): the augmented pseudo-likelihood (spec section 1)."""
    return stats.norm.logpdf(1.0 + lam, loc=y * f, scale=np.sqrt(lam / gamma))


def _q_lam(alpha, gamma):
    """GIG(1/2, gamma, gamma alpha) as scipy's geninvgauss(p, sqrt(a b), scale=sqrt(b / a))."""
    return stats.geninvgauss(0.5, gamma * np.sqrt(alpha), scale=np.sqrt(alpha))


@pytest.mark.parametrize("m, s, y, alpha, gamma", [
    (0.3, 0.5, 1.0, 0.8, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0),
    (-0.7, 0.2, 1.0, 3.0, 1.0),
    (0.4, 0.3, -1.0, 0.5, 2.0),
])
def test_data_term_against_brute_force_integration_over_lam_and_f(m, s, y, alpha, gamma):
    """E_{q(f) q(lam)}[log p(y, lam | f) - log q(lam)] by quadrature over lam (GIG) and f."""
    q = _q_lam(alpha, gamma)
    # inner integral over lam on a log grid (lam = e^t), outer over f by Gauss-Hermite
    t = np.linspace(-25.0, 6.0, 20001)
    lam = np.exp(t)
    weight = q.pdf(lam) * lam  # d lam = lam dt
    log_q = q.logpdf(lam)
    gh_x, gh_w = np.polynomial.hermite_e.hermegauss(30)  # probabilists' Hermite: N(0, 1)
    gh_w = gh_w / gh_w.sum()
    f = m + np.sqrt(s) * gh_x
    integrand = weight * (_log_p_y_lam(f[:, None], lam, y, gamma) - log_q)
    brute = float(gh_w @ np.trapezoid(integrand, t, axis=1))
    closed = float(elbo.data_term(m, s, y, alpha, gamma))
    assert closed == pytest.approx(brute, abs=1e-7)
    # and the GIG moments the derivation uses
    assert q.expect(lambda lam: 1 / lam) == pytest.approx(alpha**-0.5, rel=1e-7)
    assert q.mean() == pytest.approx(np.sqrt(alpha) + 1 / gamma, rel=1e-7)


@pytest.mark.parametrize("m, s", [(0.3, 0.5), (1.4, 0.05), (-0.8, 2.0)])
def test_collapsed_is_the_best_alpha_and_below_the_expected_log_likelihood(m, s):
    grid = np.linspace(0.05, 10, 4000)
    best = max(float(elbo.data_term(m, s, 1.0, a)) for a in grid)
    collapsed = float(elbo.collapsed_data_term(m, s, 1.0))
    assert best <= collapsed + 1e-12 and best == pytest.approx(collapsed, abs=1e-5)
    # Jensen: never above E_q[log L(y | f)] = E_q[-2 max(0, 1 - f)]
    exact = integrate.quad(lambda f: -2 * max(0.0, 1 - f) * stats.norm.pdf(f, m, np.sqrt(s)),
                           m - 12 * np.sqrt(s), m + 12 * np.sqrt(s), points=[1.0])[0]
    assert collapsed <= exact
    # and the smoothed hinge tends to the hinge as s -> 0
    assert float(elbo.collapsed_data_term(m, 1e-12, 1.0)) == pytest.approx(-2 * max(0, 1 - m), abs=1e-5)


def test_elbo_is_a_lower_bound_on_the_log_evidence_1d():
    """Linear model with one feature: log Z by quadrature over beta; the VI optimum is below it."""
    r = np.random.default_rng(3)
    x = r.standard_normal(25)
    y = np.where(x + 0.6 * r.standard_normal(25) > 0, 1.0, -1.0)
    s = 1.5

    def log_joint(b):
        return -2 * np.sum(np.maximum(0, 1 - y * x * b)) + stats.norm.logpdf(b, 0, s)

    grid = np.linspace(-8, 12, 40001)
    lj = np.array([log_joint(b) for b in grid])
    log_z = np.log(np.trapezoid(np.exp(lj - lj.max()), grid)) + lj.max()
    fit = ppl_bsvm.fit(x[:, None], y, model="linear", method="vi", intercept=False,
                       prior_scale=s, tol=1e-14, max_iter=2000)
    bound = fit.trace["elbo"][-1]
    assert bound < log_z
    assert log_z - bound < 1.0  # the gap is KL(q || posterior) plus the augmentation's loss
    # the bound's own trace never decreases
    assert np.all(np.diff(fit.trace["elbo"]) >= -1e-10)


def _toy_gp(n=25, seed=0):
    r = np.random.default_rng(seed)
    X = r.standard_normal((n, 2))
    y = np.where(X[:, 0] - 0.5 * X[:, 1] + 0.5 * r.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def test_regression_identity_gp_and_linear():
    """max_q L(q, alpha) = log N(t; 0, K + N) + sum log(2 pi N) / 2 (elbo.py docstring)."""
    X, y = _toy_gp()
    k = kernels.RBF(lengthscale=1.3, variance=0.9)
    K = kernels.gram(k, k.init_params(X), jnp.asarray(X))
    alpha = jnp.asarray(np.random.default_rng(1).uniform(0.1, 3, len(y)))
    for gamma in (1.0, 0.6):
        noise = jnp.sqrt(alpha) / gamma
        fac = gaussian.factor(K, noise)
        mu, _ = gaussian.posterior_mean(K, fac, y * (1 + jnp.sqrt(alpha)))
        Sigma = gaussian.posterior_cov(K, fac)
        dense = elbo.gp_elbo(mu, Sigma, K, y, gamma, alpha)
        assert float(dense) == pytest.approx(float(elbo.regression_bound(K, y, alpha, gamma)), rel=1e-10)
        # ...and q* is the maximiser: moving the mean or shrinking the covariance lowers it
        assert float(elbo.gp_elbo(mu + 0.01, Sigma, K, y, gamma, alpha)) < float(dense)
        assert float(elbo.gp_elbo(mu, 0.98 * Sigma, K, y, gamma, alpha)) < float(dense)
    Xd = jnp.asarray(np.c_[X, np.ones(len(y))])
    P = (Xd.T * (0.6 / jnp.sqrt(alpha))) @ Xd + jnp.eye(3) / 0.7**2
    Sig = jnp.linalg.inv(P)
    mu = Sig @ (Xd.T @ (0.6 * y * (1 + 1 / jnp.sqrt(alpha))))
    assert float(elbo.linear_elbo(mu, Sig, Xd, y, 0.7, 0.6, alpha)) == pytest.approx(
        float(elbo.linear_regression_bound(Xd, y, alpha, 0.7, 0.6)), rel=1e-10)


def _grad_norms(grads):
    return [float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(grads)]


def test_grad_vanishes_at_the_linear_fixed_point(heart):
    X, y = heart
    fit = ppl_bsvm.fit(X, y, model="linear", method="vi", gamma=0.8, tol=1e-15, max_iter=500)
    approx = fit.idata["approximation"]
    mu, Sigma, alpha = (jnp.asarray(approx[v].values) for v in ("beta_mean", "beta_cov", "alpha"))
    Xd = jnp.asarray(np.c_[X, np.ones(len(y))])
    f = lambda mu, S, a: elbo.linear_elbo(mu, S, Xd, y, 1.0, 0.8, a)  # noqa: E731
    at_fixed = _grad_norms(jax.jit(jax.grad(f, argnums=(0, 1, 2)))(mu, Sigma, alpha))
    at_prior = _grad_norms(jax.jit(jax.grad(f, argnums=(0, 1, 2)))(0 * mu, jnp.eye(14), alpha))
    # measured: 2.5e-6 at the fixed point (floating-point floor: more sweeps do not lower it)
    # against 580 at the prior, in the same units
    assert max(at_fixed) < 1e-7 * max(at_prior)


def test_grad_vanishes_at_the_bbsvm_fixed_point():
    X, y = _toy_gp(30)
    kernel = kernels.RBF(lengthscale=1.5, variance=2.0)
    fit = ppl_bsvm.fit(X, y, model="gp", method="vi", kernel=kernel, tol=1e-15, max_iter=500,
                       jitter=1e-4, num_draws=10)
    K = kernels.gram(kernel, fit.kernel_params, jnp.asarray(X), 1e-4)
    alpha = jnp.asarray(fit.idata["approximation"]["alpha"].values)
    # rebuild q(f) densely from the fixed point's alpha; its mean/variances are the stored ones
    alpha_q = fit.state.alpha
    fac = gaussian.factor(K, jnp.sqrt(alpha_q))
    mu, _ = gaussian.posterior_mean(K, fac, y * (1 + jnp.sqrt(alpha_q)))
    Sigma = gaussian.posterior_cov(K, fac)
    np.testing.assert_allclose(mu, fit.idata["approximation"]["f_mean"].values, atol=1e-10)
    f = lambda mu, S, a: elbo.gp_elbo(mu, S, K, y, 1.0, a)  # noqa: E731
    grads = _grad_norms(jax.jit(jax.grad(f, argnums=(0, 1, 2)))(mu, Sigma, alpha))
    assert max(grads) < 1e-6
    assert float(f(mu, Sigma, alpha)) == pytest.approx(float(fit.idata["approximation"]["elbo"]), rel=1e-10)


def test_grad_vanishes_at_the_sparse_fixed_point():
    """Whitened sparse ELBO: stationary in (m_v, chol S, alpha) at the full-batch fixed point."""
    from ppl_bsvm.inference.inducing import inducing_prior, project_whitened

    X, y = _toy_gp(40, seed=2)
    kernel = kernels.RBF(lengthscale=1.2)
    Z = X[:12]
    fit = ppl_bsvm.fit(X, y, model="sparse_gp", method="svi", kernel=kernel, inducing=Z,
                       batch_size=40, learning_rate=1.0, tol=1e-15, max_iter=400, elbo_every=1,
                       num_draws=10)
    st = fit.state
    prec = 0.5 * (st.prec + st.prec.T)
    m_v = jnp.linalg.solve(prec, st.eta1)
    chol_S = jnp.linalg.cholesky(jnp.linalg.inv(prec))
    params = kernel.init_params(X)
    prior = inducing_prior(kernel, params, jnp.asarray(Z))
    proj = project_whitened(kernel, params, prior, jnp.asarray(X))
    alpha = jnp.asarray(fit.idata["approximation"]["alpha"].values)
    f = lambda m, L, a: elbo.sparse_elbo(m, L, proj.kappa, proj.ktilde, y, 1.0, a)  # noqa: E731
    g_m, g_L, g_a = jax.jit(jax.grad(f, argnums=(0, 1, 2)))(m_v, chol_S, alpha)
    # only the lower triangle of the Cholesky factor is a parameter
    assert max(_grad_norms([g_m, jnp.tril(g_L), g_a])) < 1e-6
    assert float(jax.jit(f)(m_v, chol_S, alpha)) == pytest.approx(float(fit.idata["approximation"]["elbo"]), rel=1e-9)


def test_hyperparameter_gradient_matches_finite_differences():
    X, y = _toy_gp(30, seed=4)
    kernel = kernels.RBF(lengthscale=1.1, variance=1.7, ard=True)
    params = kernel.init_params(X)
    alpha = jnp.asarray(np.random.default_rng(5).uniform(0.2, 2.5, len(y)))

    @jax.jit  # one program, not hundreds of eagerly compiled operations
    def objective(p):
        return elbo.regression_bound(kernels.gram(kernel, p, jnp.asarray(X)), y, alpha, 0.9)

    grads = jax.grad(objective)(params)
    for name in ("log_lengthscale", "log_variance"):
        flat = np.atleast_1d(np.asarray(params[name], dtype=float))
        for j in range(flat.size):
            h = 1e-5
            up, down = flat.copy(), flat.copy()
            up[j] += h
            down[j] -= h
            shape = np.shape(params[name])
            fd = (objective({**params, name: jnp.asarray(up.reshape(shape))})
                  - objective({**params, name: jnp.asarray(down.reshape(shape))})) / (2 * h)
            assert float(np.atleast_1d(grads[name])[j]) == pytest.approx(float(fd), rel=1e-6, abs=1e-8)


def test_sparse_hyperparameter_gradient_matches_finite_differences():
    """The S-BSVM hyperparameter objective, w.r.t. log-parameters and inducing locations."""
    from ppl_bsvm.inference.vi import sbsvm

    X, y = _toy_gp(30, seed=6)
    kernel = kernels.RBF(lengthscale=1.4)
    params = kernel.init_params(X)
    Z = jnp.asarray(X[:6] + 0.1)
    data = sbsvm.SBSVMData(jnp.asarray(X), jnp.asarray(y), 30, 1.0, 1e-6, 30 / 10, 30)
    config = sbsvm.Config(kernel, None, 10, 1, learn=True, learn_inducing=True)
    r = np.random.default_rng(7)
    mean = jnp.asarray(r.standard_normal(6))
    A = r.standard_normal((6, 6))
    chol_P = jnp.linalg.cholesky(jnp.asarray(A @ A.T + 6 * np.eye(6)))
    idx = jnp.arange(3, 13)

    @jax.jit  # one program, not hundreds of eagerly compiled operations
    def objective(hp):
        return sbsvm._hyper_objective(hp, config, None, data, idx, mean, chol_P)

    grads = jax.grad(objective)((params, Z))
    h = 1e-6
    fd_ell = (objective(({**params, "log_lengthscale": params["log_lengthscale"] + h}, Z))
              - objective(({**params, "log_lengthscale": params["log_lengthscale"] - h}, Z))) / (2 * h)
    assert float(grads[0]["log_lengthscale"]) == pytest.approx(float(fd_ell), rel=1e-6)
    for i, j in [(0, 0), (3, 1), (5, 0)]:
        fd = (objective((params, Z.at[i, j].add(h))) - objective((params, Z.at[i, j].add(-h)))) / (2 * h)
        assert float(grads[1][i, j]) == pytest.approx(float(fd), rel=1e-5, abs=1e-8)
