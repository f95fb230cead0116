r"""The linear model's Gaussian ``q(beta)`` in its dual (``n x n``) form, for ``p >> n``.

Linear VI (Wenzel et al. 2017, eq. 14) and linear ECM (Henao et al. 2014) both update a
Gaussian in ``beta`` (``p`` coefficients) of the form of a Bayesian linear regression on the
rows ``z_i = y_i x_i`` with per-point noise ``N = diag(nu)`` and targets ``t``:

.. math::

    B = (Z^\top N^{-1} Z + I / s^2)^{-1}, \qquad \mu = B\, Z^\top N^{-1} t

(ECM: ``nu = lamhat / gamma``, ``t = 1 + lamhat``; VI: ``nu = sqrt(alpha) / gamma``,
``t = 1 + sqrt(alpha)``). The primal form factorises the ``p x p`` precision: ``O(n p^2 + p^3)``
per update. With the linear kernel on the rows, ``K = s^2 Z Z^\top`` (``n x n``), Woodbury's
identity gives every quantity the engines need from a factorisation of ``K + N``
(``gaussian.factor``, in the well-conditioned form ``I + S K S``):

.. math::

    \mu = s^2 Z^\top a,\ a = (K + N)^{-1} t, \qquad
    Z \mu = K a, \qquad \mathrm{diag}(Z B Z^\top) = \mathrm{diag}(K - K (K + N)^{-1} K),

    B = s^2 I - s^4 Z^\top (K + N)^{-1} Z, \qquad
    \frac{\mathrm{tr} B + \mu^\top\mu}{s^2} = p - \mathrm{tr}((K + N)^{-1} K) + a^\top K a,

    \log|B| = 2 p \log s - \log|I + S K S|,

so an update costs ``O(n^3)`` once ``Z Z^T`` (``O(n^2 p)``) is formed. Draws are exact by
Matheron's rule: with ``xi ~ N(0, I_p)`` and ``e ~ N(0, I_n)``,

.. math:: \beta = \mu + s \xi - s^2 Z^\top (K + N)^{-1} (s Z \xi + N^{1/2} e) \sim N(\mu, B),

since the covariance of the correction is
``s^2 I - 2 s^4 Z^T (K+N)^{-1} Z + s^4 Z^T (K+N)^{-1} (s^2 Z Z^T + N) (K+N)^{-1} Z = B``.
The predictive of ``x_*^T beta`` is GP regression with that kernel (``latent.linear_dual``).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp

from . import gaussian
from .latent import LinearDual

__all__ = ["use_dual", "gram", "DualQ", "dual_q", "margins", "second_moment", "kl",
           "beta_mean", "beta_cov", "beta_draws", "latent_arrays"]


def use_dual(form: str, n: int, p: int) -> bool:
    """Whether to solve in the dual form: ``form="dual"``, or ``"auto"`` with ``p > n``
    (``ppl_bsvm.engine.LinearForm``)."""
    return form == "dual" or (form == "auto" and p > n)


def in_dual(n: int, p: int, options: dict) -> bool:
    """:func:`use_dual` from an engine's options (its memory estimate's ``dual``)."""
    return use_dual(options.get("form", "auto"), n, p)


@jax.jit
def gram(Z):
    """``Z Z^T`` (``n x n``, ``O(n^2 p)``), formed once per fit."""
    return Z @ Z.T


class DualQ(NamedTuple):
    """``q(beta)`` in dual form at prior variance ``s2 = s^2``: the factor of ``K + N``
    (``K = s2 Z Z^T``) and the weights ``a = (K + N)^{-1} t``."""

    fac: gaussian.NoisyFactor
    a: jnp.ndarray
    K: jnp.ndarray
    s2: jnp.ndarray


def dual_q(gram, s2, noise, t) -> DualQ:
    """``q(beta)`` for noise variances ``noise`` and targets ``t`` (module docstring);
    ``gram = Z Z^T``."""
    K = s2 * gram
    fac = gaussian.factor(K, noise)
    return DualQ(fac, gaussian.solve(fac, t), K, s2)


def margins(q: DualQ):
    """Mean and variance of the margins ``z_i^T beta`` under ``q``: ``K a`` and
    ``diag(K - K (K + N)^{-1} K)``."""
    return q.K @ q.a, gaussian.posterior_cov_diag(q.K, q.fac)


def _trace_inv_b(q: DualQ):
    """``tr((I + S K S)^{-1})``, so that ``tr((K + N)^{-1} K) = n - tr((I + S K S)^{-1})``."""
    n = q.a.shape[0]
    L_inv = jax.scipy.linalg.solve_triangular(q.fac.chol, jnp.eye(n, dtype=q.a.dtype),
                                              lower=True)
    return jnp.sum(L_inv**2)


def second_moment(q: DualQ, p: int):
    """``(tr B + mu^T mu) / s^2 = p - tr((K + N)^{-1} K) + a^T K a``."""
    n = q.a.shape[0]
    return p - (n - _trace_inv_b(q)) + q.a @ (q.K @ q.a)


def kl(q: DualQ, p: int, log_scale_q, log_scale):
    """``KL(q || N(0, s'^2 I))`` with ``q`` built at prior scale ``s = exp(log_scale_q)`` and
    ``s' = exp(log_scale)``: ``[s^2 Q / s'^2 - p + 2 p log(s' / s) + log|I + S K S|] / 2``,
    ``Q`` the :func:`second_moment`."""
    ratio = jnp.exp(2.0 * (log_scale_q - log_scale))
    log_det = 2.0 * jnp.sum(jnp.log(jnp.diagonal(q.fac.chol)))
    return 0.5 * (ratio * second_moment(q, p) - p + 2.0 * p * (log_scale - log_scale_q)
                  + log_det)


@jax.jit
def beta_mean(Z, q: DualQ):
    """``mu = s^2 Z^T a``."""
    return q.s2 * (Z.T @ q.a)


@jax.jit
def beta_cov(Z, q: DualQ):
    """``B = s^2 I - s^4 Z^T (K + N)^{-1} Z`` (``p x p``, ``O(n p^2)``)."""
    W = jax.scipy.linalg.solve_triangular(q.fac.chol, q.fac.s[:, None] * Z, lower=True)
    return (-(q.s2**2) * (W.T @ W)).at[jnp.diag_indices(Z.shape[1])].add(q.s2)


def _matheron(Z, q: DualQ, xi, e):
    """``s xi - s^2 Z^T (K + N)^{-1} (s Z xi + N^{1/2} e)`` for columns ``xi (p, k)``,
    ``e (n, k)``: draws of ``N(0, B)`` (module docstring)."""
    s = jnp.sqrt(q.s2)
    prior = s * xi
    noise = e / q.fac.s[:, None]
    return prior - q.s2 * (Z.T @ gaussian.solve(q.fac, Z @ prior + noise))


@partial(jax.jit, static_argnames=("num_draws",))
def beta_draws(key, Z, q: DualQ, mean, num_draws: int):
    """``num_draws`` draws of ``N(mu, B)`` by Matheron's rule, shape ``(num_draws, p)``."""
    k_xi, k_e = jax.random.split(key)
    n, p = Z.shape
    xi = jax.random.normal(k_xi, (p, num_draws), Z.dtype)
    e = jax.random.normal(k_e, (n, num_draws), Z.dtype)
    return (mean[:, None] + _matheron(Z, q, xi, e)).T


def latent_arrays(Z, q: DualQ) -> LinearDual:
    """The predictor's arrays (``latent.linear_dual``) of ``q``."""
    return LinearDual(Z, q.s2, q.fac.chol, q.fac.s, q.a)
