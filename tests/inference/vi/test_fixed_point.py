"""The batch fixed point of the stochastic engines (``fixed_point.py``): Anderson's iteration,
the certificate, and linear SVI against batch VI where the ELBO-change rule alone stopped far
from it."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ppl_bsvm
from ppl_bsvm import datasets
from ppl_bsvm.exceptions import ConvergenceWarning
from ppl_bsvm.inference.vi import fixed_point

@pytest.fixture(scope="module")
def wdbc():
    return datasets.load("wdbc", standardize=True)


def _affine(P=40, seed=0):
    """A symmetric contraction with a few slow modes (like coordinate ascent's: most of the
    spectrum below 0.5, four eigenvalues up to 0.99) and an offset."""
    r = np.random.default_rng(seed)
    Q = np.linalg.qr(r.standard_normal((P, P)))[0]
    spectrum = np.r_[np.linspace(0.0, 0.5, P - 4), 0.9, 0.95, 0.98, 0.99]
    return (Q * spectrum) @ Q.T, r.standard_normal(P)


@pytest.mark.parametrize("ascent", [False, True])
def test_anderson_solves_an_affine_contraction(ascent):
    """``G(x) = A x + b``, ``A`` symmetric with eigenvalues in [0, 0.99]: the fixed point solves
    ``(I - A) x = b``; plain sweeps would take log(1e-12) / log(0.99) = 2750, Anderson's took
    230 (depth 5; 65 at depth 10). With ``ascent``
    the safeguard is the objective ``b^T x - x^T (I - A) x / 2`` that each plain sweep (a
    gradient step of length 1) increases."""
    A, b = _affine()
    with jax.enable_x64(True):
        A_, b_ = jnp.asarray(A), jnp.asarray(b)
        objective = (lambda aux: aux) if ascent else None

        def fixed_map(x):
            return A_ @ x + b_, b_ @ x - 0.5 * x @ (x - A_ @ x)

        out = fixed_point.anderson(fixed_map, jnp.zeros(40), 500,
                                   lambda x, gx, _: jnp.linalg.norm(gx - x),
                                   lambda s: s.res <= 1e-12, plain=3, objective=objective)
    x_star = np.linalg.solve(np.eye(40) - A, b)
    np.testing.assert_allclose(np.asarray(out.x), x_star, atol=1e-9 * np.max(np.abs(x_star)))
    assert int(out.k) < 275
    # a plain sweep maps the residual f to A f: the measured ratios never exceed A's norm
    assert 0.0 < float(out.rate) <= 0.99


def _linear_fixed_point(X, y):
    """Linear VI's fixed point by its own sweeps (``vi_step``), to rounding (the ELBO stops
    changing at all)."""
    fit = ppl_bsvm.fit(X, y, model="linear", method="vi", tol=1e-300, max_iter=4000,
                       num_draws=10)
    assert fit.stop_reason == "tol"
    a = fit.idata["approximation"]
    return a["beta_mean"].values, a["beta_cov"].values


def _rms_distance(Z, mu, mu_star, cov_star):
    """Root mean square over the rows of ``Z`` of the shift of ``z_i^T mu`` in units of the sd
    of ``z_i^T beta`` at the fixed point."""
    sd = np.sqrt(np.einsum("ij,jk,ik->i", Z, cov_star, Z))
    return float(np.sqrt(np.mean((Z @ (mu - mu_star) / sd) ** 2)))


def test_certified_distance_bounds_the_distance_to_linear_vis_fixed_point(wdbc):
    """From the prior, the linear model's sweep (``dense_sweep``): the certified distance
    bounds the true distance to linear VI's own fixed point (reached by its own sweeps)."""
    X, y = wdbc
    mu_star, cov_star = _linear_fixed_point(X, y)
    Z = np.c_[X, np.ones(len(X))] * np.where(y > 0, 1.0, -1.0)[:, None]
    n, p = Z.shape
    with jax.enable_x64(True):
        Zj = jnp.asarray(Z)

        def sweep(theta):
            return fixed_point.dense_sweep(Zj, 0.0, 1.0, 0.0, 1.0, theta)

        for tol in (0.5, 0.05):
            theta, cert = jax.jit(fixed_point.certify, static_argnums=0)(
                sweep, fixed_point.pack(jnp.zeros(p), jnp.eye(p)), n, tol, 500)
            eta1, prec = (np.asarray(a) for a in fixed_point.unpack(theta, p))
            true = _rms_distance(Z, np.linalg.solve(prec, eta1), mu_star, cov_star)
            assert float(cert.distance) <= tol and true <= float(cert.distance)


def test_linear_svi_reaches_linear_vi(wdbc):
    """Default linear SVI on wdbc: the ELBO-change rule alone stopped with coefficients several
    posterior sds from batch VI's; with the polish, within 0.01."""
    X, y = wdbc
    vi = ppl_bsvm.fit(X, y, model="linear", method="vi", tol=1e-14, max_iter=5000,
                      num_draws=10)
    sd = np.sqrt(np.diag(vi.idata["approximation"]["beta_cov"].values))
    mean = vi.idata["approximation"]["beta_mean"].values
    old = ppl_bsvm.fit(X, y, model="linear", method="svi", polish=False, num_draws=10)
    new = ppl_bsvm.fit(X, y, model="linear", method="svi", num_draws=10)
    far = np.abs(old.idata["approximation"]["beta_mean"].values - mean) / sd
    near = np.abs(new.idata["approximation"]["beta_mean"].values - mean) / sd
    assert old.stop_reason == "tol" and np.max(far) > 1.0
    assert new.stop_reason == "tol" and np.max(near) < 0.01


def test_a_polish_after_the_iteration_cap_converges(wdbc):
    """Five minibatch steps, then the polish: converged ("tol"), no warning."""
    X, y = wdbc
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        fit = ppl_bsvm.fit(X, y, model="linear", method="svi", max_iter=5, num_draws=10)
    assert fit.stop_reason == "tol" and fit.converged and fit.n_iter == 5
