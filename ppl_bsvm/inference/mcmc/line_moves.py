r"""Exact draws along one dimension of the marginal posterior: the line moves
(:func:`sample_line`) and the scale step (:func:`sample_scale`), both by rejection from an
envelope of tangents.

With the scale step the chain still mixes slowly along the posterior's other directions of
largest variance (ESS per draw 0.09-0.13 along principal directions 2-4 on the linear
benchmark): given ``lam`` the Gaussian conditional is much narrower than the marginal
posterior there. After the scale step each sweep therefore draws, for each of ``k`` fixed
directions ``v`` in turn, ``t`` exactly from the marginal posterior along the line
``z + t v``,

.. math:: p(t \mid z) \propto \exp\Big(-\tfrac{a}{2} t^2 - b t
          - 2\gamma\sum_i \max(0,\ 1 - m_i - t\, d_i)\Big), \quad
          a = v^\top P v,\ b = z^\top P v,\ d = Z v \ (\text{or } y \odot v),

(``P`` the prior precision, ``m`` the margins) and sets ``z <- z + t v``. Like the scale step
it is a Gibbs step on the marginal posterior, with ``lam`` drawn afresh afterwards, so the
sweep stays exact (partially collapsed Gibbs, van Dyk & Park 2008); fixed directions need no
Jacobian. The directions are learned in warmup as the ``k`` principal axes of largest
variance of the draws, each scaled by its sd, and frozen for the kept draws
(:class:`~ppl_bsvm.inference.mcmc.sweep.LineMoves`, carried in the chain's state). With all
21 directions the smallest ESS per draw on the linear benchmark rises from 0.04 (0.1
overrelaxed) to 0.7; on the GP benchmark 10 directions raise it from 0.13 to 0.5.

**The draw.** Both densities are log-concave (the scale's in ``c``, see
:func:`sample_scale`). The log density and a supergradient are evaluated together at three
points in one pass over the margins (:func:`_line_eval`), the points moved or refined until
their tangents bracket the mode at a useful spacing (:func:`_grid`), and the draw is made by
rejection from the envelope of the three tangents (:func:`_tangent_envelope`, Gilks & Wild
1992; 1.1 to 1.2 proposals per draw, two to a round). On the linear benchmark 11% of the
line moves move their grid and 12% refine it, so a move evaluates the density at about 5.7
points (2.3 passes over the margins), where the chords of the seven-point grid it replaces
took about 10 (0.15 ms of a 0.25 ms sweep before, 0.11 of 0.21 after, CPU time per chain and
draw). Every envelope gives the exact conditional, so where the grid starts (here: where the
Gaussian of the warmup puts the mode, and with the spacing the previous draw along the line
ended with) changes the cost, never the law.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import random

__all__ = ["sample_line", "sample_scale"]

_SPACING = 1.5  # the three tangent points start 1.5 units apart and are refined to 1.5 sds
_PROPOSALS = 2  # envelope proposals drawn together per round of the rejection loop
_MAX_TRIALS = 128
_MAX_LINE_TRIALS = _MAX_TRIALS  # (the sweep counts failed line moves by it)
_MAX_REGRID = 40  # steps of each of the two searches of the grid
_COARSE = 2.5  # a grid spaced wider than this many sds (by its slopes) is refined
_END_DROP = 0.5  # the end tangents must rise / fall by this much over one spacing: a flat
# one makes a long tail
_BASE = (-1.0, 0.0, 1.0)


def _line_eval(t, r, d, a, b, gamma, slope=True, jac=0):
    r"""The log density at each point of ``t`` and, with ``slope``, a supergradient:

    .. math:: h(t) = J \log t - \tfrac{a}{2} t^2 - b t - 2\gamma \sum_i \max(0, q_i), \quad
              h'(t) = \frac{J}{t} - a t - b + 2\gamma \sum_{i: q_i > 0} d_i, \quad
              q_i = r_i - t\, d_i ,

    ``J = jac`` (a Python number; 0 for the lines). This pass over the margins is a move's
    whole cost. The sums over the points are one product of the ``(G, n)`` terms (stacked
    with ``d [q > 0]`` for the slope) with a vector of ones: XLA's CPU reductions are not
    vectorised, a dot product is (about 2.5x faster at n = 1000), and the ones are shared by
    the chains run vectorised, so that it stays one matrix-vector product. At a kink the
    slope is one of the one-sided derivatives, a supergradient either way.
    """
    q = r[None, :] - t[:, None] * d[None, :]
    ones = jnp.ones(r.shape, r.dtype)
    smooth = -0.5 * a * t**2 - b * t + (jac * jnp.log(t) if jac else 0.0)
    if not slope:
        return smooth - 2.0 * gamma * (jnp.maximum(q, 0.0) @ ones)
    on = q > 0.0
    sums = jnp.concatenate([jnp.where(on, q, 0.0), jnp.where(on, d[None, :], 0.0)]) @ ones
    G = t.shape[0]
    grad = -a * t - b + (jac / t if jac else 0.0)
    return smooth - 2.0 * gamma * sums[:G], grad + 2.0 * gamma * sums[G:]


def _tangent_envelope(t, h, s, lower=-jnp.inf):
    r"""Upper envelope of a concave ``h`` on ``(lower, inf)`` from its tangents at sorted
    abscissae ``t`` (values ``h``, supergradients ``s``; Gilks & Wild 1992).

    Every tangent lies above ``h``; piece ``g`` uses the tangent at ``t_g`` between the
    intersections ``z_{g-1}`` and ``z_g`` of neighbouring tangents (clipped into
    ``[t_g, t_{g+1}]``, so the pieces tile the line whatever the rounding), the outer ones out
    to ``lower`` and infinity. Returns ``(lo, hi, anchor_t, anchor_h, slope)`` of the ``G``
    linear pieces of ``log`` envelope, ``anchor_h + slope (x - anchor_t)`` on ``[lo, hi]``.
    Integrable when the last slope is negative and the first positive or ``lower`` finite.
    """
    den = s[:-1] - s[1:]
    z = (h[1:] - h[:-1] + s[:-1] * t[:-1] - s[1:] * t[1:]) / jnp.where(den > 0, den, 1.0)
    z = jnp.where(den > 0, jnp.clip(z, t[:-1], t[1:]), 0.5 * (t[:-1] + t[1:]))
    lo = jnp.full((1,), lower, t.dtype)
    return jnp.concatenate([lo, z]), jnp.concatenate([z, jnp.full((1,), jnp.inf, t.dtype)]), t, h, s


def _grid(evaluate, center, width, geometric=False):
    """Three abscissae whose tangents make a tight, integrable envelope of the concave ``h``,
    and ``(h, h')`` there.

    The grid is ``center + width * (-1, 0, 1)`` or, with ``geometric`` (a density on
    ``c > 0``), ``center * exp(width * (-1, 0, 1))``. From the given ``center`` and
    ``width``, two searches:

    1. Bracket the mode with end tangents that rise and fall by more than ``_END_DROP``
       over their spacing, so that the envelope's exponential tails are short: an end slope
       of the wrong sign moves the grid to that end, one that is too flat leaves it in place,
       and both double its width (so the search cannot cycle). On ``c > 0`` the left end
       also passes when its tangent cannot rise by ``_END_DROP`` before 0.
    2. While the slopes say the spacing is more than ``_COARSE`` sds (the sd from their
       change across the pair of points that brackets their zero, exact for a Gaussian),
       put the grid on that zero with ``_SPACING`` sds as spacing (at least an eighth of the
       old width), keeping the new grid only if it still brackets the mode as in 1.

    Returns ``(t, h, s, ok, width)``; ``ok`` is false if not even a weak bracket (last slope
    negative, first positive or the support bounded) was found, and then the envelope is not
    integrable; ``width`` is the final grid's, where the next search may start.
    """
    base = jnp.asarray(_BASE, center.dtype)

    def points(center, width):
        return center * jnp.exp(width * base) if geometric else center + width * base

    def brackets(t, s):
        left = s[0] * (t[1] - t[0]) > _END_DROP
        if geometric:
            left = left | (-s[0] * t[0] < _END_DROP)
        return left & (-s[-1] * (t[-1] - t[-2]) > _END_DROP)

    def estimate(t, s):
        """Zero of the slopes' piecewise-linear interpolant, the sd from their change
        across the pair of points that holds it, and that pair's spacing (selects, not
        indexing: a gather per chain costs more than the arithmetic)."""
        right = s[1] > 0  # the zero lies between t_1 and t_2
        t_lo, s_lo = jnp.where(right, t[1], t[0]), jnp.where(right, s[1], s[0])
        gap = jnp.where(right, t[2] - t[1], t[1] - t[0])
        drop = jnp.maximum(s_lo - jnp.where(right, s[2], s[1]), 1e-300)
        return t_lo + gap * s_lo / drop, jax.lax.rsqrt(drop / gap), gap

    def searching(carry):
        _, _, t, _, s, shifts, zooms = carry
        bracketed = brackets(t, s)
        _, sd, gap = estimate(t, s)
        return ((~bracketed & (shifts < _MAX_REGRID))
                | (bracketed & (gap > _COARSE * sd) & (zooms < _MAX_REGRID)))

    def step(carry):
        """One step of search 1 while the mode is not bracketed, else of search 2; one
        loop for both, so that the usual case, a grid that needs neither, costs one test."""
        center, width, t, h, s, shifts, zooms = carry
        shifting = ~brackets(t, s)
        left = ~(s[0] * (t[1] - t[0]) > _END_DROP)
        wrong_way = jnp.where(left, s[0] <= 0, s[-1] >= 0)
        shifted = jnp.where(wrong_way, jnp.where(left, t[0], t[-1]), center)
        mode, sd, _ = estimate(t, s)
        spread = jnp.log1p(_SPACING * sd / mode) if geometric else _SPACING * sd
        new_center = jnp.where(shifting, shifted, mode)
        new_width = jnp.where(shifting, 2.0 * width, jnp.maximum(spread, 0.125 * width))
        new_t = points(new_center, new_width)
        new_h, new_s = evaluate(new_t)
        keep = shifting | brackets(new_t, new_s)  # a zoom that loses the bracket is undone
        zooms = jnp.where(shifting, zooms, jnp.where(keep, zooms + 1, _MAX_REGRID))
        pick = lambda new, old: jnp.where(keep, new, old)  # noqa: E731
        return (pick(new_center, center), pick(new_width, width), pick(new_t, t),
                pick(new_h, h), pick(new_s, s), shifts + shifting.astype(jnp.int32), zooms)

    t = points(center, width)
    zero = jnp.zeros((), jnp.int32)
    _, width, t, h, s, _, _ = jax.lax.while_loop(
        searching, step, (center, width, t, *evaluate(t), zero, zero))
    ok = ((s[0] > 0) | geometric) & (s[-1] < 0) & jnp.all(jnp.isfinite(h))
    return t, h, s, ok, width


def _tangent_draw(key, evaluate, t, h, s, ok, lower=-jnp.inf, uniforms=None):
    """Rejection from the envelope of the tangents ``(t, h, s)`` (:func:`_tangent_envelope`);
    ``evaluate(x, slope=False)`` is the log density. Returns ``(x, trials)`` as
    :func:`sample_line` does (``x = 0`` and ``_MAX_TRIALS + 1`` trials when ``ok`` is false
    or no proposal was accepted).

    Proposals come ``_PROPOSALS`` at a time and the first accepted one is kept: the law of
    drawing them one by one, in fewer rounds of the loop (which, with vectorized chains,
    runs until every chain has accepted). The first round runs outside the loop, on
    ``uniforms`` (``(3, _PROPOSALS)``) if given, else on ``key``'s; the others on
    ``fold_in(key, trials)``.
    """
    dtype = t.dtype
    lo, hi, at, ah, slope = _tangent_envelope(t, h, s, lower)
    width = hi - lo
    rate = jnp.abs(slope)
    rising = slope > 0  # the piece is largest at hi
    top = ah + slope * (jnp.where(rising, hi, lo) - at)
    flat = rate * width < 1e-12  # a uniform piece (never one of the two infinite tails)
    frac = jnp.where(flat, width, -jnp.expm1(-rate * width) / jnp.where(flat, 1.0, rate))
    cdf = jnp.cumsum(jnp.where(ok, jnp.exp(top - jnp.max(top)) * frac, 1.0))

    def propose(uniforms):
        v, u, acc = uniforms
        piece = jnp.sum(v[:, None] * cdf[-1] >= cdf[None, :], axis=1)
        piece = jnp.minimum(piece, cdf.shape[0] - 1)  # v * total rounding up to total
        rate_, width_, flat_ = rate[piece], width[piece], flat[piece]
        # distance from the piece's high end, drawn from the truncated exponential
        off = jnp.where(
            flat_, u * jnp.where(flat_, width_, 0.0),
            -jnp.log1p(u * jnp.expm1(-rate_ * width_)) / jnp.where(flat_, 1.0, rate_),
        )
        x = jnp.where(rising[piece], hi[piece] - off, lo[piece] + off)
        envelope = ah[piece] + slope[piece] * (x - at[piece])
        accept = jnp.log(acc) <= evaluate(x, slope=False) - envelope
        first = jnp.argmax(accept)
        return x[first], accept[first], first

    def round_(u, trials):
        x, accepted, first = propose(u)
        used = jnp.where(accepted, first + 1, _PROPOSALS).astype(jnp.int32)
        return x, accepted, trials + used

    def cond(carry):
        _, accepted, trials = carry
        return ~accepted & (trials < _MAX_TRIALS)

    def body(carry):  # a fresh key per round
        _, _, trials = carry
        return round_(random.uniform(random.fold_in(key, trials), (3, _PROPOSALS), dtype), trials)

    # the first round outside the loop, from uniforms the caller may have drawn in bulk
    u = random.uniform(key, (3, _PROPOSALS), dtype) if uniforms is None else uniforms
    x, accepted, trials = round_(u, jnp.zeros((), jnp.int32))
    x, accepted, trials = jax.lax.while_loop(cond, body, (x, accepted | ~ok, trials))
    done = accepted & ok
    return jnp.where(done, x, 0.0), jnp.where(done, trials, _MAX_TRIALS + 1)


def sample_line(key, margins, dm, a, b, gamma=1.0, center=0.0, width=_SPACING, uniforms=None):
    r"""Exact draw of ``t`` from :math:`p(t) \propto \exp\big(-\tfrac{a}{2} t^2 - b t
    - 2\gamma \sum_i \max(0,\ 1 - m_i - t\, d_i)\big)`.

    The marginal posterior (``lam`` integrated out) along the line ``z + t v``: ``a = v^T
    P v`` and ``b = z^T P v`` with ``P`` the prior precision, ``m`` the margins at ``z`` and
    ``d`` their change per unit of ``t`` (``Z v`` for the linear model, ``y * v`` for the GP).

    Parameters
    ----------
    key : PRNG key
    margins : (n,) float
    dm : (n,) float
    a : () float, > 0
    b : () float
    gamma : float
    center, width : () float, default=0.0, 1.5
        Where the mode is expected and the spacing of the tangent points to start from (the
        line moves predict the mode from the Gaussian of the warmup and start from the
        spacing of their previous draw along the line); any values give the exact draw, good
        ones the fewest evaluations.
    uniforms : (3, 2) float, optional
        The first round of proposals' uniforms (the line moves draw them for all directions
        at once); default: from ``key``.

    Returns
    -------
    t : () float
    trials : () int32
        Envelope proposals used; ``_MAX_TRIALS + 1`` if none was accepted (or no envelope
        was found), in which case ``t = 0``: the chain stays put, a no-op that the sampler
        counts (``line_failed``) and that has not happened in our runs.
    width : () float
        The spacing the search ended with (the given one after a failed draw).

    Notes
    -----
    The log density is concave and piecewise quadratic. The tangent grid starts at
    ``center`` with points ``width`` apart (the directions are scaled so that a unit is
    about one posterior sd, hence the default) and is moved or refined by :func:`_grid`; the
    draw is :func:`_tangent_draw`'s.
    """
    dtype = margins.dtype
    r = 1.0 - margins

    def evaluate(t, slope=True):
        return _line_eval(t, r, dm, a, b, gamma, slope)

    center, width = jnp.asarray(center, dtype), jnp.asarray(width, dtype)
    center = jnp.where(jnp.isfinite(center), center, 0.0)
    width = jnp.where(jnp.isfinite(width) & (width > 0), width, _SPACING)
    t, h, s, ok, end_width = _grid(evaluate, center, width)
    x, trials = _tangent_draw(key, evaluate, t, h, s, ok, uniforms=uniforms)
    return x, trials, jnp.where(trials <= _MAX_TRIALS, end_width, width)  # keep a failure's out


def sample_scale(key, quad, margins, dim, gamma=1.0, width=None):
    r"""Exact draw of ``c > 0`` from :math:`p(c) \propto c^{dim-1} e^{h_0(c)}`,
    :math:`h_0(c) = -\tfrac12 quad\, c^2 - 2\gamma \sum_i \max(0, 1 - c\, m_i)`.

    The full conditional of the scale of ``beta`` (``quad = beta^T Sigma^-1 beta``,
    ``margins = Z beta``, ``dim = p``) or of ``f`` (``quad = f^T K^-1 f``, ``margins = y f``,
    ``dim = n``) along its orbit (:mod:`ppl_bsvm.inference.mcmc.conditionals`).

    Parameters
    ----------
    key : PRNG key
    quad : () float
        Prior quadratic form at the current value (> 0; at 0 the orbit is a point and
        ``c = 1`` is returned).
    margins : (n,) float
    dim : int
        Dimension of the scaled vector.
    gamma : float
    width : () float, optional
        Half-width in ``log c`` of the tangent grid to start from (the sweep passes the one
        its previous scale step ended with); default: 1.5 times the sd of the smooth part
        at ``c = 1``, ``(dim - 1 + quad)^{-1/2}``. Any value gives the exact draw.

    Returns
    -------
    c : () float
    trials : () int32
        Envelope proposals used (``_MAX_TRIALS + 1`` if none was accepted, in which case
        ``c = 1``: a no-op that has never happened in our runs).
    width : () float
        The half-width the grid search ended with (the default after a failed draw).

    Notes
    -----
    :math:`h(c) = (dim - 1)\log c + h_0(c)` is concave, so every tangent is an upper bound
    (at a kink ``c = 1/m_i`` a one-sided derivative is a supergradient): the line moves'
    sampler in ``c`` (``r = 1``, ``d = m``, ``a = quad``, ``b = 0``, with the Jacobian term),
    on the geometric grid ``exp(+-width)`` around ``c = 1`` and with an envelope cut at
    ``c = 0``. The current value is a posterior draw, so ``c = 1`` is a typical point.
    """
    dtype = margins.dtype
    ones = jnp.ones_like(margins)
    jac = dim - 1

    def evaluate(c, slope=True):
        return _line_eval(c, ones, margins, quad, 0.0, gamma, slope, jac)

    default = (_SPACING * jax.lax.rsqrt(jnp.maximum(jac + quad, 1e-12))).astype(dtype)
    width = default if width is None else jnp.asarray(width, dtype)
    width = jnp.where(jnp.isfinite(width) & (width > 0) & (width < 30.0), width, default)
    one = jnp.ones((), dtype)
    t, h, s, ok, end_width = _grid(evaluate, one, width, geometric=True)
    c, trials = _tangent_draw(key, evaluate, t, h, s, ok, lower=0.0)
    done = (trials <= _MAX_TRIALS) & (quad > 0)  # at quad = 0 the orbit is a point
    return jnp.where(done, c, 1.0), trials, jnp.where(done, end_width, default)
