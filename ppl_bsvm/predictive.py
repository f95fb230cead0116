r"""From a latent Gaussian :math:`q(f_*) = N(m, v)` to a class probability P(y = +1).

The Bayesian SVM's pseudo-likelihood :math:`L(y \mid f) = \exp(-2\gamma \max(0, 1 - y f))` is not a
normalised likelihood over y, so there is no unique predictive probability
(``specs/bsvm_inference.md`` section 5). The links offered:

``"paper"``
    Wenzel et al. (2017) eq. 13: :math:`\Phi(m / (v + 1))`.
``"probit"``
    the probit-Gaussian integral :math:`\int \Phi(f) N(f; m, v) df = \Phi(m / \sqrt{1 + v})`.
``"sign"``
    the probability that the latent function is positive, :math:`P(f_* > 0) = \Phi(m/\sqrt v)`.
``"normalized"``
    the normalised pseudo-likelihood :math:`s(f) = L(1|f) / (L(1|f) + L(-1|f))` integrated
    against :math:`N(m, v)`. ``s`` is a logistic function of ``f`` with kinks at ``f = +-1``
    (``sigmoid(2 gamma (f - 1))``, ``sigmoid(4 gamma f)``, ``sigmoid(2 gamma (f + 1))`` on the
    three pieces), so the integral is done piece by piece with Gauss-Legendre over
    ``m +- 10 sqrt(v)`` (Gauss-Hermite over the kinks is off by up to 5e-3).

A :class:`GaussianPredictor` applies a link to one Gaussian per test point (variational and
ECM fits); a :class:`MixturePredictor` averages the link over posterior draws (MCMC fits).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr

from ._runtime import library_numerics
from ._serial import data_object
from ._shapes import pad_rows, padded_call, padded_size

__all__ = [
    "LINKS",
    "DEFAULT_LINK",
    "class_probability",
    "normalized_link",
    "GaussianPredictor",
    "MixturePredictor",
]

LINKS = ("paper", "probit", "sign", "normalized")
DEFAULT_LINK = "probit"

_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(48)
_SPAN = 10.0  # standard deviations covered on each side of the mean


def check_link(link: str) -> str:
    if link not in LINKS:
        raise ValueError(f"unknown link {link!r}; valid links are {list(LINKS)}")
    return link


def normalized_link(f, gamma: float = 1.0):
    r"""``s(f) = L(+1|f) / (L(+1|f) + L(-1|f))`` with ``L(y|f) = exp(-2 gamma max(0, 1 - y f))``."""
    log_l_pos = -2.0 * gamma * jnp.maximum(0.0, 1.0 - f)
    log_l_neg = -2.0 * gamma * jnp.maximum(0.0, 1.0 + f)
    return jax.nn.sigmoid(log_l_pos - log_l_neg)


def class_probability(mean, var, link: str = DEFAULT_LINK, gamma: float = 1.0):
    """P(y = +1) from the latent Gaussian ``N(mean, var)`` under ``link`` (see module doc).

    Parameters
    ----------
    mean, var : array of shape (..., n)
        Latent predictive mean and variance (``var >= 0``).
    link : {"paper", "probit", "sign", "normalized"}
    gamma : float, default=1.0
        Temperature of the pseudo-likelihood (only the ``"normalized"`` link uses it).

    Returns
    -------
    ndarray of shape (..., n)
        Computed by a program compiled once per link and padded length (``_shapes``); under
        ``jit`` (traced inputs) the same formulas as JAX operations.
    """
    check_link(link)
    if isinstance(mean, jax.core.Tracer) or isinstance(var, jax.core.Tracer):
        return _class_probability(mean, var, link, gamma)
    with library_numerics():  # float64 whatever the session's setting
        return _probability_of_arrays(mean, var, link, gamma)


def _probability_of_arrays(mean, var, link, gamma):
    def compiled(m, v):
        return _compiled_probability(m, v, link, gamma)

    mean, var = np.broadcast_arrays(np.asarray(mean, dtype=np.float64),
                                    np.asarray(var, dtype=np.float64))
    if mean.ndim != 2:
        return padded_call(compiled, mean, var)
    # (draws, n*): the draws' axis padded to its bucket too, so that a fit with another number
    # of draws compiles nothing
    rows = mean.shape[0]
    mean, var = (pad_rows(a, padded_size(rows)) for a in (mean, var))
    return padded_call(compiled, mean, var)[:rows]


@functools.partial(jax.jit, static_argnames=("link",))
def _compiled_probability(mean, var, link, gamma):
    return _class_probability(mean, var, link, gamma)


def _class_probability(mean, var, link, gamma):
    mean = jnp.asarray(mean)
    var = jnp.maximum(jnp.asarray(var), 0.0)
    if link == "paper":
        return ndtr(mean / (var + 1.0))
    if link == "probit":
        return ndtr(mean / jnp.sqrt(1.0 + var))
    if link == "sign":
        # var == 0 gives +-inf or nan (0/0): a point mass at the mean decides by its sign.
        z = mean / jnp.sqrt(var)
        return jnp.where(var > 0, ndtr(jnp.where(var > 0, z, 0.0)), (mean > 0) + 0.5 * (mean == 0))
    return _expected_normalized_link(mean, var, gamma)


def _expected_normalized_link(mean, var, gamma):
    """``E[s(f)]``, ``f ~ N(mean, var)``: Gauss-Legendre on each smooth piece of ``s``.

    Where ``sd <= sqrt(eps) (1 + |mean|)`` the nodes ``mean + t sd`` cannot be told apart
    from ``mean`` to more than half the digits (at ``var = 1e-30`` the quadrature returned
    1.02 and 2.81; in float32 at ``mean = 3e4, var = 1e-6``, 1.23), and the point mass
    ``s(mean)`` is the answer to within ``gamma^2 var``: it is used there. The nodes are made
    in the inputs' precision on every trace (a float32 constant cached by one call broke
    every later float64 one), and the result is clipped to [0, 1] against round-off.
    """
    dtype = jnp.promote_types(jnp.result_type(mean, var), jnp.float32)
    mean, var = mean.astype(dtype), var.astype(dtype)
    nodes, weights = np.asarray(_GL_NODES, dtype=dtype), np.asarray(_GL_WEIGHTS, dtype=dtype)
    sd = jnp.sqrt(var)
    resolved = sd > np.sqrt(np.finfo(dtype).eps) * (1.0 + jnp.abs(mean))
    safe_sd = jnp.where(resolved, sd, 1.0)
    lo, hi = mean - _SPAN * sd, mean + _SPAN * sd
    total = jnp.zeros_like(mean)
    for a, b in ((-jnp.inf, -1.0), (-1.0, 1.0), (1.0, jnp.inf)):
        left, right = jnp.clip(a, lo, hi), jnp.clip(b, lo, hi)
        half = 0.5 * (right - left)
        f = (0.5 * (left + right))[..., None] + half[..., None] * nodes
        dens = jnp.exp(-0.5 * ((f - mean[..., None]) / safe_sd[..., None]) ** 2)
        dens = dens / (jnp.sqrt(2.0 * jnp.pi) * safe_sd[..., None])
        total = total + half * jnp.sum(weights * normalized_link(f, gamma) * dens, axis=-1)
    return jnp.where(resolved, jnp.clip(total, 0.0, 1.0), normalized_link(mean, gamma))


@data_object
class GaussianPredictor:
    """Predictions from a Gaussian latent predictive ``q(f*) = N(mean(X), var(X))``.

    Parameters
    ----------
    latent_fn : callable
        ``X (n*, d) float64 -> (mean (n*,), var (n*,))``.
    link : str, default="probit"
    gamma : float, default=1.0
    """

    def __init__(self, latent_fn: Callable, link: str = DEFAULT_LINK, gamma: float = 1.0):
        self.latent_fn = latent_fn
        self.link = check_link(link)
        self.gamma = gamma

    def latent(self, X):
        mean, var = self.latent_fn(X)
        return np.asarray(mean, dtype=np.float64), np.asarray(var, dtype=np.float64)

    def proba(self, X, link: str | None = None):
        mean, var = self.latent(X)
        p = class_probability(mean, var, link or self.link, self.gamma)
        return np.asarray(p, dtype=np.float64)

    def sample_latent(self, X, num_draws: int, seed: int = 0) -> np.ndarray:
        """Draws ``(num_draws, n*)`` of ``f(x*)`` from its marginals ``N(mean, var)``."""
        mean, var = self.latent(X)
        z = np.random.default_rng(seed).standard_normal((num_draws, mean.size))
        return mean + np.sqrt(np.maximum(var, 0.0)) * z


@data_object
class MixturePredictor:
    """Predictions from posterior draws: ``f* | draw s ~ N(m_s(X), v_s(X))``.

    The latent predictive is the mixture over draws: its mean is the average of ``m_s`` and its
    variance ``mean(v_s) + var(m_s)`` (law of total variance). Class probabilities average the
    link over draws, which for ``link="sign"`` is the exact posterior predictive P(f* > 0).

    Parameters
    ----------
    draws_latent_fn : callable
        ``X (n*, d) -> (means (S, n*), vars (S, n*))`` over ``S`` posterior draws.
    link : str, default="probit"
    gamma : float, default=1.0
    """

    def __init__(self, draws_latent_fn: Callable, link: str = DEFAULT_LINK, gamma: float = 1.0):
        self.draws_latent_fn = draws_latent_fn
        self.link = check_link(link)
        self.gamma = gamma

    def latent(self, X):
        means, variances = self.draws_latent_fn(X)
        means, variances = np.asarray(means), np.asarray(variances)
        return means.mean(axis=0), variances.mean(axis=0) + means.var(axis=0)

    def proba(self, X, link: str | None = None):
        means, variances = self.draws_latent_fn(X)
        p = class_probability(means, variances, link or self.link, self.gamma)
        return np.mean(p, axis=0, dtype=np.float64)

    def sample_latent(self, X, num_draws: int, seed: int = 0) -> np.ndarray:
        """Draws ``(num_draws, n*)`` of ``f(x*)``: a posterior draw, then its conditional."""
        means, variances = self.draws_latent_fn(X)
        means, variances = np.asarray(means), np.asarray(variances)
        rng = np.random.default_rng(seed)
        pick = rng.integers(0, means.shape[0], num_draws)
        z = rng.standard_normal((num_draws, means.shape[1]))
        return means[pick] + np.sqrt(np.maximum(variances[pick], 0.0)) * z
