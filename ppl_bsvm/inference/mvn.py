r"""Multivariate normals in the forms the engines hold them: KL divergences and natural
parameters, each written once.

**KL divergence.** For ``k``-dimensional Gaussians, with ``A_0`` any square root of
``Sigma_0`` (``A_0 A_0^T = Sigma_0``) and ``L_1`` the lower Cholesky factor of ``Sigma_1``,

.. math::

    \mathrm{KL}(N(\mu_0, \Sigma_0) \,\|\, N(\mu_1, \Sigma_1))
    = \tfrac12 \big[\|W\|_F^2 + \|b\|^2 - k + \log|\Sigma_1| - \log|\Sigma_0|\big],
    \qquad W = L_1^{-1} A_0, \quad b = L_1^{-1} (\mu_0 - \mu_1),

because ``tr(Sigma_1^{-1} Sigma_0) = |L_1^{-1} A_0|_F^2`` and the Mahalanobis term is
``|b|^2`` (:func:`kl_whitened`). The engines hold ``q`` and the prior in different forms and
differ only in how they reach ``W``, ``b`` and the log-determinants:

- :func:`kl`: Cholesky factors of both covariances (dense reference ELBOs, SVGP's ``q(u)``
  against ``N(0, K_mm)``, fits compared from draws); the second Gaussian defaults to
  ``N(0, I)`` (S-BSVM's whitened ``q(v)`` given by its covariance);
- :func:`kl_precision`: ``q`` by the Cholesky factor ``L`` of its precision against
  ``N(0, s^2 I)`` (linear VI's ``q(beta)``; S-BSVM's whitened ``q(v)``, ``s = 1``). Then
  ``A_0 = L^{-T}`` and ``W = A_0 / s``, whose norm is ``|L^{-1}|_F / s``; nothing is inverted
  but the triangle ``L``.

**Natural parameters** of ``N(mu, Sigma)``: ``eta1 = Sigma^{-1} mu``, ``eta2 = -Sigma^{-1} / 2``
(:class:`Natural`); the stochastic natural-gradient engines hold ``(eta1, P = -2 eta2)`` and
read the mean and the Cholesky factor of ``P`` from them (:func:`gaussian_from_precision`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular

__all__ = [
    "log_det",
    "kl_whitened",
    "kl",
    "kl_precision",
    "cov_factor",
    "gaussian_from_precision",
    "Natural",
    "to_natural",
    "from_natural",
]


def log_det(chol):
    r"""``log|L L^T| = 2 sum_i log L_ii`` for a lower Cholesky factor ``L``."""
    return 2.0 * jnp.sum(jnp.log(jnp.diag(chol)))


def kl_whitened(W, b, log_det1, log_det0):
    r"""The KL divergence from its whitened pieces (module docstring):

    .. math:: \tfrac12 \big[\|W\|_F^2 + \|b\|^2 - k + \log|\Sigma_1| - \log|\Sigma_0|\big],

    ``k = len(b)``; ``W = L_1^{-1} A_0`` (or its transpose: only its norm counts),
    ``b = L_1^{-1} (mu_0 - mu_1)`` (either sign), ``log_det1 = log|Sigma_1|``,
    ``log_det0 = log|Sigma_0|``.
    """
    return 0.5 * (jnp.sum(W**2) + jnp.sum(b**2) - b.shape[0] + log_det1 - log_det0)


def kl(mean0, chol0, mean1=None, chol1=None):
    r"""``KL(N(mean0, L_0 L_0^T) || N(mean1, L_1 L_1^T))`` from lower Cholesky factors of the
    covariances; ``mean1=None`` is the zero mean, ``chol1=None`` the identity covariance.

    .. math:: \tfrac12\big[\mathrm{tr}(\Sigma_1^{-1}\Sigma_0)
              + (\mu_1 - \mu_0)^\top \Sigma_1^{-1} (\mu_1 - \mu_0) - k
              + \log|\Sigma_1| - \log|\Sigma_0|\big]

    Differentiable in every argument (the dense reference ELBOs take ``jax.grad`` of it).
    """
    diff = mean0 if mean1 is None else mean0 - mean1
    if chol1 is None:
        return kl_whitened(chol0, diff, 0.0, log_det(chol0))
    W = solve_triangular(chol1, chol0, lower=True)
    b = solve_triangular(chol1, diff, lower=True)
    return kl_whitened(W, b, log_det(chol1), log_det(chol0))


# jitted (as the two below): engines also call them outside their compiled loops, where each
# operation would compile alone
@jax.jit
def kl_precision(mean, chol_prec, log_scale=0.0):
    r"""``KL(N(mean, (L L^T)^{-1}) || N(0, s^2 I))`` from the Cholesky factor ``L`` of the
    precision, ``log_scale = log s``:

    .. math:: \tfrac12\big[(\|L^{-1}\|_F^2 + \|\mu\|^2) / s^2 - k + 2 k \log s
              + \log|L L^T|\big]

    (``|L^{-1}|_F^2 = tr((L L^T)^{-1})``). With ``s = 1`` (the default) every scaling is by
    exactly 1.
    """
    k = mean.shape[0]
    w = jnp.exp(-log_scale)
    L_inv = solve_triangular(chol_prec, jnp.eye(k, dtype=mean.dtype), lower=True)
    return kl_whitened(w * L_inv, w * mean, 2.0 * k * log_scale, -log_det(chol_prec))


@jax.jit
def cov_factor(chol_prec):
    """``L^{-T}``: a square root of the covariance ``(L L^T)^{-1}`` (draws are
    ``mean + L^{-T} z``)."""
    eye = jnp.eye(chol_prec.shape[0], dtype=chol_prec.dtype)
    return solve_triangular(chol_prec, eye, lower=True).T


@jax.jit
def gaussian_from_precision(eta1, prec):
    """``(mean, chol)`` of ``N(P^{-1} eta1, P^{-1})``, ``chol`` the lower Cholesky factor of ``P``
    (symmetrised first: the engines' updates leave ``P`` symmetric only up to rounding)."""
    chol = jnp.linalg.cholesky(0.5 * (prec + prec.T))
    return cho_solve((chol, True), eta1), chol


class Natural(NamedTuple):
    """Natural parameters of ``N(mu, Sigma)``: ``eta1 = Sigma^{-1} mu`` (k,),
    ``eta2 = -Sigma^{-1}/2`` (k, k)."""

    eta1: jnp.ndarray
    eta2: jnp.ndarray


def to_natural(mu, Sigma) -> Natural:
    """``Natural(Sigma^{-1} mu, -Sigma^{-1} / 2)`` through the Cholesky factor of ``Sigma``."""
    chol = jnp.linalg.cholesky(Sigma)
    prec = cho_solve((chol, True), jnp.eye(mu.shape[0], dtype=mu.dtype))
    return Natural(prec @ mu, -0.5 * prec)


def from_natural(nat: Natural):
    """``(mu, Sigma)`` from natural parameters, through the Cholesky factor of the precision
    ``P = -2 eta2`` (:func:`gaussian_from_precision`); ``Sigma`` symmetrised."""
    mu, chol = gaussian_from_precision(nat.eta1, -2.0 * nat.eta2)
    Sigma = cho_solve((chol, True), jnp.eye(chol.shape[0], dtype=chol.dtype))
    return mu, 0.5 * (Sigma + Sigma.T)
