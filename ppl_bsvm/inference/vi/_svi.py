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
and ``rho = 1`` this is one sweep of batch coordinate ascent. Both engines take it with
:func:`svi_step`, giving only their model's pieces (:class:`SVIModel`).

Minibatches are drawn without replacement: a stream of permutations of ``0..n-1`` is cut into
consecutive batches, a batch straddling two permutations where one ends, so every epoch (``n``
consecutive stream positions) visits every point exactly once. The permutation of epoch ``e``
is ``i -> order[(a_e i + c_e) mod n]``: ``order`` one uniformly random permutation drawn at the
start (:class:`BatchOrder`, kept with the data), ``a_e`` a random multiplier coprime to ``n`` and
``c_e`` a random offset, so the map is a bijection and, ``order`` being uniform, every batch is
a uniformly random set of points that no earlier batch of its epoch contained. Drawing costs
``O(|S|)`` per step and the sampler's state is five scalars: an ``n``-vector in the state
(a fresh permutation per epoch) was copied by XLA at every step (1.5 ms a step at
``n = 5 x 10^6``, against 0.006 ms without it).

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

A small relative change says that the iterates have slowed down, not that they are near the
optimum: with the rate decayed to ``(t + 1)^{-0.6}`` and batch coordinate ascent itself
contracting by 0.98 per sweep (large kernel variances, near-separable data), S-BSVM stopped
with test latents 23 batch-VI sds from batch VI and linear SVI a Gibbs sd from Gibbs. Both
engines therefore follow this rule with the polish of :mod:`.fixed_point` (Anderson-accelerated
full-data sweeps to the batch fixed point, with a certificate in posterior sds), S-BSVM by
default up to 5000 points (``sbsvm_defaults.default_polish``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

from ..mvn import gaussian_from_precision
from . import elbo as elbo_mod

__all__ = [
    "BatchOrder",
    "batch_order",
    "Batches",
    "StreamKeys",
    "stream_keys",
    "batches_init",
    "next_batch",
    "BatchStatistics",
    "batch_statistics",
    "NaturalTarget",
    "target_from_statistics",
    "natural_target",
    "natural_gradient",
    "latent_marginals",
    "recorded",
    "check_batch_size",
    "period_points",
    "ElboEstimate",
    "estimate_init",
    "estimate_push",
    "SVIModel",
    "StepRecord",
    "rate_init",
    "svi_step",
]


MULTIPLIERS = 256
"""Candidate multipliers of the epochs' affine maps (:class:`BatchOrder`)."""


class BatchOrder(NamedTuple):
    """What the minibatch stream reads besides its state (kept with the data, never carried
    through the loop: module docstring).

    Attributes
    ----------
    order : (N,) int32
        A random permutation of the ``n`` points in its first ``n`` entries (``N >= n`` rows
        when the data are padded; the padding rows are never drawn).
    multipliers : (MULTIPLIERS,) int64
        Random candidates for the multiplier ``a``, those coprime to ``n`` first.
    coprime : () int64
        How many are (at least 1: the candidate 1 always is).
    """

    order: jnp.ndarray
    multipliers: jnp.ndarray
    coprime: jnp.ndarray


class Batches(NamedTuple):
    """Minibatch sampler state: scalars only (module docstring). Its randomness comes from
    the key :func:`next_batch` is given (the loop's, :mod:`ppl_bsvm.inference.loop`).

    Attributes
    ----------
    a, c : () int64
        The current epoch's map ``i -> order[(a i + c) mod n]``.
    next_a, next_c : () int64
        The next epoch's, which a batch straddling the end of the epoch continues into.
    pos : () int64
        Stream position of the next batch's first point within the current epoch.
    """

    a: jnp.ndarray
    c: jnp.ndarray
    next_a: jnp.ndarray
    next_c: jnp.ndarray
    pos: jnp.ndarray


def _permutation(key, size: int, n):
    """A random permutation of ``0..n-1`` in the first ``n`` of ``size`` entries (``n`` traced)."""
    u = jax.random.uniform(key, (size,))
    u = jnp.where(jnp.arange(size) < n, u, 2.0)
    return jnp.argsort(u).astype(jnp.int32)


def batch_order(key, size: int, n=None) -> BatchOrder:
    """The :class:`BatchOrder` of ``n`` points (default ``size``) of arrays with ``size`` rows."""
    n = size if n is None else n
    k_order, k_mult = jax.random.split(key)
    n64 = jnp.asarray(n, jnp.int64)
    candidates = jax.random.randint(k_mult, (MULTIPLIERS,), 1, jnp.maximum(n64, 2),
                                    dtype=jnp.int64).at[-1].set(1)
    ok = jnp.gcd(candidates, n64) == 1
    return BatchOrder(_permutation(k_order, size, n), candidates[jnp.argsort(~ok, stable=True)],
                      jnp.sum(ok).astype(jnp.int64))


def _epoch_map(key, order: BatchOrder, n):
    k_a, k_c = jax.random.split(key)
    a = order.multipliers[jax.random.randint(k_a, (), 0, order.coprime, dtype=jnp.int64)]
    return a, jax.random.randint(k_c, (), 0, jnp.asarray(n, jnp.int64), dtype=jnp.int64)


class StreamKeys(NamedTuple):
    """The keys an SVI run draws from its initial key (:func:`stream_keys`)."""

    epochs: tuple  # the maps of the first two epochs (:func:`batches_init`)
    rate: tuple  # one per batch of the learning rate's initialisation (:func:`rate_init`)
    loop: jnp.ndarray  # the loop's, from which every step's key is split


def stream_keys(key, num_init: int) -> StreamKeys:
    """Split ``key`` into the keys of an SVI run's initialisation and of its loop: the
    engines' ``init`` draws from the first two, ``loop.run`` is given the third."""
    key, first, second = jax.random.split(key, 3)
    rate = []
    for _ in range(num_init):
        key, sub = jax.random.split(key)
        rate.append(sub)
    return StreamKeys((first, second), tuple(rate), key)


def batches_init(keys: StreamKeys, order: BatchOrder, n=None) -> Batches:
    """Sampler over the ``n`` points of ``order`` (default all its rows)."""
    n = order.order.shape[0] if n is None else n
    a, c = _epoch_map(keys.epochs[0], order, n)
    next_a, next_c = _epoch_map(keys.epochs[1], order, n)
    return Batches(a, c, next_a, next_c, jnp.zeros((), jnp.int64))


def next_batch(key, batches: Batches, order: BatchOrder, batch_size: int, n=None):
    """Indices ``(batch_size,)`` of the next minibatch of the ``n`` points (``batch_size <= n``;
    default all rows) and the new state; ``key`` draws the map of the epoch after next. No
    branch and no array in the state: a branch over a carried ``n``-vector made XLA copy it
    at every step (1.5 ms a step at n = 5 x 10^6)."""
    n = order.order.shape[0] if n is None else n
    n = jnp.asarray(n, jnp.int64)
    q = batches.pos + jnp.arange(batch_size, dtype=jnp.int64)
    this = (batches.a * q + batches.c) % n
    after = (batches.next_a * jnp.maximum(q - n, 0) + batches.next_c) % n
    idx = order.order[jnp.where(q < n, this, after)]
    fresh_a, fresh_c = _epoch_map(key, order, n)
    wrap = batches.pos + batch_size >= n
    return idx, Batches(
        jnp.where(wrap, batches.next_a, batches.a),
        jnp.where(wrap, batches.next_c, batches.c),
        jnp.where(wrap, fresh_a, batches.next_a),
        jnp.where(wrap, fresh_c, batches.next_c),
        jnp.where(wrap, batches.pos + batch_size - n, batches.pos + batch_size),
    )


def latent_marginals(Phi, ktilde, mean, chol_prec):
    """``m_i = phi_i^T mean`` and ``s_i = phi_i^T P^{-1} phi_i + ktilde_i`` for the rows of ``Phi``."""
    V = solve_triangular(chol_prec, Phi.T, lower=True)
    return Phi @ mean, jnp.sum(V**2, axis=0) + ktilde


class BatchStatistics(NamedTuple):
    """Sums over a minibatch that the natural-gradient target needs (unscaled): ``g1 =
    Phi_S^T Y_S (1 + alpha_S^{-1/2})`` (k,), ``G2 = Phi_S^T A_S^{-1/2} Phi_S`` (k, k), and per
    point the optimal ``alpha`` (eq. 11) and the data term of the collapsed ELBO. Sums over
    disjoint parts of a batch add, which is what data-parallel steps use (``psum``)."""

    g1: jnp.ndarray
    G2: jnp.ndarray
    alpha: jnp.ndarray
    terms: jnp.ndarray


def batch_statistics(Phi, m, s, y, gamma) -> BatchStatistics:
    """:class:`BatchStatistics` of rows ``Phi (b, k)`` with latent marginals ``m``, ``s`` under
    the current ``q``."""
    alpha = elbo_mod.optimal_alpha(m, s, y)
    root = jnp.sqrt(alpha)
    return BatchStatistics(Phi.T @ (y * (1.0 + 1.0 / root)), (Phi.T * (1.0 / root)) @ Phi,
                           alpha, elbo_mod.collapsed_data_term(m, s, y, gamma))


class NaturalTarget(NamedTuple):
    """``eta1_hat (k,)``, ``prec_hat = -2 eta2_hat (k, k)``, the batch's ``alpha (b,)`` and its
    points' data terms of the collapsed ELBO under the current ``q`` (``terms (b,)``, unscaled)."""

    eta1: jnp.ndarray
    prec: jnp.ndarray
    alpha: jnp.ndarray
    terms: jnp.ndarray


def target_from_statistics(stats: BatchStatistics, prior_prec, scale, gamma) -> NaturalTarget:
    """``eta1_hat = c gamma g1``, ``prec_hat = P0 + c gamma G2`` (module docstring)."""
    prec_hat = prior_prec + scale * gamma * stats.G2
    return NaturalTarget(scale * gamma * stats.g1, 0.5 * (prec_hat + prec_hat.T), stats.alpha,
                         stats.terms)


def natural_target(Phi, ktilde, y, prior_prec, eta1, prec, scale, gamma) -> NaturalTarget:
    """Intermediate natural parameters from a minibatch (module docstring)."""
    mean, chol = gaussian_from_precision(eta1, prec)
    m, s = latent_marginals(Phi, ktilde, mean, chol)
    return target_from_statistics(batch_statistics(Phi, m, s, y, gamma), prior_prec, scale,
                                  gamma)


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


def check_batch_size(batch_size: int, n: int) -> int:
    """``batch_size`` (already a positive int) against the data size (``ValueError``)."""
    if batch_size > n:
        raise ValueError(
            f"batch_size={batch_size} exceeds the number of training points n={n}; "
            f"use batch_size <= {n} (batch_size={n} is full-batch coordinate ascent)"
        )
    return batch_size


# --- the step of both engines ---------------------------------------------------------------


class SVIModel(NamedTuple):
    """The model-specific pieces of a stochastic natural-gradient step (:func:`svi_step`).

    An engine's state is a NamedTuple with at least the fields ``eta1``, ``prec`` (``q``'s
    natural parameters, ``prec = -2 eta2``), ``rate`` (learning-rate state), ``batches``
    (:class:`Batches`), ``count`` (steps taken) and ``estimate`` (:class:`ElboEstimate`); its
    data have ``order`` (:class:`BatchOrder`) and ``period`` (stream positions per period of
    the stopping rule).

    Attributes
    ----------
    target : (state, data, idx) -> NaturalTarget
        The natural-gradient target of the batch ``idx`` under the state's ``q``.
    hyper : (state, data, idx) -> state
        The hyperparameter step that follows ``q``'s update (returns ``state`` when none).
    kl : state -> ()
        ``KL(q || prior)`` at the state.
    exact_elbo : (state, data) -> ()
        The collapsed ELBO over all the data at the state (the ``elbo_every`` diagnostic).
    """

    target: object
    hyper: object
    kl: object
    exact_elbo: object


class StepRecord(NamedTuple):
    """What :func:`svi_step` reports besides the state: the stopping rule's ``value`` and
    ``delta`` (:func:`estimate_push`), the learning rate ``rho`` and ``exact``, the full-data
    ELBO every ``elbo_every`` steps (NaN elsewhere)."""

    value: jnp.ndarray
    delta: jnp.ndarray
    rho: jnp.ndarray
    exact: jnp.ndarray


def rate_init(keys: StreamKeys, rate, target, batch_size: int, n, state, data):
    """``state`` with its learning-rate state: ``rate.init`` of ``rate.num_init`` natural
    gradients of consecutive batches at the state's ``q`` (Ranganath et al.'s initialisation
    of the adaptive rate; none for a schedule), which advance the batch stream.

    ``target`` is :attr:`SVIModel.target`; ``n`` the number of points (may be traced).
    """
    grads = []
    for key in keys.rate:
        idx, batches = next_batch(key, state.batches, data.order, batch_size, n)
        state = state._replace(batches=batches)
        grads.append(natural_gradient(target(state, data, idx), state.eta1, state.prec)[2])
    return state._replace(rate=rate.init(jnp.stack(grads) if grads else None))


def svi_step(model: SVIModel, rate, batch_size: int, elbo_every: int | None, n, key, state,
             data):
    r"""One stochastic natural-gradient step; returns ``(state, StepRecord)``.

    The next batch ``S`` of the stream, its target ``eta_hat`` (``model.target``), the
    learning rate ``rho_t`` from the natural gradient ``eta_hat - eta`` (``rate.update``) and

    .. math:: \eta \leftarrow \eta + \rho_t (\hat\eta - \eta);

    then ``model.hyper``, and the batch's data terms into the stopping rule's estimate, whose
    KL is that of the new state (:func:`estimate_push`); every ``elbo_every`` steps (None:
    never) also ``model.exact_elbo``. ``n`` is the number of points (may be traced); ``key``
    the step's key (:func:`next_batch`).
    """
    idx, batches = next_batch(key, state.batches, data.order, batch_size, n)
    target = model.target(state, data, idx)
    d1, dP, g = natural_gradient(target, state.eta1, state.prec)
    rho, rate_state = rate.update(g, state.rate, state.count)
    count = state.count + 1
    state = state._replace(eta1=state.eta1 + rho * d1, prec=state.prec + rho * dP,
                           rate=rate_state, batches=batches, count=count)
    state = model.hyper(state, data, idx)
    estimate, value, delta = estimate_push(state.estimate, target.terms,
                                           lambda: model.kl(state), n, data.period)
    state = state._replace(estimate=estimate)
    missing = jnp.full((), jnp.nan, state.eta1.dtype)
    if elbo_every is None:
        exact = missing
    else:
        exact = jax.lax.cond(count % elbo_every == 0, lambda s: model.exact_elbo(s, data),
                             lambda s: missing, state)
    return state, StepRecord(value, delta, rho, exact)
