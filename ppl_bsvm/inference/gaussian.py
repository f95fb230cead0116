r"""GP regression with per-point noise: the linear algebra shared by ECM, Gibbs and B-BSVM.

Each function is compiled on its own (one program per shape), so that the engines' set-up and
finishing steps, which call them outside their loops, do not run operation by operation.

Every GP engine of the Bayesian SVM needs the Gaussian
:math:`N(f; K (K + N)^{-1} t,\; K - K (K + N)^{-1} K)` for some diagonal noise
:math:`N = \mathrm{diag}(\nu)`: ECM (``nu = lamhat / gamma``), the Gibbs conditional of ``f``
(``nu = lam``) and batch VI (``nu = sqrt(alpha)``). Following GPML (Alg. 3.2) and DESIGN.md,
``(K + N)`` is never factorised directly; instead

.. math:: B = I + S K S, \quad S = N^{-1/2}, \quad (K + N)^{-1} = S B^{-1} S,

whose Cholesky factor is well conditioned whenever the noise is not huge relative to ``K``,
and which stays finite as a noise variance goes to 0 (a point pinned to the margin).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_solve, solve_triangular

__all__ = [
    "NoisyFactor",
    "factor",
    "factor_scaled",
    "solve",
    "posterior_mean",
    "posterior_cov",
    "posterior_cov_diag",
    "predict",
    "sample_posterior",
]


class NoisyFactor(NamedTuple):
    """Factorisation of ``K + diag(noise)``.

    Attributes
    ----------
    chol : (n, n)
        Lower Cholesky factor of ``B = I + S K S``.
    s : (n,)
        ``noise ** -1/2``.
    """

    chol: jnp.ndarray
    s: jnp.ndarray


@jax.jit
def factor(K, noise) -> NoisyFactor:
    """Factor ``K + diag(noise)`` (``noise > 0``) in the symmetric form ``I + S K S``."""
    s = 1.0 / jnp.sqrt(noise)
    return factor_scaled(s[:, None] * K * s[None, :], s)


def factor_scaled(SKS, s) -> NoisyFactor:
    """:func:`factor` given ``S K S`` and ``s = noise^{-1/2}`` (``S = diag(s)``)."""
    # the identity added on the diagonal, not as an n x n eye: inside a loop XLA hoists the
    # eye's mask into the loop's state (the GP sampler's fallback, ``draw_f``: 120 ms per
    # sweep at n = 5000 although the loop rarely runs); the same factor up to rounding
    diagonal = jnp.arange(SKS.shape[0])
    B = SKS.at[diagonal, diagonal].add(1.0)
    # its lower triangle, as LAPACK reads it: jnp.linalg.cholesky would first average B with
    # its transpose (two more n x n temporaries) for a B symmetric to rounding
    return NoisyFactor(jax.lax.linalg.cholesky(B, symmetrize_input=False), s)


@jax.jit
def solve(fac: NoisyFactor, v):
    """``(K + N)^{-1} v`` for ``v`` of shape ``(n,)`` or ``(n, k)``."""
    s = fac.s if v.ndim == 1 else fac.s[:, None]
    return s * cho_solve((fac.chol, True), s * v)


@jax.jit
def posterior_mean(K, fac: NoisyFactor, t):
    """``K (K + N)^{-1} t`` and the weights ``a = (K + N)^{-1} t`` (so ``mean = K a``)."""
    a = solve(fac, t)
    return K @ a, a


def _whitened(fac: NoisyFactor, K_cross):
    """``V = L^{-1} S K_cross`` so that ``K_cross^T (K + N)^{-1} K_cross = V^T V``."""
    return solve_triangular(fac.chol, fac.s[:, None] * K_cross, lower=True)


@jax.jit
def posterior_cov(K, fac: NoisyFactor):
    """``K - K (K + N)^{-1} K`` (dense, ``(n, n)``)."""
    V = _whitened(fac, K)
    return K - V.T @ V


@jax.jit
def posterior_cov_diag(K, fac: NoisyFactor):
    """Diagonal of ``K - K (K + N)^{-1} K``."""
    V = _whitened(fac, K)
    return jnp.diag(K) - jnp.sum(V**2, axis=0)


def predict(fac: NoisyFactor, a, K_cross, k_diag):
    """Predictive mean and variance at new inputs.

    Parameters
    ----------
    fac : NoisyFactor
        Factor of ``K + N`` at the training inputs.
    a : (n,)
        ``(K + N)^{-1} t``.
    K_cross : (n, n*)
        ``k(X_train, X_new)``.
    k_diag : (n*,)
        ``k(x*, x*)``.

    Returns
    -------
    mean, var : (n*,)
        ``K_cross^T a`` and ``k_diag - diag(K_cross^T (K + N)^{-1} K_cross)`` (clipped at 0).
    """
    V = _whitened(fac, K_cross)
    return K_cross.T @ a, jnp.maximum(k_diag - jnp.sum(V**2, axis=0), 0.0)


@jax.jit
def psd_sqrt(K):
    """``L`` with ``L L^T = K`` for a positive semi-definite ``K``: its Cholesky factor, or,
    when ``K`` is singular and has none, ``U diag(sqrt(max(w, 0)))`` from ``K = U diag(w) U^T``
    (computed only then: an eigendecomposition costs several Cholesky factorisations)."""
    L = jnp.linalg.cholesky(K)

    def from_eigh(_):
        w, U = jnp.linalg.eigh(K)
        return U * jnp.sqrt(jnp.maximum(w, 0.0))

    return jax.lax.cond(jnp.all(jnp.isfinite(L)), lambda _: L, from_eigh, None)


@partial(jax.jit, static_argnames=("num_draws",))
def sample_posterior(key, K, fac: NoisyFactor, mean, num_draws: int):
    r"""Draws of ``N(mean, K - K (K + N)^{-1} K)``, ``mean`` the posterior mean the caller has.

    With ``K = L L^T`` and ``S = N^{-1/2}`` (``fac.s``), Woodbury's identity gives the posterior
    covariance as

    .. math:: K - K S B^{-1} S K = L\,(I + L^\top S^2 L)^{-1} L^\top, \quad B = I + S K S,

    so with ``R R^T = I + L^T S^2 L`` the draws are ``mean + L R^{-T} z``, ``z ~ N(0, I)``: one
    factorisation of a matrix that is at least ``I`` (well conditioned however small the
    noise, and sites of zero precision, ``s = 0``, are harmless), no factorisation of the
    nearly singular posterior covariance itself, and two ``n x n`` products per draw (half the
    work of Matheron's rule, ``f0 - K S B^{-1} (S f0 + e)``, which needs four). The identity
    holds for any ``L`` with ``L L^T = K``: when ``K`` is singular (repeated inputs or a linear
    kernel without jitter) and has no Cholesky factor, ``L = U diag(sqrt(w))`` from its
    eigendecomposition (:func:`psd_sqrt`), and the draws are those of the degenerate Gaussian.

    Returns
    -------
    array of shape (num_draws, n)
    """
    n = K.shape[0]
    L = psd_sqrt(K)
    R = jnp.linalg.cholesky(jnp.eye(n, dtype=K.dtype) + (L.T * fac.s**2) @ L)
    z = jax.random.normal(key, (n, num_draws), dtype=K.dtype)
    return (mean[:, None] + L @ solve_triangular(R.T, z, lower=False)).T
