"""SVGP against a dense variational GP classifier solved independently, and the full GPC."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, stats
from scipy.special import log_ndtr

import ppl_bsvm
from ppl_bsvm import kernels
from ppl_bsvm.baselines._likelihoods import gauss_hermite
from ppl_bsvm.baselines.svgp import SVGPData, SVGPStatic, elbo, step, svgp_init
from ppl_bsvm.inference.mvn import Natural, from_natural

KERNEL = kernels.RBF(lengthscale=1.5, variance=2.0)


@pytest.fixture(scope="module")
def problem():
    r = np.random.default_rng(7)
    X = r.standard_normal((30, 2))
    y = np.where(X @ np.array([1.5, -1.0]) + 0.7 * r.standard_normal(30) > 0, 1.0, -1.0)
    return X, y, 1.5 * r.standard_normal((20, 2))


def dense_vi(K, y, nodes=20):
    """The KL-optimal Gaussian q(f) = N(mu, (K^-1 + diag(lam))^-1) of the full probit GPC.

    Optimised by L-BFGS over (L^-1 mu, log lam) with analytic gradients: a different
    parametrisation and optimiser from SVGP's natural gradients on q(u).
    """
    n = len(y)
    x, w = np.polynomial.hermite.hermgauss(nodes)
    x, w = np.sqrt(2.0) * x, w / np.sqrt(np.pi)
    L = np.linalg.cholesky(K)
    K_inv = np.linalg.inv(K)
    logdet_K = np.linalg.slogdet(K)[1]

    def neg_elbo(p):
        mu, lam = L @ p[:n], np.exp(p[n:])
        S = np.linalg.inv(K_inv + np.diag(lam))
        s = np.diag(S)
        z = y[:, None] * (mu[:, None] + np.sqrt(s)[:, None] * x)
        r = np.exp(stats.norm.logpdf(z) - log_ndtr(z))
        g1 = (y[:, None] * r) @ w
        g2 = -0.5 * (r * (r + z)) @ w
        kl = 0.5 * (np.trace(K_inv @ S) + mu @ K_inv @ mu - n + logdet_K - np.linalg.slogdet(S)[1])
        value = (log_ndtr(z) @ w).sum() - kl
        g_mu = g1 - K_inv @ mu
        g_lam = -(S**2).T @ g2 - 0.5 * (s - np.diag(S @ K_inv @ S))
        return -value, -np.concatenate([L.T @ g_mu, g_lam * lam])

    res = optimize.minimize(neg_elbo, np.zeros(2 * n), jac=True, method="L-BFGS-B",
                            options={"maxiter": 20000, "ftol": 1e-16, "gtol": 1e-11})
    return L @ res.x[:n], -res.fun


def test_svgp_with_all_points_inducing_is_the_full_variational_gpc(problem):
    X, y, Xt = problem
    fit = ppl_bsvm.fit(X, y, method="svgp", kernel=KERNEL, inducing_points=X, step_size=1.0,
                       tol=1e-12, max_iter=500)
    assert fit.converged and fit.model == "sparse_gp"
    with jax.enable_x64(True):
        params = KERNEL.init_params(X)
        K = np.asarray(kernels.gram(KERNEL, params, X))
        K_star = np.asarray(KERNEL.K(params, X, Xt))
    mu, bound = dense_vi(K, y)
    # equal up to the jitter of Kmm (1e-6 relative), which SVGP also carries into kappa
    assert float(fit.idata["approximation"]["elbo"]) == pytest.approx(bound, abs=1e-5)
    np.testing.assert_allclose(fit.idata["approximation"]["f_mean"].values, mu, atol=1e-4)
    mean, _ = fit.predict_latent(Xt)
    np.testing.assert_allclose(mean, K_star.T @ np.linalg.solve(K, mu), atol=5e-4)
    # and the full GP classifier (EP, same prior and likelihood) predicts nearly the same:
    # variational and EP posteriors differ slightly (measured: 5e-4 in the latent mean here)
    ep = ppl_bsvm.fit(X, y, method="gpc", kernel=KERNEL)
    np.testing.assert_allclose(mean, ep.predict_latent(Xt)[0], atol=5e-3)
    np.testing.assert_allclose(fit.predict_proba(Xt), ep.predict_proba(Xt), atol=5e-3)


def test_minibatch_bound_is_unbiased(heart):
    X, y = heart
    kernel = kernels.RBF(lengthscale=3.0)
    with jax.enable_x64(True):
        params = kernel.init_params(X)
        Z = jnp.asarray(X[::27])
        data = SVGPData(jnp.asarray(X), jnp.asarray(y), *(jnp.asarray(v) for v in (0.5, 100.0, 0.0, 0.01)))
        static = SVGPStatic(kernel, "probit", len(y), 32, False, False, 20, 1e-6)
        state = svgp_init(static, None, data, (params, Z))
        # move q(u) away from the prior so that the likelihood term matters
        state = state._replace(eta1=jnp.linspace(-1.0, 1.0, Z.shape[0]))
        mu, Sigma = from_natural(Natural(state.eta1, state.eta2))
        nodes, weights = gauss_hermite(20)
        exact = float(elbo(kernel, "probit", params, Z, mu, Sigma, data.X, data.y, 1.0, nodes, weights, 1e-6))
        keys = jax.random.split(jax.random.key(3), 400)
        estimates = np.asarray(jax.jit(jax.vmap(lambda k: step(static, k, state, data)[1].elbo))(keys))
    # the n/|b|-weighted minibatch sum estimates the full bound without bias
    assert abs(estimates.mean() - exact) < 4 * estimates.std() / np.sqrt(len(keys))
    assert estimates.std() > 0


def test_minibatches_approach_the_full_batch_solution(heart):
    X, y = heart
    kernel = kernels.RBF(lengthscale=3.0)
    full = ppl_bsvm.fit(X, y, method="svgp", kernel=kernel, num_inducing=20, step_size=1.0,
                        tol=1e-10, max_iter=300)
    mini = ppl_bsvm.fit(X, y, method="svgp", kernel=kernel, num_inducing=20, batch_size=64,
                        step_size=0.5, decay=1.0, delay=20.0, max_iter=1000, tol=0.0)
    assert mini.stop_reason == "max_iter" and mini.n_iter == 1000
    # same inducing points (same seed); with steps decaying to 0.01 the remaining minibatch
    # noise moves probabilities by a few hundredths (measured: 0.025 at most) and the bound
    # by a tenth of a nat (measured: 0.08)
    np.testing.assert_allclose(
        mini.idata["approximation"]["inducing_points"], full.idata["approximation"]["inducing_points"]
    )
    np.testing.assert_allclose(mini.predict_proba(X), full.predict_proba(X), atol=0.06)
    gap = float(full.idata["approximation"]["elbo"]) - float(mini.idata["approximation"]["elbo"])
    assert -1e-6 < gap < 0.5


def test_learning_hyperparameters_raises_the_bound(toy2d):
    X, y = toy2d
    start = kernels.RBF(lengthscale=0.2)  # far too short for these data
    fixed = ppl_bsvm.fit(X, y, method="svgp", kernel=start, num_inducing=10, step_size=1.0,
                         max_iter=200)
    learned = ppl_bsvm.fit(X, y, method="svgp", kernel=start, num_inducing=10, step_size=1.0,
                           max_iter=200, learn_hyperparameters=True, learn_inducing=True,
                           adam_lr=0.05)
    assert learned.hyperparameters["lengthscale"] > 0.5
    assert float(learned.idata["approximation"]["elbo"]) > float(fixed.idata["approximation"]["elbo"]) + 5
    assert not np.allclose(learned.idata["approximation"]["inducing_points"],
                           fixed.idata["approximation"]["inducing_points"])
    u = learned.posterior["u"]
    assert u.dims == ("chain", "draw", "inducing") and u.shape == (1, 1000, 10)
