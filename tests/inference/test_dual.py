"""The linear model's dual (n x n) form against the primal (p x p) one.

The algebra (``inference.dual``) against dense inverses, the exact Matheron draws through the
covariance of their linear map, and linear VI and ECM run in both forms (forced with
``form=``) to 1e-8, with more coefficients than points and fewer.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppl_bsvm
from ppl_bsvm.inference import dual
from ppl_bsvm.inference.gaussian import NoisyFactor
from ppl_bsvm.inference.latent import linear_dual, linear_gaussian
from ppl_bsvm.inference.mvn import kl_precision

pytestmark = pytest.mark.filterwarnings("ignore::ppl_bsvm.ConvergenceWarning")


@pytest.fixture
def problem(rng):
    n, p = 7, 11
    Z = rng.standard_normal((n, p))
    noise = rng.uniform(0.2, 3.0, n)
    t = rng.uniform(0.5, 2.0, n)
    return Z, noise, t, 0.8


def _primal(Z, noise, t, s):
    prec = Z.T @ (Z / noise[:, None]) + np.eye(Z.shape[1]) / s**2
    cov = np.linalg.inv(prec)
    return cov @ (Z.T @ (t / noise)), cov, prec


def test_dual_quantities_equal_the_primal_ones(problem):
    Z, noise, t, s = problem
    mean, cov, prec = _primal(Z, noise, t, s)
    p = Z.shape[1]
    with jax.enable_x64(True):
        q = dual.dual_q(jnp.asarray(Z @ Z.T), s**2, jnp.asarray(noise), jnp.asarray(t))
        np.testing.assert_allclose(dual.beta_mean(Z, q), mean, atol=1e-12)
        np.testing.assert_allclose(dual.beta_cov(Z, q), cov, atol=1e-12)
        m, v = dual.margins(q)
        np.testing.assert_allclose(m, Z @ mean, atol=1e-12)
        np.testing.assert_allclose(v, np.einsum("ij,jk,ik->i", Z, cov, Z), atol=1e-12)
        second = (np.trace(cov) + mean @ mean) / s**2
        assert float(dual.second_moment(q, p)) == pytest.approx(second, rel=1e-12)
        chol = np.linalg.cholesky(prec)
        for s_new in (s, 1.7):  # KL against the prior q was built with, and another
            ref = float(kl_precision(jnp.asarray(mean), jnp.asarray(chol), np.log(s_new)))
            got = float(dual.kl(q, p, np.log(s), np.log(s_new)))
            assert got == pytest.approx(ref, rel=1e-10, abs=1e-12)


def test_matheron_draws_have_exactly_the_posterior_covariance(problem):
    """The draws are ``mean + A [xi; e]`` for a linear map ``A``; ``A A^T`` must be the
    posterior covariance (exact, so checked to rounding, not by Monte Carlo)."""
    Z, noise, t, s = problem
    n, p = Z.shape
    _, cov, _ = _primal(Z, noise, t, s)
    with jax.enable_x64(True):
        q = dual.dual_q(jnp.asarray(Z @ Z.T), s**2, jnp.asarray(noise), jnp.asarray(t))
        A_xi = np.asarray(dual._matheron(Z, q, jnp.eye(p), jnp.zeros((n, p))))
        A_e = np.asarray(dual._matheron(Z, q, jnp.zeros((p, n)), jnp.eye(n)))
        draws = dual.beta_draws(jax.random.key(0), Z, q, jnp.zeros(p), num_draws=3)
    np.testing.assert_allclose(A_xi @ A_xi.T + A_e @ A_e.T, cov, atol=1e-12)
    assert draws.shape == (3, p) and np.all(np.isfinite(draws))


def _data(rng, n, d):
    X = rng.standard_normal((n, d))
    y = np.where(X[:, 0] + 0.5 * rng.standard_normal(n) > 0, 1, 0)
    return X, y


def _assert_same(primal, dual_fit, X, names):
    for name in names:
        a = primal.idata["approximation"][name].values
        b = dual_fit.idata["approximation"][name].values
        np.testing.assert_allclose(b, a, atol=1e-8 * max(1.0, np.max(np.abs(a))), err_msg=name)
    np.testing.assert_allclose(dual_fit.predict_proba(X), primal.predict_proba(X), atol=1e-8)
    latent_p, latent_d = primal.predict_latent(X), dual_fit.predict_latent(X)
    for a, b in zip(latent_p, latent_d, strict=True):
        np.testing.assert_allclose(b, a, atol=1e-8)


N, D = 9, 25  # one shape: each form compiles its programs once


@pytest.mark.parametrize("learn", [False, True])
def test_linear_vi_dual_form_equals_the_primal(rng, learn):
    X, y = _data(rng, N, D)
    fits = {form: ppl_bsvm.fit(X, y, model="linear", method="vi", form=form, max_iter=60,
                               learn_hyperparameters=learn, num_draws=20)
            for form in ("primal", "dual")}
    assert fits["primal"].n_iter == fits["dual"].n_iter
    np.testing.assert_allclose(fits["dual"].trace["elbo"], fits["primal"].trace["elbo"],
                               rtol=1e-10)
    _assert_same(fits["primal"], fits["dual"], X,
                 ("beta_mean", "beta_cov", "alpha", "prior_scale", "elbo"))


def test_linear_ecm_dual_form_equals_the_primal(rng):
    """Three SQUAREM cycles (nine sweeps, before a lamhat reaches its floor ``eps``: there the
    primal p x p precision is ill-conditioned and the two forms part at its rounding)."""
    X, y = _data(rng, N, D)
    fits = {form: ppl_bsvm.fit(X, y, model="linear", method="ecm", form=form, max_iter=3,
                               tol=0.0, num_draws=20, prior_scale=0.1)
            for form in ("primal", "dual")}
    assert np.min(fits["primal"].idata["approximation"]["lam_hat"].values) > 1e-6
    np.testing.assert_allclose(fits["dual"].trace["objective"],
                               fits["primal"].trace["objective"], rtol=1e-10)
    _assert_same(fits["primal"], fits["dual"], X, ("beta_mean", "beta_cov", "lam_hat"))


@pytest.mark.parametrize("method", ["vi", "ecm"])
def test_auto_form_is_dual_when_there_are_more_coefficients_than_points(rng, method, tmp_path):
    """``form="auto"`` takes the dual form for p > n (here p = 26, n = 9) and the primal one
    otherwise; the dual fit's draws have its mean and covariance, and it saves and loads."""
    X, y = _data(rng, N, D)
    fit = ppl_bsvm.fit(X, y, model="linear", method=method, num_draws=4000)
    assert fit.predictor.latent_fn.fn is linear_dual
    narrow = ppl_bsvm.fit(X[:, :3], y, model="linear", method=method, num_draws=10)
    assert narrow.predictor.latent_fn.fn is linear_gaussian
    approx = fit.idata["approximation"]
    mean, cov = approx["beta_mean"].values, approx["beta_cov"].values
    draws = fit.posterior["beta"].values[0]
    se = np.sqrt(np.diag(cov) / draws.shape[0])
    assert np.all(np.abs(draws.mean(0) - mean) < 5 * se)
    # Sample variances: relative standard error sqrt(2 / S) = 0.022.
    np.testing.assert_allclose(draws.var(0), np.diag(cov), rtol=5 * np.sqrt(2 / draws.shape[0]))
    fit.save(tmp_path / "fit")
    np.testing.assert_array_equal(ppl_bsvm.load(tmp_path / "fit").predict_proba(X),
                                  fit.predict_proba(X))


def test_form_is_checked():
    with pytest.raises(ValueError, match=r"form must be one of \['auto', 'primal', 'dual'\]"):
        ppl_bsvm.fit(np.eye(4), [0, 1, 0, 1], model="linear", method="vi", form="woodbury")


def test_dual_state_holds_the_prior_at_the_start(rng):
    """``vi_dual_init``'s factor (``chol = I``, ``s = 0``, ``a = 0``) is ``q = prior``: its
    margins have variance ``s^2 |z_i|^2`` and its KL is 0."""
    from ppl_bsvm.inference._common import LinearData
    from ppl_bsvm.inference.vi.linear import vi_dual_init

    Z = rng.standard_normal((5, 8))
    with jax.enable_x64(True):
        data = LinearData(jnp.asarray(Z), jnp.asarray(1.5), jnp.asarray(1.0),
                          learn=jnp.asarray(False), gram=jnp.asarray(Z @ Z.T))
        st = vi_dual_init(None, None, data)
        q = dual.DualQ(NoisyFactor(st.chol, st.s), st.a, 2.25 * data.gram, jnp.asarray(2.25))
        m, v = dual.margins(q)
        np.testing.assert_allclose(v, 2.25 * np.sum(Z**2, axis=1), rtol=1e-12)
        assert float(dual.kl(q, 8, np.log(1.5), np.log(1.5))) == pytest.approx(0.0, abs=1e-12)
        np.testing.assert_array_equal(m, 0.0)
