"""One sweep of the exact Gibbs sampler over the state of a chain.

:class:`~ppl_bsvm.inference._common.LinearData` (the linear model as all its engines see it;
``rows`` are the sampler's) and :class:`GPData` are the two models as the sampler sees them;
:class:`LineMoves` holds a chain's line-move directions and the warmup statistics they are
learned from; :class:`GibbsState` is the state of one chain. :func:`gibbs_step` is one sweep:
the scale step (:func:`~ppl_bsvm.inference.mcmc.line_moves.sample_scale`), the line moves
(:func:`~ppl_bsvm.inference.mcmc.line_moves.sample_line`), ``lam | z``, then ``z | lam``
(:mod:`ppl_bsvm.inference.mcmc.conditionals`). :func:`init_state` starts a chain, and
:func:`log_density` is the log marginal posterior the sweep leaves invariant.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import random
from jax.scipy.linalg import solve_triangular

from .._common import GPData, LinearData
from . import packed
from .conditionals import LAM_FLOOR, Whitened, draw_f, sample_beta, sample_lam
from .line_moves import _MAX_LINE_TRIALS, _PROPOSALS, _SPACING, sample_line, sample_scale

__all__ = [
    "LineMoves",
    "GPData",
    "GibbsState",
    "gibbs_step",
    "log_density",
]


class LineMoves(NamedTuple):
    """Directions of one chain's line moves (:func:`sample_line`) and the warmup statistics
    they are learned from (a pytree carried in :class:`GibbsState`).

    Attributes
    ----------
    V : (k, d)
        The directions, each scaled by the posterior sd along it, so that one unit of ``t``
        is about one sd (the envelope's grid is laid out in those units).
    dm : (k, n)
        Change of the margins per unit along each direction (``Z v`` or ``y * v``).
    PU : (k, d, 2)
        For each direction, ``P v`` (the prior precision times it: ``v / prior_scale^2`` or
        ``K^-1 v``) and ``u = v / sd^2`` for learned directions (``sd`` the sd along ``v``,
        so that ``u^T z`` is ``z``'s coordinate along it in units of ``t``; zero for fixed
        ones), side by side so that one product with ``z`` gives both.
    white : (k, d)
        The directions in the prior's whitened coordinates, ``L^{-1} v`` (``K = L L^T``) or
        ``v / prior_scale``: a move by ``t v`` moves :attr:`GibbsState.white` by ``t`` times
        it.
    a : (k,)
        ``v^T P v``.
    center : (k,)
        ``u^T mu``, ``mu`` the mean of the window they were learned from: the line through
        ``z`` along ``v`` has its mode, under the Gaussian of that window, at
        ``p = center - u^T z`` (principal axes are independent under it).
    place : (k, 3)
        Where :func:`sample_line` starts its grid along each direction: exponentially
        weighted sums of ``t p`` and ``p^2`` over the chain's draws ``t`` along it, for a
        start at ``rho p``, ``rho = clip(sum t p / sum p^2, 0, 1)`` (the regression of the
        draws on the prediction: close to 1 for the linear model; the GP's Gaussian of the
        warmup predicts the line's mode less well), and the spacing the previous draw ended
        with.
    count : () float
        Draws in the current warmup window.
    mean : (d,)
        Welford's running mean of the window's draws.
    m2 : (d, d) or (WINDOW_DRAWS, d)
        Up to :data:`WINDOW_DRAWS` dimensions (or for as many directions), Welford's sum of
        squared deviations of the window's draws; beyond, the window's last
        :data:`WINDOW_DRAWS` draws themselves (a ring), whose singular value decomposition
        gives the principal directions in ``O(d w^2)`` time and ``w d`` memory, where the
        ``d x d`` matrix costs ``d^2`` memory per chain and an ``O(d^3)`` eigendecomposition
        (at d = 5,000, 4 chains: 191 MiB per chain and 69 s per window on one core, against
        20 MiB and 2.2 s with 512 kept draws).
    """

    V: jnp.ndarray
    dm: jnp.ndarray
    PU: jnp.ndarray
    white: jnp.ndarray
    a: jnp.ndarray
    center: jnp.ndarray
    place: jnp.ndarray
    count: jnp.ndarray
    mean: jnp.ndarray
    m2: jnp.ndarray


WINDOW_DRAWS = 512
"""Dimension beyond which a window keeps its last draws rather than their ``d x d`` sum of
squared deviations (:attr:`LineMoves.m2`); the default warmup's windows (250 and 500 draws)
are kept whole, so their directions are those of the ``d x d`` form."""


def _keeps_draws(k: int, d: int) -> bool:
    """Whether ``k`` directions in ``d`` dimensions are learned from kept draws (more than
    :data:`WINDOW_DRAWS` dimensions, fewer directions than kept draws can span)."""
    return d > WINDOW_DRAWS and k < WINDOW_DRAWS


def _fresh_moves(V, data, U=None, mean=None) -> LineMoves:
    """:class:`LineMoves` along directions ``V`` (k, d), with an empty warmup window: their
    effect on the margins (``dm``) and on the prior (``P v``, ``a``), and the prediction of
    the mode along them (``U``, ``center``; none when ``U`` is None)."""
    if isinstance(data, LinearData):
        dm, white, Pv = V @ data.Z.T, V / data.prior_scale, V / data.prior_scale**2
    else:
        half = solve_triangular(data.chol_K, V.T, lower=True)  # L^-1 v, then K^-1 v = L^-T L^-1 v
        dm, white = V * data.y[None, :], half.T
        Pv = solve_triangular(data.chol_K.T, half, lower=False).T
    k, d = V.shape
    if U is None:
        U, center = jnp.zeros_like(V), jnp.zeros((k,), V.dtype)
    else:
        center = U @ mean
    # rho = 1 to start with (forgotten within tens of sweeps), the default spacing
    place = jnp.broadcast_to(jnp.asarray([1.0, 1.0, _SPACING], V.dtype), (k, 3))
    window = (0, d) if k == 0 else (WINDOW_DRAWS, d) if _keeps_draws(k, d) else (d, d)
    return LineMoves(V, dm, jnp.stack([Pv, U], axis=2), white, jnp.sum(V * Pv, axis=1), center,
                     place, jnp.zeros((), V.dtype), jnp.zeros((d,), V.dtype),
                     jnp.zeros(window, V.dtype))


def line_moves_init(data, directions) -> LineMoves:
    """:class:`LineMoves` of a chain: ``directions`` is a ``(k, d)`` array of fixed
    directions, or a number ``k`` of directions to learn in warmup, which start as the first
    ``k`` coordinate axes scaled by their prior sd (valid moves, if slow ones, until the
    first window closes: the grid of :func:`sample_line` adapts to any scale)."""
    dtype = data.gamma.dtype
    if isinstance(directions, int):
        if isinstance(data, LinearData):
            sd = jnp.full((data.Z.shape[1],), data.prior_scale, dtype)
        else:
            sd = jnp.sqrt(packed.diagonal(data.K, data.y.shape[0]))
        V = (jnp.eye(sd.shape[0], dtype=dtype) * sd[:, None])[:directions]
    else:
        V = jnp.asarray(directions, dtype)
    return _fresh_moves(V, data)


_FIT_DECAY = 0.95
"""Weight of the past in :attr:`LineMoves.place` (an effective memory of 20 sweeps)."""


def _line_moves(key, value, white, quad, margins, moves: LineMoves, gamma):
    """One exact draw along each direction in turn (:func:`sample_line`); returns the new
    value, its whitened coordinates' explicit part (:attr:`GibbsState.white`), prior
    quadratic form and margins, the proposals used, the number of failed moves and the moves
    with the statistics that place the next grids (``place``). Where a grid starts changes
    the cost of a draw, never its law, so adapting them keeps the sweep exact. A move by
    ``t v`` changes the quadratic form by ``2 t b + t^2 a``, ``b = z^T P v`` and ``a = v^T P
    v``, which the line's density needs anyway.

    A loop over the direction's index, not a ``scan`` over the directions: with the chains
    vectorised, ``scan`` would transpose every ``(chains, k, n)`` array of the moves to put
    the directions first, in every sweep."""

    k = moves.V.shape[0]
    keys = random.split(key, k + 1)
    uniforms = random.uniform(keys[k], (k, 3, _PROPOSALS), value.dtype)  # first rounds, in bulk

    def move(j, carry):
        value, white, quad, margins, used, failed, place = carry
        b, u = value @ moves.PU[j]
        predicted = moves.center[j] - u
        tp, pp, width = place[j]
        rho = jnp.clip(tp / jnp.maximum(pp, 1e-300), 0.0, 1.0)
        t, trials, width = sample_line(keys[j], margins, moves.dm[j], moves.a[j], b, gamma,
                                       rho * predicted, width, uniforms[j])
        place = place.at[j].set(jnp.stack([_FIT_DECAY * tp + t * predicted,
                                           _FIT_DECAY * pp + predicted**2, width]))
        return (value + t * moves.V[j], white + t * moves.white[j],
                quad + t * (2.0 * b + t * moves.a[j]), margins + t * moves.dm[j],
                used + trials, failed + (trials > _MAX_LINE_TRIALS).astype(jnp.int32), place)

    zero = jnp.zeros((), jnp.int32)
    value, white, quad, margins, used, failed, place = jax.lax.fori_loop(
        0, k, move, (value, white, quad, margins, zero, zero, moves.place))
    return value, white, quad, margins, used, failed, moves._replace(place=place)


def _accumulate(moves: LineMoves, value) -> LineMoves:
    """Welford's update of the window's mean and squared deviations with one draw (or, beyond
    :data:`WINDOW_DRAWS` dimensions, the draw written into the ring of the last ones)."""
    count = moves.count + 1.0
    delta = value - moves.mean
    mean = moves.mean + delta / count
    if _keeps_draws(*moves.V.shape):
        slot = jnp.mod(count - 1.0, WINDOW_DRAWS).astype(jnp.int32)
        return moves._replace(count=count, mean=mean, m2=moves.m2.at[slot].set(value))
    return moves._replace(count=count, mean=mean, m2=moves.m2 + jnp.outer(delta, value - mean))


def _smooth_basis(data, k: int):
    """An orthonormal basis ``(n, r)`` of the span of ``K``'s top ``r`` eigenvectors (the
    preconditioner's ``W`` with its columns normalised; a column whose eigenvalue is at the
    floor, ``W``'s zero column, stays zero and adds nothing), in which the GP's ``k`` learned
    directions are sought; None for the linear model, on the Cholesky path (no eigenvectors
    kept) and when ``r < k``."""
    if isinstance(data, LinearData) or data.pcg is None or data.pcg.W.shape[1] < k:
        return None
    W = data.pcg.W
    norms = jnp.linalg.norm(W, axis=0)
    return W / jnp.where(norms > 0.0, norms, 1.0)


def _principal_axes(moves: LineMoves, k: int, basis=None):
    """The window's covariance ``S`` (of its draws, or of its kept draws beyond
    :data:`WINDOW_DRAWS` dimensions), shrunk towards a multiple of the identity as in Stan's
    metric adaptation, ``(c / (c + 5)) S + 1e-3 (5 / (c + 5)) (tr S / d) I`` (``c`` the draws
    it is estimated from): its ``k`` largest eigenvalues, in decreasing order, and their
    eigenvectors ``(d, k)``. The shrinkage moves every eigenvalue by the same amount and keeps
    the eigenvectors, so for kept draws ``Y`` (centred) they are the top right singular
    vectors of ``Y``: the same axes as the ``d x d`` eigendecomposition of the same draws.

    ``moves`` may carry a leading axis of chains (their windows of equal length): ``S`` is then
    the covariance of all their draws about the pooled mean (:func:`_learn_pooled`).

    With a ``basis`` ``Q`` (``(d, r)``, orthonormal columns: :func:`_smooth_basis`) the axes
    are those of ``Q^T S Q`` (shrunk with ``tr / r`` in place of ``tr / d``), mapped back by
    ``Q``: directions within the span of ``K``'s
    top eigenvectors. A principal axis of a few hundred GP draws is mostly sampling noise in
    the rough directions where the prior allows almost nothing, so a line along it is far
    narrower than the posterior along it: on ``susy`` (n = 5,000, the kernel learned at 10^4
    points), the top axis of 100 draws had a posterior variance 14 times the largest
    conditional variance its prior term allows (``1 / v^T K^-1 v``), and 1.2 times within
    the top 192 eigenvectors, where almost all of the posterior's variance lies."""
    pooled = moves.mean.ndim == 2
    means = moves.mean if pooled else moves.mean[None]
    m2 = moves.m2 if pooled else moves.m2[None]
    chains, d = means.shape
    r = d if basis is None else basis.shape[1]
    project = (lambda A: A) if basis is None else (lambda A: A @ basis)
    lift = (lambda E: E) if basis is None else (lambda E: basis @ E)
    count = moves.count[0] if pooled else moves.count  # the chains share the sweep counter
    if not _keeps_draws(k, d):
        # Welford's sums about each chain's mean, plus the spread of those means
        spread = means - jnp.mean(means, axis=0)
        total = jnp.sum(m2, axis=0) + count * spread.T @ spread
        c = chains * count
        cov = total / jnp.maximum(c - 1.0, 1.0)
        if basis is not None:
            cov = basis.T @ cov @ basis
        ridge = (1e-3 * 5.0 / (c + 5.0)) * jnp.trace(cov) / r
        cov = (c / (c + 5.0)) * cov + ridge * jnp.eye(r, dtype=cov.dtype)
        w, E = jnp.linalg.eigh(cov)
        return w[r - k:][::-1], lift(E[:, r - k:][:, ::-1])
    kept_each = jnp.minimum(count, float(WINDOW_DRAWS))
    valid = (jnp.arange(WINDOW_DRAWS) < kept_each)[None, :, None]
    kept = jnp.where(valid, m2, 0.0)
    c = chains * kept_each
    centred = jnp.where(valid, kept - jnp.sum(kept, axis=(0, 1)) / jnp.maximum(c, 1.0), 0.0)
    _, sv, Vt = jnp.linalg.svd(project(centred.reshape(chains * WINDOW_DRAWS, d)),
                               full_matrices=False)
    variances = sv**2 / jnp.maximum(c - 1.0, 1.0)
    ridge = (1e-3 * 5.0 / (c + 5.0)) * jnp.sum(variances) / r
    return (c / (c + 5.0)) * variances[:k] + ridge, lift(Vt[:k].T)


def _directions_from(w, E, mean, data) -> LineMoves:
    """Fresh :class:`LineMoves` along the principal axes ``E`` of variances ``w``, each scaled
    by its sd, predicting the mode along them from the window's ``mean``."""
    sd = jnp.sqrt(jnp.maximum(w, jnp.finfo(w.dtype).tiny))
    return _fresh_moves((E * sd).T, data, (E / sd).T, mean)


def _learn_directions(moves: LineMoves, data) -> LineMoves:
    """The window's ``k`` principal directions of largest variance, each scaled by its sd,
    the prediction of the mode along them from the window's mean, and a fresh window. The
    covariance is shrunk towards a multiple of the identity as in Stan's metric adaptation,
    ``(c / (c + 5)) S + 1e-3 (5 / (c + 5)) (tr S / d) I``, so that a short window cannot give
    a direction of zero width."""
    k = moves.V.shape[0]
    w, E = _principal_axes(moves, k, _smooth_basis(data, k))
    return _directions_from(w, E, moves.mean, data)


def _learn_pooled(moves: LineMoves, data) -> LineMoves:
    """:func:`_learn_directions` for vectorised chains (``moves`` with a leading axis of
    chains) from all their windows together: every chain gets the principal axes of the
    pooled draws about their pooled mean.

    A direction along which a chain moves slowly has a small variance within its own short
    window and is missed; across chains the differences between their windows show it (what
    R-hat measures), and four windows estimate the axes from four times the draws. On
    ``susy`` at 10^4 points (4 x (200 + 600) sweeps, 62 directions), chains that learned
    alone mixed the first principal component of ``f`` at the test points (the level of ``f``)
    at a bulk ESS of 354 of 2,400 draws, against 1,000-1,600 for the next ones. The windows
    close while the chains are in warmup, so the directions they share are fixed before any
    kept draw: each chain's kept sweeps are one fixed kernel, exact as before."""
    k = moves.V.shape[1]
    w, E = _principal_axes(moves, k, _smooth_basis(data, k))
    fresh = _directions_from(w, E, jnp.mean(moves.mean, axis=0), data)
    chains = moves.mean.shape[0]
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (chains,) + x.shape), fresh)


class GibbsState(NamedTuple):
    """State of one Gibbs chain (a pytree; ``MCMC`` collects ``z`` as the draws).

    Attributes
    ----------
    z : dict
        ``{"beta": (p,)}`` (linear) or ``{"f": (n,)}`` (GP): the current draw.
    lam : (n,)
        The augmentation variables the current ``z`` was drawn given.
    margins : (n,)
        ``y_i f_i`` at ``z`` (``Z beta`` for the linear model).
    quad : ()
        Prior quadratic form at ``z``: ``beta^T beta / prior_scale^2`` or ``f^T K^-1 f``,
        ``|w|^2`` for the whitened coordinates ``w`` below.
    white : (d,)
        ``z`` in the prior's whitened coordinates ``w``: ``beta / prior_scale``; for the GP
        ``L^{-1} f`` (``K = L L^T``) less ``L^T pending``, carried through the sweep's moves
        rather than solved for, since a triangular solve with ``L`` costs as much as a dozen
        products with ``K`` (:func:`_full`).
    pending : (d,)
        The GP: the part of ``w`` not yet multiplied by ``L^T``, ``w = white + L^T pending``
        (:class:`~ppl_bsvm.inference.mcmc.conditionals.Whitened`); zeros for the linear
        model.
    lp : ()
        Log marginal posterior density of ``z`` up to a constant,
        ``-quad / 2 - 2 gamma sum_i max(0, 1 - margins_i)`` (a trace to watch).
    scale : ()
        The factor ``c`` of this sweep's scale step (1 without it).
    scale_trials : () int32
        Envelope proposals the scale step needed (0 without it).
    scale_width : ()
        Half-width in ``log c`` of the tangent grid the scale step ended with, where the
        next one starts.
    n_floored : () int32
        How many ``lam_i`` were clamped at :data:`LAM_FLOOR` in this sweep.
    line_trials : () int32
        Envelope proposals of this sweep's line moves, all directions together (0 without).
    line_failed : () int32
        Line moves that found no draw and left the chain in place (see :func:`sample_line`).
    cg_iters : () int32
        Conjugate-gradient iterations of this sweep's ``f | lam`` draw (0 on the Cholesky
        path and for the linear model; see :mod:`ppl_bsvm.inference.mcmc.pcg`).
    cg_fallback : () int32
        1 if that solve missed its tolerance and the draw used the Cholesky factor instead.
    moves : LineMoves
        The line moves' directions and warmup statistics.
    it : () int32
        Sweeps done (the warmup schedule of the directions counts them).
    rng_key : PRNG key
    """

    z: dict
    lam: jnp.ndarray
    margins: jnp.ndarray
    quad: jnp.ndarray
    white: jnp.ndarray
    pending: jnp.ndarray
    lp: jnp.ndarray
    scale: jnp.ndarray
    scale_trials: jnp.ndarray
    scale_width: jnp.ndarray
    n_floored: jnp.ndarray
    line_trials: jnp.ndarray
    line_failed: jnp.ndarray
    cg_iters: jnp.ndarray
    cg_fallback: jnp.ndarray
    moves: LineMoves
    it: jnp.ndarray
    rng_key: jnp.ndarray


def _hinge_sum(margins):
    return jnp.sum(jnp.maximum(0.0, 1.0 - margins))


def _margins(z, data):
    """``y_i f_i`` at the training points (``Z beta`` for the linear model)."""
    if isinstance(data, LinearData):
        return data.Z @ z["beta"]
    return data.y * z["f"]


def _white(z, data):
    """``z`` in the prior's whitened coordinates, ``beta / prior_scale`` or ``L^{-1} f``."""
    if isinstance(data, LinearData):
        return z["beta"] / data.prior_scale
    return solve_triangular(data.chol_K, z["f"], lower=True)


def _prior_terms(z, data):
    """``z``'s whitened coordinates (:func:`_white`), its prior quadratic form ``beta^T
    Sigma^-1 beta`` or ``f^T K^-1 f`` (their squared norm) and its margins."""
    white = _white(z, data)
    return white, jnp.sum(white**2), _margins(z, data)


def log_density(z, data):
    """``log p(z | y)`` up to a constant, for ``z = {"beta": ...}`` or ``{"f": ...}``."""
    _, quad, margins = _prior_terms(z, data)
    return _lp(quad, margins, data.gamma)


def _lp(quad, margins, gamma):
    return -0.5 * quad - 2.0 * gamma * _hinge_sum(margins)


def gibbs_step(
    key, state: GibbsState, data, scale_step: bool = True, overrelax: float = 0.0,
    line_moves: bool = False, collapsed=False, draw_lam: bool = True,
) -> GibbsState:
    """One sweep: the scale of ``z`` (optional), line moves along ``state.moves.V``
    (optional), ``lam | z``, then ``z | lam``.

    A ``collapsed`` sweep stops after the line moves: it draws ``lam | z`` only if
    ``draw_lam`` (so that ``(z, lam)`` is a draw of the joint posterior; otherwise ``lam``
    keeps its last value) and never ``z | lam``. It leaves the marginal posterior of ``z``
    invariant, and is ergodic only when the directions span the space of ``z`` (the sampler
    collapses its sweeps only then: all ``p`` learned directions of the linear model).
    ``collapsed`` may be a traced boolean (the sampler collapses its sweeps after warmup):
    the choice is then a ``lax.cond`` after the line moves, so that the moves, most of the
    sweep's program, are compiled once rather than once per branch.

    ``data`` is :class:`LinearData` or :class:`GPData`; every step is an exact draw from a
    full conditional (or, with ``overrelax != 0``, Adler's overrelaxed move that is reversible
    with respect to it), so the sweep leaves the posterior of ``(z, lam)`` invariant. The
    scale step and the line moves draw from conditionals of the *marginal* posterior of ``z``
    (``lam`` integrated out) and ``lam`` is drawn afresh given their result, so each pair is
    one move that leaves ``p(z) p(lam | z)`` invariant (a partially collapsed Gibbs sampler,
    van Dyk & Park 2008). The margins and quadratic form of ``z`` travel in the state, so
    the scale step costs no matrix product (scaling ``z`` by ``c`` scales them by ``c`` and
    ``c^2``), and a line move only adds ``t dm`` to the margins.
    """
    k_scale, k_lam, k_z = random.split(key, 3)
    (value,) = state.z.values()
    margins, white, pending, quad = state.margins, state.white, state.pending, state.quad
    scale_width, moves = state.scale_width, state.moves
    if scale_step:
        c, trials, scale_width = sample_scale(k_scale, quad, margins, value.shape[0],
                                              data.gamma, scale_width)
        value, margins, white, pending, quad = (c * value, c * margins, c * white, c * pending,
                                                c**2 * quad)
    else:
        c, trials = jnp.ones_like(state.lp), jnp.zeros((), jnp.int32)
    if line_moves:  # a key of its own, so that sweeps without line moves keep their stream
        value, white, quad, margins, line_trials, line_failed, moves = _line_moves(
            random.fold_in(k_scale, 1), value, white, quad, margins, moves, data.gamma
        )
    else:
        line_trials = line_failed = jnp.zeros((), jnp.int32)
    state = state._replace(scale=c, scale_trials=trials, scale_width=scale_width, moves=moves,
                           line_trials=line_trials, line_failed=line_failed)

    def end_collapsed(state):
        return _collapsed(k_lam, state, data, value, draw_lam)

    def end_full(state):
        return _full(k_lam, k_z, state, data, value, Whitened(white, pending, quad), margins,
                     overrelax)

    if isinstance(collapsed, bool):
        return end_collapsed(state) if collapsed else end_full(state)
    return jax.lax.cond(collapsed, end_collapsed, end_full, state)


def _full(k_lam, k_z, state: GibbsState, data, value, white: Whitened, margins,
          overrelax) -> GibbsState:
    """The end of a full sweep: ``lam | z`` at the moved ``value`` (whose whitened
    coordinates and quadratic form ``white`` and ``margins`` are given), then ``z | lam``.

    The GP's new ``f`` comes with its whitened coordinates and quadratic form from the draw
    (``draw_f``), with no triangular solve (one with ``L`` and 4 right-hand sides took 380 ms
    at ``n = 10^4``, a quarter of the sweep) and no product with ``L^T`` (94 ms). Carried
    through the scale step (a factor), the line moves (``t L^{-1} v``, and ``2 t b + t^2 a``
    for the quadratic form) and Adler's move (``alpha``, ``|alpha| < 1``), their rounding does
    not accumulate: each draw shrinks the error it inherits by ``|alpha|``
    (``tests/inference/mcmc/test_mcmc.py`` checks ``white + L^T pending`` against ``L^{-1} f``
    and ``quad`` against ``f^T K^-1 f`` after a run)."""
    lam, n_floored = _floored_lam(k_lam, margins, data.gamma)
    if isinstance(data, LinearData):
        z = {"beta": sample_beta(
            k_z, lam, data.Z, data.prior_scale, data.gamma, value, overrelax, data.rows
        )}
        cg_iters = cg_fallback = jnp.zeros((), jnp.int32)
        explicit, pending = _white(z, data), state.pending
        quad = jnp.sum(explicit**2)
    else:
        draw = draw_f(k_z, lam, data.K, data.chol_K, data.y, data.gamma, value, overrelax,
                      data.pcg, white)
        z, cg_iters, cg_fallback = {"f": draw.f}, draw.cg_iters, draw.cg_fallback
        explicit, pending, quad = draw.white
    margins = _margins(z, data)
    lp = _lp(quad, margins, data.gamma)
    return state._replace(z=z, lam=lam, margins=margins, quad=quad, white=explicit,
                          pending=pending, lp=lp, n_floored=n_floored, cg_iters=cg_iters,
                          cg_fallback=cg_fallback)


def _floored_lam(key, margins, gamma):
    """``lam | z`` (:func:`sample_lam`) clamped at :data:`LAM_FLOOR`, and how many were."""
    lam = sample_lam(key, margins, gamma)
    return jnp.maximum(lam, LAM_FLOOR), jnp.sum(lam < LAM_FLOOR, dtype=jnp.int32)


def _collapsed(key, state: GibbsState, data, value, draw_lam: bool) -> GibbsState:
    """The end of a collapsed sweep at the line moves' ``value``: its margins and quadratic
    form computed afresh (the moves update the margins incrementally, and rounding would
    accumulate over the sweeps), and ``lam | z`` if ``draw_lam``."""
    z = {next(iter(state.z)): value}
    white, quad, margins = _prior_terms(z, data)
    if draw_lam:
        lam, n_floored = _floored_lam(key, margins, data.gamma)
    else:
        lam, n_floored = state.lam, jnp.zeros((), jnp.int32)
    zero = jnp.zeros((), jnp.int32)
    return state._replace(z=z, lam=lam, margins=margins, quad=quad, white=white,
                          pending=jnp.zeros_like(white), lp=_lp(quad, margins, data.gamma),
                          n_floored=n_floored,
                          cg_iters=zero, cg_fallback=zero)


def init_state(key, data, z=None, directions=0) -> GibbsState:
    """A chain's starting state: ``z`` if given, else a draw from the prior (overdispersed);
    ``directions`` as for :func:`line_moves_init`."""
    if z is None:
        if isinstance(data, LinearData):
            p = data.Z.shape[1]
            z = {"beta": data.prior_scale * random.normal(key, (p,), data.Z.dtype)}
        else:
            n = data.y.shape[0]
            z = {"f": data.chol_K @ random.normal(key, (n,), data.K.dtype)}
    z = {k: jnp.asarray(v) for k, v in z.items()}
    white, quad, margins = _prior_terms(z, data)
    # lam is filled by the first sweep; ones are a placeholder of the right shape. Strong
    # dtypes everywhere, so that the loop carry never changes type (no recompilation).
    int0 = jnp.zeros((), jnp.int32)
    lp = _lp(quad, margins, data.gamma)
    dim = next(iter(z.values())).shape[0]
    width = _SPACING * jax.lax.rsqrt(jnp.maximum(dim - 1 + quad, 1e-12))  # the smooth part's sd
    return GibbsState(
        z, jnp.ones_like(margins), margins, quad, white, jnp.zeros_like(white), lp,
        jnp.ones_like(lp), int0, width,
        int0, int0, int0, int0, int0, line_moves_init(data, directions), int0, key,
    )
