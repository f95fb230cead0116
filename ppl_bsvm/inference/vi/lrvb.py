r"""Linear-response covariances of the Bayesian SVM's mean-field VI (LRVB).

Giordano, Broderick and Jordan, "Covariances, robustness and variational Bayes" (JMLR 19,
2018), eq. 5 and section 3; ``specs/lrvb.md``. Tilt the log joint by a linear term in the
Gaussian block ``x`` (``beta``, ``f`` or the whitened ``v``):
``log p_t = log p + t^T x``. For the exact posterior ``d E_t[x] / dt |_{t=0} = Cov(x)``; LRVB
takes the same derivative of the *variational* mean at the converged fixed point. Mean-field
VI underestimates ``Cov(x)`` because ``q(x) q(lam)`` ignores how ``x`` and ``lam`` move
together; the response of the fixed point to the tilt restores that coupling.

**Implicit differentiation.** Let ``theta* = G(theta*, 0)`` be the fixed point of one
coordinate-ascent sweep ``G`` (the tilt enters the natural parameter of ``q(x)``:
``eta1 += t``). Differentiating ``theta*(t) = G(theta*(t), t)`` gives

.. math::

    \frac{d\theta^*}{dt} = (I - \partial_\theta G)^{-1}\, \partial_t G, \qquad
    \mathrm{Cov}_{LR}(x) = \frac{d\, \mathrm{mean}(\theta^*(t))}{dt}\Big|_{t=0},

symmetrised (:func:`response`; Jacobians by ``jax.jvp`` column blocks, no finite
differences). When ``(I - dG/dtheta)`` is singular or the result is not positive definite,
or the fixed point is not converged, :func:`accept` warns and the mean-field covariance is
kept (never a NaN).

**The Gaussian-sites sweep** (:func:`sites_map`): the linear model (``Z`` rows
``z_i = y_i x_i``, prior precision ``I / s^2``), and S-BSVM in whitened coordinates share

.. math::

    \alpha_i = (1 - z_i^\top\mu)^2 + z_i^\top\Sigma z_i + c_i,\quad
    \Sigma' = (\gamma Z^\top A^{-1/2} Z + P_0)^{-1},\quad
    \mu' = \Sigma'(\gamma Z^\top (1 + \alpha^{-1/2}) + t)

(Wenzel et al. 2017, eq. 14; ``c_i = 0`` for the linear model). The state is
``theta = (mu, vech Sigma)`` of dimension ``P = p + p (p + 1) / 2``, so the solve is
``O(P^3)`` and the Jacobian one data pass per direction, ``O(n p^2 P)``: cheap for the
linear model's few features and independent of how ``n`` compares with ``p``.

**The GP sweep** (B-BSVM, :func:`gp_response`): ``q(f) = N(mu, Sigma)``,
``Sigma = (K^{-1} + W)^{-1}``, ``W = diag(w)``, ``w = gamma alpha^{-1/2}``. With
``r = 1 - y * mu``, ``H = Y Sigma Y``, ``g = gamma alpha^{-3/2} / 2`` the Jacobians of the
sweep ``alpha -> alpha'`` are ``dA/dalpha = (2 D_r H D_r + H o H) D_g``, ``dA/dt = -2 D_r Y
Sigma``, ``dmu/dalpha = -Sigma Y D_r D_g``, ``dmu/dt = Sigma``, whence

.. math::

    \mathrm{Cov}_{LR}(f) = \Sigma + \Sigma E \Sigma, \qquad
    E = 2\, Y D_r \big(D_g^{-1} - 2 D_r H D_r - H \circ H\big)^{-1} D_r Y,

one symmetric ``n x n`` solve (``D_g (I - J)^{-1} = (D_g^{-1} - J D_g^{-1})^{-1}``), ``O(n^3)``
like a sweep. (Differentiating the ``n x n`` Cholesky factorisation forward in ``n`` directions
would cost ``O(n^4)``; the test checks these Jacobians against ``jax.jacfwd`` of the sweep.)
``Cov_LR = K - K D K`` with ``D = (K + N)^{-1} - G^T E G``, ``G = I - K (K + N)^{-1}``, which
the predictive uses without inverting ``K``.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve

from ...exceptions import ConvergenceWarning
from .. import gaussian

__all__ = [
    "RESIDUAL_TOL",
    "Sites",
    "sites_map",
    "pack",
    "unpack",
    "response",
    "sites_response",
    "polish",
    "POLISH_ITER",
    "gp_response",
    "accept",
]

RESIDUAL_TOL = 1e-6
"""Largest relative residual ``|G(theta) - theta| / |theta|`` (max norms) of a fixed point
whose linear response is trusted: the error of the response is about the residual divided by
``1 - ||dG/dtheta||``."""

_JVP_BUDGET = 2**23
"""Floats the Jacobian's block of ``jvp`` directions may hold at once (``n p`` per direction)."""


class Sites(NamedTuple):
    """The Gaussian-sites coordinate ascent (module doc): ``Z (n, p)``, prior precision
    ``prior_prec (p, p)``, ``gamma ()`` and the fixed part ``offset`` of ``alpha`` (``(n,)`` or
    ``()``: S-BSVM's ``Ktilde_ii``, 0 for the linear model)."""

    Z: jnp.ndarray
    prior_prec: jnp.ndarray
    gamma: jnp.ndarray
    offset: jnp.ndarray


def pack(mu, Sigma):
    """``theta = (mu, vech Sigma)`` (lower triangle by rows)."""
    rows, cols = np.tril_indices(mu.shape[0])
    return jnp.concatenate([mu, Sigma[rows, cols]])


def unpack(theta, p: int):
    """Inverse of :func:`pack`: ``(mu, Sigma)``."""
    rows, cols = np.tril_indices(p)
    lower = jnp.zeros((p, p), theta.dtype).at[rows, cols].set(theta[p:])
    return theta[:p], lower + lower.T - jnp.diag(jnp.diag(lower))


def sites_map(sites: Sites, theta, t):
    """One sweep of the Gaussian-sites ascent with tilt ``t`` (module doc): ``theta -> theta'``."""
    p = sites.Z.shape[1]
    mu, Sigma = unpack(theta, p)
    Z = sites.Z
    alpha = (1.0 - Z @ mu) ** 2 + jnp.sum((Z @ Sigma) * Z, axis=1) + sites.offset
    w = sites.gamma / jnp.sqrt(alpha)
    chol = jnp.linalg.cholesky((Z.T * w) @ Z + sites.prior_prec)
    mu_new = cho_solve((chol, True), Z.T @ (sites.gamma + w) + t)
    Sigma_new = cho_solve((chol, True), jnp.eye(p, dtype=Z.dtype))
    return pack(mu_new, 0.5 * (Sigma_new + Sigma_new.T))


def _columns(f, x, size: int, chunk: int):
    """The Jacobian ``df/dx`` (``(out, dim x)``) by ``jax.jvp`` in blocks of ``chunk``
    directions (memory bounded, one compiled block)."""
    dim = x.shape[0]
    blocks = -(-dim // chunk)
    basis = jnp.eye(blocks * chunk, dim, dtype=x.dtype).reshape(blocks, chunk, dim)
    cols = jax.lax.map(lambda B: jax.vmap(lambda v: jax.jvp(f, (x,), (v,))[1])(B), basis)
    return cols.reshape(blocks * chunk, size)[:dim].T


def response(fixed_map, theta, tilt_dim: int, num_mean: int, chunk: int):
    r"""``d mean(theta*)/dt`` at ``t = 0`` by implicit differentiation (module doc).

    Parameters
    ----------
    fixed_map : callable ``(theta, t) -> theta``
        One sweep, the tilt ``t`` of shape ``(tilt_dim,)``.
    theta : (P,)
        The fixed point.
    num_mean : int
        The mean is ``theta[:num_mean]``.
    chunk : int
        ``jvp`` directions per block.

    Returns
    -------
    cov : (num_mean, tilt_dim)
        ``[(I - dG/dtheta)^{-1} dG/dt]_{:num_mean}``, symmetrised when square.
    residual : ()
        ``|G(theta, 0) - theta|_inf / |theta|_inf``.
    """
    P = theta.shape[0]
    t0 = jnp.zeros(tilt_dim, theta.dtype)
    image = fixed_map(theta, t0)
    J = _columns(lambda th: fixed_map(th, t0), theta, P, chunk)
    Jt = _columns(lambda t: fixed_map(theta, t), t0, P, min(chunk, tilt_dim))
    dtheta = jnp.linalg.solve(jnp.eye(P, dtype=theta.dtype) - J, Jt)
    cov = dtheta[:num_mean]
    if num_mean == tilt_dim:
        cov = 0.5 * (cov + cov.T)
    residual = jnp.max(jnp.abs(image - theta)) / jnp.maximum(jnp.max(jnp.abs(theta)), 1e-300)
    return cov, residual


def _chunk(n: int, p: int, P: int) -> int:
    return int(max(1, min(P, _JVP_BUDGET // max(n * p, 1))))


POLISH_ITER = 2000
"""Sweeps at most that :func:`polish` takes from where an engine stopped towards the fixed
point (until the relative change of a sweep is at most :data:`POLISH_TOL`)."""

POLISH_TOL = 1e-11
"""Relative change of a sweep (max norms) at which :func:`polish` stops."""


def polish(fixed_map, theta, max_iter: int):
    """Iterate ``theta <- fixed_map(theta)`` until ``|change|_inf <= POLISH_TOL |theta|_inf`` or
    ``max_iter`` sweeps (one compiled ``while_loop``)."""

    def change(th, new):
        return jnp.max(jnp.abs(new - th)) / jnp.maximum(jnp.max(jnp.abs(th)), 1e-300)

    def cond(carry):
        k, th, new = carry
        return jnp.logical_and(k < max_iter, change(th, new) > POLISH_TOL)

    def body(carry):
        k, _, new = carry
        return k + 1, new, fixed_map(new)

    return jax.lax.while_loop(cond, body, (0, theta, fixed_map(theta)))[1]


@partial(jax.jit, static_argnames=("chunk", "max_iter"))
def _sites_response(sites: Sites, mu, Sigma, chunk: int, max_iter: int):
    p = mu.shape[0]
    fixed_map = partial(sites_map, sites)
    theta = polish(lambda th: fixed_map(th, jnp.zeros(p, th.dtype)), pack(mu, Sigma), max_iter)
    cov, residual = response(fixed_map, theta, p, p, chunk)
    return cov, residual, unpack(theta, p)[1]


def sites_response(sites: Sites, mu, Sigma, max_iter: int | None = None):
    """The linear-response covariance ``(p, p)`` of ``q(x)`` at the fixed point of
    :func:`sites_map` reached from ``N(mu, Sigma)`` (at most ``max_iter`` sweeps, default
    :data:`POLISH_ITER`), the fixed point's relative residual and its mean-field ``Sigma``."""
    n, p = sites.Z.shape
    P = p + p * (p + 1) // 2
    max_iter = POLISH_ITER if max_iter is None else max_iter
    return _sites_response(sites, mu, Sigma, _chunk(n, p, P), max_iter)


@jax.jit
def gp_response(K, fac: gaussian.NoisyFactor, mu, y, alpha, gamma):
    """B-BSVM's linear response (module doc): ``(cov, D, residual)``, ``cov = K - K D K`` the
    LR covariance of ``f`` at the training inputs, ``D (n, n)`` for the predictive and the
    relative residual ``|alpha' - alpha|_inf / |alpha|_inf`` of the sweep at ``alpha``."""
    n = K.shape[0]
    Sigma = gaussian.posterior_cov(K, fac)
    Sigma = 0.5 * (Sigma + Sigma.T)
    r = 1.0 - y * mu
    H = y[:, None] * Sigma * y[None, :]
    g = 0.5 * gamma * alpha ** -1.5
    middle = jnp.diag(1.0 / g) - 2.0 * r[:, None] * H * r[None, :] - H * H
    E = 2.0 * (y * r)[:, None] * jnp.linalg.solve(middle, jnp.diag(y * r))
    E = 0.5 * (E + E.T)
    cov = Sigma + Sigma @ E @ Sigma
    # (K + N)^{-1} K and G = I - K (K + N)^{-1}, so that Sigma = K G^T = G K
    KN_K = gaussian.solve(fac, K)
    G = jnp.eye(n, dtype=K.dtype) - KN_K.T
    KN = gaussian.solve(fac, jnp.eye(n, dtype=K.dtype))
    D = KN - G.T @ E @ G
    new = r**2 + jnp.diag(Sigma)
    residual = jnp.max(jnp.abs(new - alpha)) / jnp.max(jnp.abs(alpha))
    return 0.5 * (cov + cov.T), 0.5 * (D + D.T), residual


def accept(cov, mean_field_cov, residual, what: str, *, semidefinite: bool = False,
           stacklevel: int = 3):
    """Check a linear-response covariance on the host: ``(cov, status)``.

    ``status`` is ``"linear response"`` when ``cov`` is finite and positive definite
    (``semidefinite``: positive semi-definite up to rounding, smallest eigenvalue at least
    ``-1e-9`` times the largest, as the covariance of ``f`` under a singular ``K`` is) and the
    fixed point's residual is at most :data:`RESIDUAL_TOL`; otherwise a
    ``ConvergenceWarning`` says why and the mean-field covariance comes back with the status
    ``"mean-field (...)"``.
    """
    cov = np.asarray(cov, dtype=np.float64)
    residual = float(residual)
    reason = None
    if not np.isfinite(residual) or residual > RESIDUAL_TOL:
        reason = (f"the fixed point is not converged (relative residual {residual:.2g} > "
                  f"{RESIDUAL_TOL:g}); raise max_iter or lower tol")
    elif not np.all(np.isfinite(cov)):
        reason = "the linear-response system is singular (non-finite covariance)"
    else:
        try:
            np.linalg.cholesky(cov)
        except np.linalg.LinAlgError:
            eig = np.linalg.eigvalsh(cov)
            if not semidefinite or eig[0] < -1e-9 * max(abs(eig[-1]), 1e-300):
                reason = ("the linear-response covariance is not positive definite (eigenvalue "
                          f"{eig[0]:.3g})")
    if reason is None:
        return cov, "linear response"
    warnings.warn(
        f"{what}: linear_response=True but {reason}; the mean-field covariance is used instead",
        ConvergenceWarning, stacklevel=stacklevel,
    )
    fallback = None if mean_field_cov is None else np.asarray(mean_field_cov, dtype=np.float64)
    return fallback, "mean-field (" + reason.split(";")[0] + ")"
