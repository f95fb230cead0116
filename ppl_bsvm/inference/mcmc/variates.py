r"""Random variates of the exact Gibbs sampler: normals, :math:`\chi^2_1`, GIG(1/2), inverse
Gaussian.

The ``lam`` conditional of the sampler
(:func:`~ppl_bsvm.inference.mcmc.conditionals.sample_lam`) is a :math:`\mathrm{GIG}(1/2)`
law, the reciprocal of an inverse Gaussian. Both are drawn here by a cancellation-free form of
Michael, Schucany & Haas (1976), exact on the margin, where the inverse Gaussian's mean is
infinite; the draws take their :math:`\chi^2_1` from both halves of Box-Muller pairs
(:func:`chi2_1`, half the cost of float64 ``erf_inv`` normals), and the GP sweep's normals are
drawn the same way (:func:`standard_normal`). :class:`InverseGaussian` is the law as a NumPyro
distribution (NumPyro 0.22 has none).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from jax import random
from jax.scipy.special import log_ndtr
from numpyro.distributions import constraints
from numpyro.distributions.util import promote_shapes, validate_sample
from numpyro.util import is_prng_key

__all__ = ["InverseGaussian", "chi2_1", "sample_gig_half", "standard_normal"]


def _box_muller(key, size: int, dtype, angle: float):
    """``(R^2, theta)`` of ``ceil(size / 2)`` Box-Muller pairs: ``R^2 = -2 log(1 - u)``,
    ``theta = angle * v`` with ``u, v ~ U(0, 1)``."""
    u = random.uniform(key, (2, (size + 1) // 2), dtype)
    return -2.0 * jnp.log(1.0 - u[0]), angle * u[1]  # 1 - u in (0, 1]: finite


def standard_normal(key, shape=(), dtype=float):
    r"""Independent ``N(0, 1)`` draws: both normals ``(R cos theta, R sin theta)`` of Box-Muller
    pairs, ``R^2 = -2 log(1 - u)``, ``theta = 2 pi v`` (about half the cost of
    ``random.normal``'s float64 ``erf_inv``; see :func:`chi2_1`)."""
    shape = tuple(shape)
    size = int(np.prod(shape, dtype=np.int64))
    r2, theta = _box_muller(key, size, dtype, 2.0 * jnp.pi)
    radius = jnp.sqrt(r2)
    both = jnp.concatenate([radius * jnp.cos(theta), radius * jnp.sin(theta)])
    return both[:size].reshape(shape)


def chi2_1(key, shape=(), dtype=float):
    r"""Independent :math:`\chi^2_1` draws: the squares of both normals of Box-Muller pairs.

    With ``u, v ~ U(0, 1)``, ``R^2 = -2 log(1 - u)`` and ``theta = 2 pi v``, the pair
    ``(R cos theta, R sin theta)`` is two independent ``N(0, 1)`` draws, so
    ``R^2 cos^2 theta`` and ``R^2 sin^2 theta`` are two independent :math:`\chi^2_1` draws
    (``theta = pi v`` gives the same squares: they have period ``pi``). One ``log`` and two
    trigonometric calls per pair cost about half of the float64 ``erf_inv`` with which
    ``random.normal`` draws each normal, and the GIG / inverse-Gaussian draws only need the
    square of the normal.
    """
    shape = tuple(shape)
    size = int(np.prod(shape, dtype=np.int64))
    r2, theta = _box_muller(key, size, dtype, jnp.pi)
    both = jnp.concatenate([r2 * jnp.cos(theta) ** 2, r2 * jnp.sin(theta) ** 2])
    return both[:size].reshape(shape)


def _gig_half_from_chi2(chi2, u, r, a):
    r"""``GIG(1/2, a, a r^2)`` draw from ``chi2 ~ chi^2_1``, ``u ~ U(0, 1)`` (cancellation-free).

    Michael, Schucany & Haas (1976) for ``1/lam ~ IG(1/r, a)``, rewritten for ``lam``: with
    ``s = chi2 / a`` (``chi2 = nu^2`` for the usual normal ``nu``),

    .. math:: \lambda_1 = r + s/2 + \sqrt{r s + s^2/4}, \qquad
              \lambda = \lambda_1 \text{ w.p. } \lambda_1/(\lambda_1 + r),
              \text{ else } r^2/\lambda_1 .

    Every term is positive (no subtraction), and at ``r = 0`` it returns ``s``, the exact
    ``GIG(1/2, a, 0) = Gamma(1/2, rate a/2)`` limit, so no floor on ``r`` is needed.
    """
    s = chi2 / a
    lam1 = r + 0.5 * s + jnp.sqrt(r * s + 0.25 * s**2)
    return jnp.where(u * (lam1 + r) <= lam1, lam1, r**2 / lam1)


def sample_gig_half(key, a, b, shape=()):
    r"""Draws of :math:`\mathrm{GIG}(1/2, a, b)`, density :math:`\propto \lambda^{-1/2}
    e^{-(a\lambda + b/\lambda)/2}` on :math:`\lambda > 0`.

    Parameters
    ----------
    key : PRNG key
    a : array, > 0
    b : array, >= 0 (``b = 0`` gives the Gamma(1/2, rate a/2) limit)
    shape : tuple, default=()
        Sample shape prepended to the broadcast shape of ``a`` and ``b``.

    Returns
    -------
    array of shape ``shape + broadcast(a, b).shape``

    Notes
    -----
    Moments: :math:`E[\lambda] = \sqrt{b/a} + 1/a` and :math:`E[1/\lambda] = \sqrt{a/b}`
    (``K_{3/2}(z) / K_{1/2}(z) = 1 + 1/z``). Equivalent to ``1 / InverseGaussian(sqrt(a/b), a)``.
    """
    a, b = jnp.asarray(a), jnp.asarray(b)
    dtype = jnp.result_type(a, b, float)
    full = tuple(shape) + jnp.broadcast_shapes(a.shape, b.shape)
    k_chi, k_u = random.split(key)
    chi2 = chi2_1(k_chi, full, dtype)
    u = random.uniform(k_u, full, dtype)
    return _gig_half_from_chi2(chi2, u, jnp.sqrt(b / a), a)


class InverseGaussian(dist.Distribution):
    r"""Inverse Gaussian (Wald) distribution with mean ``loc`` and shape ``concentration``.

    .. math:: p(x \mid \mu, \lambda) = \sqrt{\frac{\lambda}{2\pi x^3}}
              \exp\left(-\frac{\lambda (x - \mu)^2}{2\mu^2 x}\right), \quad x > 0.

    NumPyro 0.22 has none, and ``jax.random.wald`` uses the textbook Michael-Schucany-Haas
    formula that cancels catastrophically for large means (``specs/stack_notes.md`` 2.0);
    this sampler is the cancellation-free form of :func:`sample_gig_half` and accepts
    ``loc = inf`` (the Levy limit), which is what ``1/|1 - y f|`` gives on the margin.

    Parameters
    ----------
    loc : array
        Mean :math:`\mu > 0`.
    concentration : array, default=1.0
        Shape :math:`\lambda > 0`.

    Notes
    -----
    ``scipy.stats.invgauss(mu=loc / concentration, scale=concentration)`` is the same law.
    """

    arg_constraints = {"loc": constraints.positive, "concentration": constraints.positive}
    support = constraints.positive
    reparametrized_params = []

    def __init__(self, loc, concentration=1.0, *, validate_args=None):
        self.loc, self.concentration = promote_shapes(loc, concentration)
        batch_shape = jax.lax.broadcast_shapes(jnp.shape(loc), jnp.shape(concentration))
        super().__init__(batch_shape=batch_shape, validate_args=validate_args)

    def sample(self, key, sample_shape=()):
        assert is_prng_key(key)
        shape = tuple(sample_shape) + self.batch_shape
        k_chi, k_u = random.split(key)
        dtype = jnp.result_type(self.loc, float)
        chi2 = chi2_1(k_chi, shape, dtype)
        u = random.uniform(k_u, shape, dtype)
        return 1.0 / _gig_half_from_chi2(chi2, u, 1.0 / self.loc, self.concentration)

    @validate_sample
    def log_prob(self, value):
        lam = self.concentration
        # (x - mu)^2 / (mu^2 x) written as (x/mu - 1)^2 / x: finite for huge mu
        return 0.5 * (jnp.log(lam) - jnp.log(2.0 * jnp.pi) - 3.0 * jnp.log(value)) - (
            lam * (value / self.loc - 1.0) ** 2 / (2.0 * value)
        )

    def cdf(self, value):
        lam = self.concentration
        root = jnp.sqrt(lam / value)
        first = log_ndtr(root * (value / self.loc - 1.0))
        second = 2.0 * lam / self.loc + log_ndtr(-root * (value / self.loc + 1.0))
        return jnp.exp(jnp.logaddexp(first, second))

    @property
    def mean(self):
        return jnp.broadcast_to(self.loc, self.batch_shape)

    @property
    def variance(self):
        return jnp.broadcast_to(self.loc**3 / self.concentration, self.batch_shape)
