r"""The two classification likelihoods of the GP baselines, with labels ``y`` in {-1, +1}.

``probit``: :math:`p(y \mid f) = \Phi(y f)`; ``logit``: :math:`p(y \mid f) = \sigma(y f)`.

For each, :func:`derivatives` gives :math:`\log p`, its first derivative and the *negative*
second derivative ``W`` (GPML eqs. 3.15-3.16), all in closed form and stable for large
``|f|``: the probit ratio :math:`\phi(z) / \Phi(z)` is evaluated in log space. Both
log-likelihoods are concave, so ``W >= 0`` (which the Laplace approximation, EP and the
natural-gradient SVGP rely on). :func:`gauss_hermite_expectations` integrates them against
Gaussians for SVGP's expected log-likelihood.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr, ndtr

__all__ = [
    "LIKELIHOODS",
    "check_likelihood",
    "log_likelihood",
    "derivatives",
    "gauss_hermite",
    "gauss_hermite_expectations",
    "logistic_gaussian",
]

LIKELIHOODS = ("probit", "logit")

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)


def check_likelihood(likelihood) -> str:
    if likelihood not in LIKELIHOODS:
        raise ValueError(f"likelihood must be one of {list(LIKELIHOODS)}, got {likelihood!r}")
    return likelihood


def _probit_ratio(z):
    """``phi(z) / Phi(z)`` without overflow or 0/0 for very negative ``z``."""
    return jnp.exp(-0.5 * z**2 - _LOG_SQRT_2PI - log_ndtr(z))


def log_likelihood(likelihood: str, y, f):
    """``log p(y | f)`` elementwise."""
    z = y * f
    if likelihood == "probit":
        return log_ndtr(z)
    return -jax.nn.softplus(-z)


def derivatives(likelihood: str, y, f):
    r"""``(log p, d log p / df, W = -d^2 log p / df^2)`` elementwise.

    probit: :math:`r = \phi(z)/\Phi(z)`, :math:`z = y f`: gradient ``y r``, ``W = r^2 + z r``.
    logit: :math:`\pi = \sigma(f)`: gradient ``(y + 1)/2 - pi``, ``W = pi (1 - pi)``.
    """
    z = y * f
    if likelihood == "probit":
        r = _probit_ratio(z)
        return log_ndtr(z), y * r, r * (r + z)
    p = jax.nn.sigmoid(f)
    return -jax.nn.softplus(-z), 0.5 * (y + 1.0) - p, p * (1.0 - p)


def gauss_hermite(num_points: int):
    """Nodes and weights for :math:`E[g(f)], f \\sim N(0, 1)`: ``sum(w * g(x))``."""
    x, w = np.polynomial.hermite.hermgauss(int(num_points))
    return np.sqrt(2.0) * x, w / np.sqrt(np.pi)


def gauss_hermite_expectations(likelihood: str, y, mean, var, nodes, weights):
    r"""``E[log p]``, ``E[d log p/df]`` and ``E[d^2 log p/df^2] / 2`` under ``f ~ N(mean, var)``.

    By Bonnet's and Price's theorems the last two are the derivatives of ``E[log p]`` with
    respect to ``mean`` and ``var``; computing them from the pointwise derivatives (rather than
    differentiating the quadrature) keeps the variance derivative ``<= 0`` for any number of
    nodes, so natural-gradient updates keep a positive definite precision.
    """
    f = mean[..., None] + jnp.sqrt(jnp.maximum(var, 0.0))[..., None] * nodes
    ll, g, W = derivatives(likelihood, y[..., None], f)
    return ll @ weights, g @ weights, -0.5 * (W @ weights)


_GH_X, _GH_W = gauss_hermite(64)
_GL_X, _GL_W = np.polynomial.legendre.leggauss(64)
# Breakpoints of the piecewise Gauss-Legendre rule over the logistic density (mass beyond
# +-36 is 2e-16); narrower pieces near 0 where the density varies fastest.
_LOGISTIC_EDGES = (-36.0, -12.0, -4.0, 0.0, 4.0, 12.0, 36.0)
_LOGISTIC_NODES = np.concatenate(
    [0.5 * (a + b) + 0.5 * (b - a) * _GL_X for a, b in zip(_LOGISTIC_EDGES, _LOGISTIC_EDGES[1:])]
)
_LOGISTIC_WEIGHTS = np.concatenate(
    [0.5 * (b - a) * _GL_W for a, b in zip(_LOGISTIC_EDGES, _LOGISTIC_EDGES[1:])]
) * (1.0 / (2.0 + 2.0 * np.cosh(_LOGISTIC_NODES)))  # times the logistic density sigma'(e)
_SWITCH_VAR = 4.0


def logistic_gaussian(mean, var):
    r"""``E[sigmoid(f)]`` for ``f ~ N(mean, var)``: the 'logit' link of the GP baselines.

    Two exact representations, each evaluated where its integrand is smooth:

    - ``var <= 4``: 64-point Gauss-Hermite in ``f``;
    - ``var > 4``: :math:`E[\sigma(f)] = P(f > e) = \int \Phi((m - e)/\sqrt{v})\,\sigma'(e)\,de`
      with ``e`` logistic, by piecewise Gauss-Legendre over ``e`` in [-36, 36].

    Accurate to about 1e-10 for every variance (checked against adaptive quadrature in the
    tests), smooth in ``mean`` so it can be differentiated (EP's tilted moments).
    """
    mean = jnp.asarray(mean)
    var = jnp.maximum(jnp.asarray(var), 0.0)
    sd = jnp.sqrt(var)
    small = jax.nn.sigmoid(mean[..., None] + sd[..., None] * _GH_X) @ _GH_W
    safe_sd = jnp.where(var > _SWITCH_VAR, sd, 1.0)
    large = ndtr((mean[..., None] - _LOGISTIC_NODES) / safe_sd[..., None]) @ _LOGISTIC_WEIGHTS
    return jnp.where(var > _SWITCH_VAR, large, small)
