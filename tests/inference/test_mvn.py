"""The one home of Gaussian KLs and natural parameters (inference/mvn.py): every form against
the textbook formula with dense inverses, on random inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_bsvm.compare import distances
from ppl_bsvm.inference import mvn
from ppl_bsvm.inference.inducing import InducingPrior, kl_to_prior
from ppl_bsvm.inference.mvn import from_natural, to_natural


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _spd(rng, k):
    A = rng.standard_normal((k, k))
    return A @ A.T + 0.5 * np.eye(k)


def _brute(m0, S0, m1, S1):
    """``KL(N(m0, S0) || N(m1, S1))`` with an explicit inverse and log-determinants."""
    S1inv = np.linalg.inv(S1)
    d = m1 - m0
    return 0.5 * (np.trace(S1inv @ S0) + d @ S1inv @ d - len(m0)
                  + np.linalg.slogdet(S1)[1] - np.linalg.slogdet(S0)[1])


@pytest.mark.parametrize("k", [1, 3, 8])
def test_every_kl_form_is_the_textbook_formula(rng, k):
    m0, m1 = rng.standard_normal(k), rng.standard_normal(k)
    S0, S1 = _spd(rng, k), _spd(rng, k)
    L0, L1 = np.linalg.cholesky(S0), np.linalg.cholesky(S1)
    zero, eye = np.zeros(k), np.eye(k)
    as_jax = lambda *a: [jnp.asarray(x) for x in a]  # noqa: E731
    # covariance factors, general and against N(0, I)
    assert float(mvn.kl(*as_jax(m0, L0, m1, L1))) == pytest.approx(_brute(m0, S0, m1, S1),
                                                                  rel=1e-10)
    assert float(mvn.kl(*as_jax(m0, L0), chol1=jnp.asarray(L1))) == pytest.approx(
        _brute(m0, S0, zero, S1), rel=1e-10)
    assert float(mvn.kl(*as_jax(m0, L0))) == pytest.approx(_brute(m0, S0, zero, eye), rel=1e-10)
    # the precision form against N(0, s^2 I): q(beta) of linear VI, S-BSVM's q(v) at s = 1
    P = np.linalg.inv(S0)
    LP = jnp.linalg.cholesky(jnp.asarray(P))
    for log_s in (0.0, -0.7, 1.3):
        assert float(mvn.kl_precision(jnp.asarray(m0), LP, log_s)) == pytest.approx(
            _brute(m0, S0, zero, np.exp(2 * log_s) * eye), rel=1e-9)
    # S-BSVM's q(v) held as natural parameters (eta1, P)
    mean, chol = mvn.gaussian_from_precision(jnp.asarray(P @ m0), jnp.asarray(P))
    np.testing.assert_allclose(mean, m0, rtol=1e-8, atol=1e-10)
    factor = np.asarray(mvn.cov_factor(chol))
    np.testing.assert_allclose(factor @ factor.T, S0, rtol=1e-8, atol=1e-10)
    # SVGP's q(u) against N(0, K_mm), and the compare module on NumPy arrays
    prior = InducingPrior(jnp.zeros((k, 1)), jnp.asarray(S1), jnp.asarray(L1))
    assert float(kl_to_prior(*as_jax(m0, S0), prior)) == pytest.approx(
        _brute(m0, S0, zero, S1), rel=1e-10)
    assert distances.gaussian_kl(m0, S0, m1, S1) == pytest.approx(_brute(m0, S0, m1, S1), rel=1e-10)


def test_kl_is_differentiable_like_the_formula(rng):
    """The dense reference ELBOs take jax.grad through mvn.kl:
    d KL / d mu0 = S1^{-1} (mu0 - mu1)."""
    k = 4
    m0, m1, S1 = rng.standard_normal(k), rng.standard_normal(k), _spd(rng, k)
    L0, L1 = np.linalg.cholesky(_spd(rng, k)), np.linalg.cholesky(S1)
    grad = jax.grad(mvn.kl)(jnp.asarray(m0), jnp.asarray(L0), jnp.asarray(m1), jnp.asarray(L1))
    np.testing.assert_allclose(grad, np.linalg.solve(S1, m0 - m1), rtol=1e-9)


def test_natural_parameters_round_trip(rng):
    A = rng.standard_normal((5, 5))
    S = A @ A.T + np.eye(5)
    mu = rng.standard_normal(5)
    back_mu, back_S = from_natural(to_natural(jnp.asarray(mu), jnp.asarray(S)))
    np.testing.assert_allclose(back_mu, mu, rtol=1e-10)
    np.testing.assert_allclose(back_S, S, rtol=1e-10)
