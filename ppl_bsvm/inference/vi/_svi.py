r"""Stochastic natural-gradient machinery shared by linear SVI and S-BSVM.

Both engines hold a global Gaussian ``q(w) = N(mu, P^{-1})`` in natural parameters
``eta1 = P mu``, ``eta2 = -P / 2``, with a Gaussian prior of precision ``P0`` and a latent
function ``f_i = phi_i^T w + e_i``, ``e_i ~ N(0, ktilde_i)`` independent (linear model:
``phi_i = x_i``, ``ktilde = 0``, ``w = beta``; S-BSVM in whitened coordinates:
``phi_i = L^{-1} K_{m i}``, ``w = v = L^{-1} u``, ``P0 = I``). For a minibatch ``S`` with scale
``c = n / |S|`` the optimal local parameters ``alpha_S`` (paper eq. 11) give the intermediate
natural parameters (Hoffman et al. 2013; paper eqs. 9-10 and Alg. 1, with the scale ``c`` that
Alg. 1 omits)

.. math::

    \hat\eta_1 = c\,\gamma\,\Phi_S^\top Y_S (1 + \alpha_S^{-1/2}), \qquad
    -2\hat\eta_2 = \hat P = P_0 + c\,\gamma\,\Phi_S^\top A_S^{-1/2} \Phi_S,

and the natural-gradient step is ``eta <- (1 - rho) eta + rho eta_hat``. With the full batch
and ``rho = 1`` this is one sweep of batch coordinate ascent.

Minibatches are drawn without replacement: a stream of independent permutations of
``0..n-1`` is cut into consecutive batches, a batch straddling two permutations where one ends,
so every epoch (``n`` consecutive stream positions) visits every point exactly once. Drawing
costs ``O(|S|)`` per step plus one ``O(n)`` permutation per epoch.

**Stopping in epochs** (:class:`ElboEstimate`). Each step already has the batch's latent
marginals under the current ``q``, hence each point's data term of the collapsed ELBO
(``elbo.collapsed_data_term``). Summed over a period of ``P`` stream positions
(``check_every`` epochs) and scaled by ``n / P``, minus the KL of ``q`` at the period's end,
they estimate the ELBO along that period at no extra pass over the data. With ``P = n`` (the
default, one epoch) each point enters exactly once, so the estimate has no sampling noise at
all (only ``q``'s movement within the epoch); for ``P < n`` its sampling variance is
``n^2 s^2 / P (1 - P / n)`` (``s^2`` the variance of the period's terms, the finite-population
correction for sampling without replacement). The run stops at the end of a period when the
change from the previous period's estimate, less twice its standard error, is below
``tol (1 + |ELBO|)``: at the earliest after two periods, two epochs by default, where the old
rule (a full-data ELBO every ``elbo_every`` steps, means of windows of ``elbo_window`` of them)
could not stop before 1000 steps.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve, solve_triangular

from ..._checks import positive_float, positive_int
from . import elbo as elbo_mod

__all__ = [
    "Batches",
    "batches_init",
    "next_batch",
    "NaturalTarget",
    "natural_target",
    "natural_gradient",
    "gaussian_from_precision",
    "latent_marginals",
    "recorded",
    "check_svi_options",
    "period_points",
    "ElboEstimate",
    "estimate_init",
    "estimate_push",
]


class Batches(NamedTuple):
    """Minibatch sampler state: a stream of permutations (module docstring).

    Attributes
    ----------
    key : PRNG key
    perm : (N,) int32
        The current epoch's permutation of the ``n`` points in its first ``n`` entries (``N >= n``
        rows when the data are padded; the padding rows are never drawn).
    next_perm : (N,) int32
        The next epoch's, which a batch straddling the end of ``perm`` continues into.
    pos : () int32
        Index into ``perm`` of the next batch's first point.
    """

    key: jnp.ndarray
    perm: jnp.ndarray
    next_perm: jnp.ndarray
    pos: jnp.ndarray


def _permutation(key, size: int, n):
    """A random permutation of ``0..n-1`` in the first ``n`` of ``size`` entries (``n`` traced)."""
    u = jax.random.uniform(key, (size,))
    u = jnp.where(jnp.arange(size) < n, u, 2.0)
    return jnp.argsort(u).astype(jnp.int32)


def batches_init(key, size: int, n=None) -> Batches:
    """Sampler over ``n`` points (default ``size``) of arrays with ``size`` rows."""
    n = size if n is None else n
    key, first, second = jax.random.split(key, 3)
    return Batches(key, _permutation(first, size, n), _permutation(second, size, n),
                   jnp.zeros((), jnp.int32))


def next_batch(batches: Batches, batch_size: int, n=None):
    """Indices ``(batch_size,)`` of the next minibatch of the ``n`` points (``batch_size <= n``;
    default all rows) and the new state."""
    size = batches.perm.shape[0]
    n = size if n is None else n
    q = batches.pos + jnp.arange(batch_size, dtype=jnp.int32)
    idx = jnp.where(q < n, batches.perm[jnp.minimum(q, size - 1)],
                    batches.next_perm[jnp.clip(q - n, 0, size - 1)])

    def next_epoch(b):
        key, sub = jax.random.split(b.key)
        return Batches(key, b.next_perm, _permutation(sub, size, n), b.pos + batch_size - n)

    batches = jax.lax.cond(batches.pos + batch_size >= n, next_epoch,
                           lambda b: b._replace(pos=b.pos + batch_size), batches)
    return idx, batches


def gaussian_from_precision(eta1, prec):
    """``(mean, chol)`` of ``N(P^{-1} eta1, P^{-1})``, ``chol`` the lower Cholesky factor of ``P``."""
    chol = jnp.linalg.cholesky(0.5 * (prec + prec.T))
    return cho_solve((chol, True), eta1), chol


def latent_marginals(Phi, ktilde, mean, chol_prec):
    """``m_i = phi_i^T mean`` and ``s_i = phi_i^T P^{-1} phi_i + ktilde_i`` for the rows of ``Phi``."""
    V = solve_triangular(chol_prec, Phi.T, lower=True)
    return Phi @ mean, jnp.sum(V**2, axis=0) + ktilde


class NaturalTarget(NamedTuple):
    """``eta1_hat (k,)``, ``prec_hat = -2 eta2_hat (k, k)``, the batch's ``alpha (b,)`` and its
    points' data terms of the collapsed ELBO under the current ``q`` (``terms (b,)``, unscaled)."""

    eta1: jnp.ndarray
    prec: jnp.ndarray
    alpha: jnp.ndarray
    terms: jnp.ndarray


def natural_target(Phi, ktilde, y, prior_prec, eta1, prec, scale, gamma) -> NaturalTarget:
    """Intermediate natural parameters from a minibatch (module docstring)."""
    mean, chol = gaussian_from_precision(eta1, prec)
    m, s = latent_marginals(Phi, ktilde, mean, chol)
    alpha = (1.0 - y * m) ** 2 + s
    root = jnp.sqrt(alpha)
    eta1_hat = scale * gamma * (Phi.T @ (y * (1.0 + 1.0 / root)))
    prec_hat = prior_prec + scale * gamma * (Phi.T * (1.0 / root)) @ Phi
    terms = elbo_mod.collapsed_data_term(m, s, y, gamma)
    return NaturalTarget(eta1_hat, 0.5 * (prec_hat + prec_hat.T), alpha, terms)


def natural_gradient(target: NaturalTarget, eta1, prec):
    """The natural gradient ``eta_hat - eta`` as ``(d_eta1, d_prec)`` and flattened for the rate.

    The flattened vector is in the natural parameters themselves (``d_eta2 = -d_prec / 2``),
    which is what the adaptive rate of Ranganath et al. averages.
    """
    d1 = target.eta1 - eta1
    dP = target.prec - prec
    return d1, dP, jnp.concatenate([d1, -0.5 * dP.ravel()])


def period_points(n: int, batch_size: int, check_every: float) -> int:
    """Stream positions per period of the stopping rule: ``check_every`` epochs, at least one
    batch (so that a batch closes at most one period)."""
    return max(int(batch_size), int(round(check_every * n)))


class ElboEstimate(NamedTuple):
    """The stopping rule's running estimate of the ELBO (module docstring).

    Attributes
    ----------
    acc, acc2 : ()
        Sum and sum of squares of the data terms of the current period's points.
    filled : () int32
        Points of the current period so far.
    last : ()
        Estimate of the last closed period (NaN before the first).
    last_var : ()
        Its sampling variance.
    """

    acc: jnp.ndarray
    acc2: jnp.ndarray
    filled: jnp.ndarray
    last: jnp.ndarray
    last_var: jnp.ndarray

    nonfinite_ok = ("last",)  # NaN until a period closes (``loop`` checks the rest)


def estimate_init(dtype) -> ElboEstimate:
    zero = jnp.zeros((), dtype)
    return ElboEstimate(zero, zero, jnp.zeros((), jnp.int32), jnp.full((), jnp.nan, dtype), zero)


def estimate_push(est: ElboEstimate, terms, kl, n, period):
    """Add a batch's data ``terms (b,)``; returns ``(est, value, delta)``.

    ``kl`` is a function of no arguments giving the KL term, evaluated only when the batch
    closes a period; ``value`` is then the period's ELBO estimate and ``delta`` the stopping
    statistic ``max(|value - last| - 2 sqrt(var + last_var), 0) / (1 + |value|)`` (``inf`` for
    the first period); elsewhere ``value`` is NaN and ``delta`` ``inf``. ``n`` (the number of
    points) and ``period`` (stream positions per period, at least the batch size) may be
    traced.
    """
    b = terms.shape[0]
    inside = jnp.arange(b) < period - est.filled  # the batch's points in the current period
    # in the terms' precision, so that the finite-population factor of a whole epoch is 0
    # exactly (an int32 count divided in float32 is not)
    n_f, period_f = jnp.asarray(n, terms.dtype), jnp.asarray(period, terms.dtype)
    acc = est.acc + jnp.sum(jnp.where(inside, terms, 0.0))
    acc2 = est.acc2 + jnp.sum(jnp.where(inside, terms**2, 0.0))

    def close(_):
        value = (n_f / period_f) * acc - kl()
        spread = jnp.maximum(acc2 - acc**2 / period_f, 0.0) / jnp.maximum(period_f - 1.0, 1.0)
        var = n_f * spread / period_f * jnp.maximum(n_f - period_f, 0.0)
        change = jnp.abs(value - est.last) - 2.0 * jnp.sqrt(var + est.last_var)
        delta = jnp.where(jnp.isfinite(est.last),
                          jnp.maximum(change, 0.0) / (1.0 + jnp.abs(value)), jnp.inf)
        rest = jnp.where(inside, 0.0, terms)
        new = ElboEstimate(jnp.sum(rest), jnp.sum(rest**2), est.filled + b - period, value, var)
        return new, value, delta

    def keep(_):
        new = est._replace(acc=acc, acc2=acc2, filled=est.filled + b)
        return new, jnp.full((), jnp.nan, acc.dtype), jnp.full((), jnp.inf, acc.dtype)

    return jax.lax.cond(est.filled + b >= period, close, keep, None)


def recorded(elbo, name: str = "elbo") -> dict:
    """A trace as recorded: the values at the steps where it was evaluated (the per-step info
    array is NaN elsewhere) as ``name``, and those step numbers as ``name + "_step"``."""
    elbo = np.asarray(elbo)
    steps = np.flatnonzero(np.isfinite(elbo))
    return {name: elbo[steps], f"{name}_step": steps + 1}


def check_svi_options(n: int, batch_size, check_every, elbo_every, hyper_every=1):
    """Validate the minibatch options against the data size (``ValueError`` naming the option).

    Returns ``(batch_size, check_every, elbo_every, hyper_every)``; ``elbo_every`` may be None.
    """
    batch_size = positive_int("batch_size", batch_size)
    if batch_size > n:
        raise ValueError(
            f"batch_size={batch_size} exceeds the number of training points n={n}; "
            f"use batch_size <= {n} (batch_size={n} is full-batch coordinate ascent)"
        )
    return (
        batch_size,
        positive_float("check_every", check_every),
        None if elbo_every is None else positive_int("elbo_every", elbo_every),
        positive_int("hyper_every", hyper_every),
    )
