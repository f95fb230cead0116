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

Minibatches are drawn without replacement within an epoch: a permutation of ``0..n-1`` is cut
into consecutive batches and redrawn when fewer than ``|S|`` indices are left (those few are
skipped for that epoch; which ones changes every epoch). Drawing costs ``O(|S|)`` per step
plus one ``O(n)`` permutation per epoch.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve, solve_triangular

from ..._checks import positive_int

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
    "ElboWindow",
    "window_init",
    "window_push",
]


class Batches(NamedTuple):
    """Minibatch sampler state.

    Attributes
    ----------
    key : PRNG key
    perm : (n,) int32
        The current epoch's permutation.
    pos : () int32
        Index into ``perm`` of the next batch.
    """

    key: jnp.ndarray
    perm: jnp.ndarray
    pos: jnp.ndarray


def batches_init(key, n: int) -> Batches:
    key, sub = jax.random.split(key)
    perm = jax.random.permutation(sub, n).astype(jnp.int32)
    return Batches(key, perm, jnp.zeros((), jnp.int32))


def next_batch(batches: Batches, batch_size: int):
    """Indices ``(batch_size,)`` of the next minibatch and the new sampler state."""
    n = batches.perm.shape[0]

    def reshuffle(b):
        key, sub = jax.random.split(b.key)
        return Batches(key, jax.random.permutation(sub, n).astype(jnp.int32), jnp.zeros_like(b.pos))

    batches = jax.lax.cond(batches.pos + batch_size > n, reshuffle, lambda b: b, batches)
    idx = jax.lax.dynamic_slice(batches.perm, (batches.pos,), (batch_size,))
    return idx, batches._replace(pos=batches.pos + batch_size)


def gaussian_from_precision(eta1, prec):
    """``(mean, chol)`` of ``N(P^{-1} eta1, P^{-1})``, ``chol`` the lower Cholesky factor of ``P``."""
    chol = jnp.linalg.cholesky(0.5 * (prec + prec.T))
    return cho_solve((chol, True), eta1), chol


def latent_marginals(Phi, ktilde, mean, chol_prec):
    """``m_i = phi_i^T mean`` and ``s_i = phi_i^T P^{-1} phi_i + ktilde_i`` for the rows of ``Phi``."""
    V = solve_triangular(chol_prec, Phi.T, lower=True)
    return Phi @ mean, jnp.sum(V**2, axis=0) + ktilde


class NaturalTarget(NamedTuple):
    """``eta1_hat (k,)``, ``prec_hat = -2 eta2_hat (k, k)`` and the batch's ``alpha (b,)``."""

    eta1: jnp.ndarray
    prec: jnp.ndarray
    alpha: jnp.ndarray


def natural_target(Phi, ktilde, y, prior_prec, eta1, prec, scale, gamma) -> NaturalTarget:
    """Intermediate natural parameters from a minibatch (module docstring)."""
    mean, chol = gaussian_from_precision(eta1, prec)
    m, s = latent_marginals(Phi, ktilde, mean, chol)
    alpha = (1.0 - y * m) ** 2 + s
    root = jnp.sqrt(alpha)
    eta1_hat = scale * gamma * (Phi.T @ (y * (1.0 + 1.0 / root)))
    prec_hat = prior_prec + scale * gamma * (Phi.T * (1.0 / root)) @ Phi
    return NaturalTarget(eta1_hat, 0.5 * (prec_hat + prec_hat.T), alpha)


def natural_gradient(target: NaturalTarget, eta1, prec):
    """The natural gradient ``eta_hat - eta`` as ``(d_eta1, d_prec)`` and flattened for the rate.

    The flattened vector is in the natural parameters themselves (``d_eta2 = -d_prec / 2``),
    which is what the adaptive rate of Ranganath et al. averages.
    """
    d1 = target.eta1 - eta1
    dP = target.prec - prec
    return d1, dP, jnp.concatenate([d1, -0.5 * dP.ravel()])


class ElboWindow(NamedTuple):
    """The last ``2 w`` full-data ELBO evaluations, for the stopping rule of stochastic VI.

    The ELBO of a stochastic run fluctuates with the minibatch noise of ``q`` (and of the
    hyperparameters), so comparing two single evaluations stops too late or at random. The rule
    compares the means of the last ``w`` evaluations and of the ``w`` before them:
    ``delta = |mean_new - mean_old| / (1 + |mean_new|)``, available once ``2 w`` exist.

    Attributes
    ----------
    values : (2 w,)
        Ring buffer of evaluations.
    count : () int32
        Evaluations so far.
    """

    values: jnp.ndarray
    count: jnp.ndarray

    nonfinite_ok = ("values",)  # empty slots are NaN (``loop`` checks the rest of the state)


def window_init(width: int, first, dtype) -> ElboWindow:
    """A window holding one evaluation (the ELBO at the initial ``q``)."""
    values = jnp.full((2 * width,), jnp.nan, dtype).at[0].set(first)
    return ElboWindow(values, jnp.ones((), jnp.int32))


def window_push(window: ElboWindow, value):
    """Add an evaluation; returns the new window and ``delta`` (``inf`` while too few)."""
    size = window.values.shape[0]
    width = size // 2
    values = window.values.at[window.count % size].set(value)
    count = window.count + 1
    newest = (count - 1 - jnp.arange(size)) % size  # most recent first
    new = jnp.mean(values[newest[:width]])
    old = jnp.mean(values[newest[width:]])
    delta = jnp.where(count >= size, jnp.abs(new - old) / (1.0 + jnp.abs(new)), jnp.inf)
    return ElboWindow(values, count), delta


def recorded(elbo, every: int) -> dict:
    """The ELBO trace as recorded: values at the evaluated steps and their step numbers.

    ``elbo`` is the per-step info array (NaN where the ELBO was not evaluated).
    """
    elbo = np.asarray(elbo)
    steps = np.flatnonzero(np.isfinite(elbo))
    return {"elbo": elbo[steps], "elbo_step": steps + 1}


def check_svi_options(n: int, batch_size, elbo_every, elbo_window, hyper_every=1):
    """Validate the minibatch options against the data size (``ValueError`` naming the option).

    Returns ``(batch_size, elbo_every, elbo_window, hyper_every)``.
    """
    batch_size = positive_int("batch_size", batch_size)
    if batch_size > n:
        raise ValueError(
            f"batch_size={batch_size} exceeds the number of training points n={n}; "
            f"use batch_size <= {n} (batch_size={n} is full-batch coordinate ascent)"
        )
    return (
        batch_size,
        positive_int("elbo_every", elbo_every),
        positive_int("elbo_window", elbo_window),
        positive_int("hyper_every", hyper_every),
    )
