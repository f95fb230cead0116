"""The shared Gaussian algebra of K + diag(noise) against dense NumPy linear algebra."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_bsvm import kernels
from ppl_bsvm.inference import gaussian


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


@pytest.fixture
def system():
    r = np.random.default_rng(0)
    X = r.normal(size=(7, 2))
    kern = kernels.RBF(lengthscale=1.3, variance=2.0)
    K = np.asarray(kernels.gram(kern, kern.init_params(), jnp.asarray(X)))
    noise = r.gamma(2.0, 0.5, 7)
    return K, noise, r.normal(size=7)


def test_mean_covariance_and_prediction_match_dense_algebra(system):
    K, noise, t = system
    fac = gaussian.factor(jnp.asarray(K), jnp.asarray(noise))
    A = K @ np.linalg.inv(K + np.diag(noise))
    mean, a = gaussian.posterior_mean(jnp.asarray(K), fac, jnp.asarray(t))
    np.testing.assert_allclose(mean, A @ t, rtol=1e-10)
    np.testing.assert_allclose(gaussian.posterior_cov(jnp.asarray(K), fac), K - A @ K, atol=1e-10)
    np.testing.assert_allclose(gaussian.posterior_cov_diag(jnp.asarray(K), fac), np.diag(K - A @ K), atol=1e-10)


@pytest.mark.parametrize("infinite_site", [False, True])
def test_sample_posterior_has_the_conditional_moments(system, infinite_site):
    """Matheron draws: mean and covariance K - K (K + N)^-1 K within 5 Monte-Carlo se; a site
    of infinite noise (zero precision) simply drops out."""
    K, noise, _ = system
    if infinite_site:
        noise = noise.copy()
        noise[3] = np.inf
    keep = np.isfinite(noise)
    Kk = K[np.ix_(keep, keep)]
    cov = K - K[:, keep] @ np.linalg.solve(Kk + np.diag(noise[keep]), K[keep, :])
    mean = np.linspace(-1.0, 1.0, 7)
    fac = gaussian.factor(jnp.asarray(K), jnp.asarray(noise))
    n_draws = 40000
    draws = np.asarray(gaussian.sample_posterior(jax.random.key(3), jnp.asarray(K), fac, jnp.asarray(mean), n_draws))
    assert draws.shape == (n_draws, 7) and np.all(np.isfinite(draws))
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * sd / np.sqrt(n_draws))
    se_cov = np.sqrt((np.outer(sd**2, sd**2) + cov**2) / n_draws)
    assert np.all(np.abs(np.cov(draws.T) - cov) < 5 * se_cov)
