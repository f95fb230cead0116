r"""Pareto-smoothed importance sampling (PSIS) of a Gaussian VI fit against the exact posterior.

Yao, Vehtari, Simpson and Gelman, "Yes, but did it work?: Evaluating variational inference"
(ICML 2018); Vehtari et al., "Pareto smoothed importance sampling" (JMLR 2024). With draws
``x_s ~ q`` and the model's exact unnormalised log posterior (the pseudo-likelihood with
``lam`` integrated out),

.. math::

    \log r_s = \log p(x_s, y) - \log q(x_s), \qquad
    \log p(\beta, y) = \log N(\beta; 0, s^2 I) - 2\gamma \sum_i \max(0, 1 - z_i^\top \beta),

PSIS replaces the largest ratios by the quantiles of a generalised Pareto fitted to their
tail (``arviz_stats.base.array_stats.psislw``). The tail's shape ``k-hat`` says whether ``q``
is usable: below 0.5 the importance-weighted estimates converge fast; below 0.7 they are
usable, and the corrected means ``sum_s w_s x_s`` and sds are reported; above 0.7 the
importance weights are unreliable and ``q`` is far from the posterior in some direction
(typically too narrow: mean-field VI). Only the Gaussian ``q(beta)`` of the linear model has a
density whose ratio to the posterior is cheap and well conditioned here; the GP models'
``f`` lives in ``n`` dimensions where importance sampling fails anyway.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["KHAT_OK", "KHAT_GOOD", "JOINT_DIM", "MIN_DRAWS", "PSIS", "psis", "linear_log_ratios",
           "khat_verdict"]

KHAT_OK = 0.7
"""Largest ``k-hat`` for which the importance-weighted corrections are reported."""

KHAT_GOOD = 0.5
"""Below this ``k-hat`` the importance-weighted estimates converge at the usual rate."""

JOINT_DIM = 20
"""Dimension from which a large ``k-hat`` is read as a statement about the joint density ratio
(:func:`khat_verdict`)."""


def khat_verdict(khat: float, dim: int | None = None,
                 linear_response: bool | None = None) -> str:
    """What ``k-hat`` says of a Gaussian ``q`` in ``dim`` dimensions, and what to do.

    ``k-hat`` is the tail shape of the importance ratios ``p(x) / q(x)`` of the *joint*
    density. Below :data:`KHAT_GOOD` q is close to the posterior; below :data:`KHAT_OK` the
    importance-weighted means and sds correct it. Above, importance weighting cannot correct
    ``q``; in a few dimensions that means q misses the posterior in some direction (mean-field
    VI: too narrow), but from a few dozen on (:data:`JOINT_DIM`) the ratio multiplies small
    errors of every coordinate and ``k-hat`` exceeds 0.7 even where every marginal is right
    (linear response on breast cancer, 31 coefficients: sd ratio 0.99, 90 % coverage 0.89,
    ``k-hat`` 1.02), so it then says nothing about which marginals are off: a sampler does.
    ``linear_response`` (whether the fit asked for the linear-response covariance; None:
    unknown) changes the advice: a mean-field fit is told to use it, a fit that used it (or
    asked and fell back to mean-field) to use a sampler.
    """
    if khat < KHAT_GOOD:
        return "good: q is close to the exact posterior"
    if khat < KHAT_OK:
        return "usable: the importance-weighted means and sds in idata.approximation correct q"
    if dim is not None and dim >= JOINT_DIM:
        verdict = (f"importance weighting cannot correct q as a whole; in {dim} dimensions the "
                   "joint density ratio multiplies small errors of every coordinate, so k-hat "
                   "above 0.7 is common even when the marginals are accurate and does not say "
                   "which are off (compare with a sampler: sd_ratio, coverage)")
    else:
        verdict = ("q is far from the exact posterior in some direction (too narrow?): do not "
                   "trust its uncertainty")
    if linear_response:
        return verdict + "; linear_response=True was already asked for: for the exact " \
            "posterior use method='gibbs'"
    if linear_response is None:
        return verdict
    return verdict + "; linear_response=True widens a too-narrow mean-field covariance, " \
        "method='gibbs' gives the exact posterior"


MIN_DRAWS = 100
"""Fewest draws for which ``k-hat`` is computed (its tail fit needs about ``3 sqrt(S)``)."""


class PSIS(NamedTuple):
    """PSIS of draws ``(S, dim)``: ``khat ()``, normalised smoothed ``log_weights (S,)``,
    ``ess ()`` (the weights' effective sample size ``1 / sum w^2``) and the weighted ``mean``
    and ``sd`` ``(dim,)``, None when ``khat >= KHAT_OK``."""

    khat: float
    log_weights: np.ndarray
    ess: float
    mean: np.ndarray | None
    sd: np.ndarray | None


CHUNK = 2048
"""Rows of ``Z`` per block of :func:`linear_log_ratios` (memory ``O(S CHUNK)``)."""


def _hinge_sums(Z, draws):
    """``sum_i max(0, 1 - z_i^T beta_s)`` for each draw, over blocks of :data:`CHUNK` rows."""
    n, p = Z.shape
    blocks = -(-n // CHUNK)
    Zb = jnp.pad(Z, ((0, blocks * CHUNK - n), (0, 0))).reshape(blocks, CHUNK, p)
    mask = (jnp.arange(blocks * CHUNK) < n).reshape(blocks, CHUNK).astype(Z.dtype)

    def body(acc, block):
        z, keep = block
        return acc + jnp.maximum(0.0, 1.0 - draws @ z.T) @ keep, None

    return jax.lax.scan(body, jnp.zeros(draws.shape[0], draws.dtype), (Zb, mask))[0]


@jax.jit
def linear_log_ratios(Z, prior_scale, gamma, mean, cov_factor, draws):
    """``log p(beta_s, y) - log q(beta_s)`` (module doc, up to a constant) for draws ``(S, p)``
    of ``q = N(mean, F F^T)`` with ``F = cov_factor`` lower triangular: ``O(S n p)``."""
    log_p = (-0.5 * jnp.sum(draws**2, axis=1) / prior_scale**2
             - 2.0 * gamma * _hinge_sums(Z, draws))
    white = jax.scipy.linalg.solve_triangular(cov_factor, (draws - mean).T, lower=True)
    log_q = -0.5 * jnp.sum(white**2, axis=0) - jnp.sum(jnp.log(jnp.abs(jnp.diag(cov_factor))))
    return log_p - log_q


def psis(log_ratios, draws) -> PSIS | None:
    """PSIS of ``draws (S, dim)`` with log importance ratios ``(S,)`` (module doc); None with
    fewer than :data:`MIN_DRAWS` draws or non-finite ratios."""
    from arviz_stats.base import array_stats

    log_ratios = np.asarray(log_ratios, dtype=np.float64)
    draws = np.asarray(draws, dtype=np.float64)
    if log_ratios.size < MIN_DRAWS or not np.all(np.isfinite(log_ratios)):
        return None
    spread = np.max(log_ratios) - np.min(log_ratios)
    if spread <= 1e-9 * max(1.0, np.max(np.abs(log_ratios))):
        # constant ratios: q is the target (up to rounding), no tail to fit
        log_w, khat = np.full(log_ratios.size, -np.log(log_ratios.size)), 0.0
    else:
        # psislw takes LOO's log-likelihoods, whose negatives are the log ratios
        try:
            log_w, khat = array_stats.psislw(np.max(log_ratios) - log_ratios)
        except ValueError:
            # "All tail values are the same" (inputs of 1e148 tie the largest ratios): a flat
            # tail is the lightest there is (k <= 0), and the raw ratios need no smoothing
            log_w, khat = log_ratios - np.max(log_ratios), 0.0
    log_w = np.asarray(log_w, dtype=np.float64)
    khat = float(khat)
    w = np.exp(log_w - np.max(log_w))
    w /= w.sum()
    ess = float(1.0 / np.sum(w**2))
    mean = sd = None
    if khat < KHAT_OK:
        mean = w @ draws
        sd = np.sqrt(np.maximum(w @ (draws - mean) ** 2, 0.0))
    return PSIS(khat, log_w, ess, mean, sd)
