r"""Full conditionals of the exact Gibbs sampler of the Bayesian SVM (Polson & Scott 2011;
Henao et al. 2014), and its scale step.

The augmented model (``specs/bsvm_inference.md`` sections 1, 2 and 6) with temperature
:math:`\gamma`, margins :math:`r_i = 1 - y_i f_i` and a flat prior on :math:`\lambda_i > 0`,

.. math:: L(y_i \mid f_i) = e^{-2\gamma\max(0, r_i)}
          = \int_0^\infty N(y_i(1 + \lambda_i);\, f_i,\, \lambda_i/\gamma)\, d\lambda_i ,

has the full conditionals drawn here, alternately, in one sweep
(:func:`~ppl_bsvm.inference.mcmc.sweep.gibbs_step`):

.. math::

    \lambda_i \mid f_i &\sim \mathrm{GIG}(1/2,\ \gamma,\ \gamma r_i^2)
        \quad\Leftrightarrow\quad 1/\lambda_i \sim \mathrm{IG}(1/|r_i|,\ \gamma)

    \beta \mid \lambda &\sim N(B Z^\top W (1 + \lambda),\ B), \quad
        B^{-1} = Z^\top W Z + \Sigma^{-1}, \quad W = \gamma\Lambda^{-1}
        \quad (\text{linear}, f = Z\beta \text{ with rows } z_i = y_i x_i)

    f \mid \lambda &\sim N\big(K (K + \Lambda/\gamma)^{-1} Y(1 + \lambda),\
        K - K (K + \Lambda/\gamma)^{-1} K\big) \quad (\text{GP})

(:func:`sample_lam`, :func:`sample_beta`, :func:`sample_f`). The GP draw uses Matheron's rule
(spec section 6), ``f = f0 + K (K + N)^{-1} (Y(1 + lam) - f0 - e)`` with ``f0 ~ N(0, K)``,
``e ~ N(0, N)``, ``N = Lambda / gamma``: one solve with ``K + N`` per sweep, by a Cholesky
factor of ``B = I + S K S`` (:mod:`ppl_bsvm.inference.gaussian`) or, where that pays, by
conjugate gradients preconditioned with ``K``'s spectrum, computed once, to working precision
(:mod:`ppl_bsvm.inference.mcmc.pcg`).

**Scale step.** The two-block sampler above mixes slowly along one direction above all: the
overall scale of ``beta`` (or ``f``). Given ``lam``, every point is a Gaussian
pseudo-observation that pins ``beta`` down, while the hinge posterior is only constrained by
the points near the margin. On the linear benchmark (twonorm, ``n = 1000``, 21
coefficients) the ESS per draw along the posterior mean is 0.006, against 0.04-0.19 along
every other principal direction. Each sweep therefore starts with an exact draw of
a scale factor ``c`` from its full conditional given the orbit ``{c beta : c > 0}`` of the
current value (the generalised Gibbs step of Liu & Sabatti 2000, multiplicative group with
Haar measure ``dc / c``, on the *marginal* posterior):

.. math:: p(c \mid \beta) \propto c^{p - 1}
          \exp\Big(-\tfrac{c^2}{2}\, \beta^\top\Sigma^{-1}\beta
          - 2\gamma\sum_i \max(0, 1 - c\, z_i^\top\beta)\Big), \quad c > 0,

then ``beta <- c beta`` (:func:`~ppl_bsvm.inference.mcmc.line_moves.sample_scale`). The
density is log-concave in ``c``; it is drawn exactly by rejection from an envelope of tangents,
as the line moves are (:mod:`ppl_bsvm.inference.mcmc.line_moves`). The sweep is then ``c``,
the line moves, ``lam``, ``beta``, so the stored ``(beta, lam)`` is a joint posterior draw. On that
benchmark the step raises the ESS per draw along the mean from 0.006 to 0.2 and the smallest
over the coefficients from 0.011 to 0.055, at about 15% more time per sweep (the margins and
``beta^T beta`` are carried in the state, so it needs no matrix product). It does not help the
GP model, where ``f``'s scale is not the slow direction. ``scale_step=False`` with
``directions=0`` gives the textbook two-block sampler.

**Overrelaxation** (``overrelax=alpha``, off by default): the ``beta`` / ``f`` draw becomes
Adler's (1981) move ``mean + alpha (z - mean) + sqrt(1 - alpha^2) xi`` (:func:`overrelaxed`),
which is reversible with respect to the same Gaussian conditional, so every sweep still leaves
the posterior invariant and no accept/reject step is needed. Without line moves,
``alpha = -0.9`` raises the smallest ESS per draw on the linear benchmark from 0.04 to 0.1 and
on the GP benchmark from 0.13 to 0.24; with them it helps the GP (0.5 to 0.75) and not the
linear model.

The precision ``Z^T W Z`` and ``Z^T W (1 + lam)`` of the ``beta`` draw come from one product
``w^T R`` with the packed outer products ``z_i z_i^T`` (:class:`GramRows`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from jax.custom_batching import custom_vmap
from jax.scipy.linalg import solve_triangular

from .. import gaussian
from . import packed, pcg
from .variates import _gig_half_from_chi2, chi2_1, standard_normal

__all__ = [
    "sample_lam",
    "sample_beta",
    "GramRows",
    "gram_rows",
    "sample_f",
    "draw_f",
    "FDraw",
    "Whitened",
    "overrelaxed",
]

LAM_FLOOR = 1e-30
"""Lower bound applied to ``lam`` before it becomes a noise variance (see :func:`sample_lam`)."""


def sample_lam(key, margins, gamma=1.0):
    r"""``lam_i | f_i ~ GIG(1/2, gamma, gamma r_i^2)``, ``r_i = 1 - margins_i`` (spec section 2).

    Parameters
    ----------
    key : PRNG key
    margins : array of shape (n,)
        ``y_i f_i`` (``z_i^T beta`` for the linear model).
    gamma : float, default=1.0

    Returns
    -------
    lam : array of shape (n,)

    Notes
    -----
    The spec's route, ``1/lam ~ IG(1/|r|, gamma)``, needs a floor on ``|r|`` because the mean
    is infinite on the margin. Drawing ``lam`` itself (:func:`sample_gig_half`) divides by
    nothing and is exact at ``r = 0``. ``lam`` can still be astronomically small when
    ``|r| < 1e-15``; the callers clamp it at :data:`LAM_FLOOR` before using it as a noise
    variance and count how often that happens (``n_floored``, zero in every run we made).
    """
    r = jnp.abs(1.0 - margins)
    k_chi, k_u = random.split(key)
    chi2 = chi2_1(k_chi, r.shape, r.dtype)
    u = random.uniform(k_u, r.shape, r.dtype)
    return _gig_half_from_chi2(chi2, u, r, gamma)


def sample_beta(key, lam, Z, prior_scale=1.0, gamma=1.0, prev=None, overrelax=0.0, rows=None):
    r"""``beta | lam ~ N(B Z^T W (1 + lam), B)``, ``B^{-1} = Z^T W Z + I / prior_scale^2``.

    Parameters
    ----------
    key : PRNG key
    lam : array of shape (n,)
    Z : array of shape (n, p)
        Rows ``z_i = y_i x_i``.
    prior_scale : float
        ``beta ~ N(0, prior_scale^2 I)``.
    gamma : float
        ``W = diag(gamma / lam)``.
    prev : array of shape (p,), optional
        The current ``beta``; needed when ``overrelax != 0``.
    overrelax : float in (-1, 1), default=0.0
        Adler's coefficient (:func:`overrelaxed`); 0 is the plain conditional draw.
    rows : GramRows, optional
        :func:`gram_rows` of ``Z``, computed once: the precision and the right-hand side
        then come from one matrix product ``w^T R`` (see :class:`GramRows`).

    Returns
    -------
    beta : array of shape (p,)

    Notes
    -----
    ``W (1 + lam) = w + gamma``, so the right-hand side is ``Z^T w + gamma Z^T 1``. One
    Cholesky factor ``L`` of the precision: the mean ``L^{-T} L^{-1} rhs`` and the noise
    ``L^{-T} xi`` (covariance ``(L L^T)^{-1}``) share their last triangular solve, also in
    Adler's move, ``alpha prev + L^{-T} ((1 - alpha) L^{-1} rhs + sqrt(1 - alpha^2) xi)``
    (:func:`overrelaxed`); nothing is inverted.
    """
    p = Z.shape[1]
    w = gamma / lam
    if rows is None:
        gram, rhs = jnp.einsum("ni,n,nj->ij", Z, w, Z), Z.T @ (w + gamma)
    else:
        gram, rhs = _gram_from_rows(rows, w, gamma)
    prec = gram + jnp.eye(p, dtype=Z.dtype) / prior_scale**2
    chol = jax.lax.linalg.cholesky(prec, symmetrize_input=False)
    half = solve_triangular(chol, rhs, lower=True)  # L^-1 rhs
    xi = random.normal(key, (p,), Z.dtype)
    if isinstance(overrelax, (int, float)) and overrelax == 0:
        return solve_triangular(chol.T, half + xi, lower=False)
    both = (1.0 - overrelax) * half + jnp.sqrt(1.0 - overrelax**2) * xi
    return overrelax * prev + solve_triangular(chol.T, both, lower=False)


class GramRows(NamedTuple):
    r"""``Z`` rearranged so that ``Z^T diag(w) Z`` and ``Z^T w`` are one product ``w^T R``.

    Row ``i`` of ``R`` holds the upper triangle of ``z_i z_i^T`` (``p (p + 1) / 2`` numbers)
    followed by ``z_i``; ``Z^T diag(w) Z = sum_i w_i z_i z_i^T`` is then read off
    ``w^T R`` through ``index``. This halves the flops of the precision (symmetry) and turns
    them into one matrix-vector product, or, for chains run vectorized, one matrix-matrix
    product ``(chains, n) x (n, p(p+3)/2)`` over a matrix shared by the chains. On XLA's CPU
    backend (n = 1000, p = 21) that is about 4x faster than the einsum ``Z^T diag(w) Z`` for
    four vectorized chains and 1.5-2x for one chain.
    """

    R: jnp.ndarray  # (n, p (p + 3) / 2)
    index: jnp.ndarray  # (p, p) int32: position of entry (j, k) of the Gram matrix in w^T R
    z_sum: jnp.ndarray  # (p,) Z^T 1


GRAM_ROWS_MAX_SIZE = 2**23
"""Largest ``n p (p + 3) / 2`` (64 MiB in float64) for which :func:`gram_rows` is used."""


def gram_rows(Z) -> GramRows:
    """:class:`GramRows` of ``Z`` (n, p)."""
    p = Z.shape[1]
    upper = np.triu_indices(p)
    index = np.zeros((p, p), np.int32)
    index[upper] = np.arange(len(upper[0]))
    index = index + np.triu(index, 1).T
    R = jnp.concatenate([Z[:, upper[0]] * Z[:, upper[1]], Z], axis=1)
    return GramRows(R, jnp.asarray(index), Z.sum(0))


def _gram_from_rows(rows: GramRows, w, gamma):
    """``(Z^T diag(w) Z, Z^T (w + gamma))`` from one product ``w^T R``."""
    p = rows.z_sum.shape[0]
    packed = w @ rows.R
    return packed[rows.index], packed[-p:] + gamma * rows.z_sum


def overrelaxed(mean, noise, prev, overrelax):
    r"""Adler's (1981) overrelaxed draw from ``N(mean, C)`` given ``noise ~ N(0, C)``:

    .. math:: z' = \mu + \alpha (z - \mu) + \sqrt{1 - \alpha^2}\, \xi .

    The map is reversible with respect to ``N(mean, C)`` for any ``-1 < alpha < 1``, so the
    sweep still leaves the posterior invariant; ``alpha < 0`` moves ``z`` to the other side of
    the conditional mean and suppresses the random walk of a two-block sampler (Neal 1998).
    ``alpha = 0`` (a Python zero) is the plain draw ``mean + noise`` and ignores ``prev``.
    """
    if isinstance(overrelax, (int, float)) and overrelax == 0:
        return mean + noise
    return mean + overrelax * (prev - mean) + jnp.sqrt(1.0 - overrelax**2) * noise


class Whitened(NamedTuple):
    r"""A GP draw's whitened coordinates ``w = L^{-1} f`` (``K = L L^T``) and its prior quadratic
    form, kept without a product with ``L^T``: ``w = explicit + L^T pending`` and ``quad =
    |w|^2 = f^T K^{-1} f`` (:func:`draw_f`).

    Attributes
    ----------
    explicit : (n,)
    pending : (n,)
    quad : ()
    """

    explicit: jnp.ndarray
    pending: jnp.ndarray
    quad: jnp.ndarray

    def full(self, chol_K):
        """``w`` itself, ``explicit + L^T pending`` (one product with ``L``; for checks)."""
        return self.explicit + self.pending @ chol_K


class FDraw(NamedTuple):
    """Outcome of :func:`draw_f`: the draw, the conjugate-gradient iterations it took (0 on
    the Cholesky path), whether their solve was refused and the Cholesky factor used, and
    the draw's whitened coordinates and prior quadratic form (:class:`Whitened`; None when
    overrelaxed without the previous draw's)."""

    f: jnp.ndarray
    cg_iters: jnp.ndarray
    cg_fallback: jnp.ndarray
    white: Whitened | None = None


def _unless(done, compute, value, operands):
    """``value`` where ``done``, else ``compute(*operands)``. A ``while_loop`` of at most one
    round rather than a ``cond``: under ``vmap`` a ``cond`` on a batched flag computes both
    branches for every chain, the loop runs ``compute`` only when some chain needs it. The
    operands pass an optimisation barrier with the loop's carry, so that XLA cannot hoist
    ``compute``, whose inputs do not change in the loop, out of it (and run it always). Keep
    large loop-invariant arrays out of ``operands`` (``compute`` may close over them): what
    passes the barrier is copied into the loop's state even when the loop does not run, which
    for ``K`` cost 150 ms per sweep of 4 chains at ``n = 5000``."""
    def body(carry):
        _, operands_ = jax.lax.optimization_barrier((carry, operands))
        return jnp.ones_like(carry[0]), compute(*operands_)

    return jax.lax.while_loop(lambda carry: ~carry[0], body, (done, value))[1]


def _by_cholesky(K, noise, b):
    """``x = (K + diag(noise))^{-1} b`` and ``K x``, by a Cholesky factor (``K`` dense or
    :class:`~ppl_bsvm.inference.mcmc.packed.Packed`, unpacked already scaled)."""
    if isinstance(K, packed.Packed):
        s = 1.0 / jnp.sqrt(noise)
        x = gaussian.solve(gaussian.factor_scaled(packed.unpack(K, b.shape[0], s), s), b)
        return x, packed.times(K, x)
    x = gaussian.solve(gaussian.factor(K.T, noise), b)
    return x, K @ x


@custom_vmap
def _by_chain(K, noise, b):
    """:func:`_by_cholesky`, one chain at a time under ``vmap`` (:func:`_one_chain_at_a_time`):
    as the conjugate-gradient solve's fallback, it would otherwise hold a factor per chain (8
    ``n x n`` temporaries for 4 chains, 26 GB at 2 x 10^4 points, reserved by every sweep's
    program though the fallback rarely runs); LAPACK factorises a batch one matrix at a time
    anyway."""
    return _by_cholesky(K, noise, b)


@_by_chain.def_vmap
def _one_chain_at_a_time(axis_size, in_batched, K, noise, b):
    if any(jax.tree.leaves(in_batched[0])):  # a K per chain: nothing to share
        return jax.vmap(_by_cholesky)(K, noise, b), (True, True)
    noise, b = (a if batched else jnp.broadcast_to(a, (axis_size, *a.shape))
                for a, batched in zip((noise, b), in_batched[1:]))
    return jax.lax.map(lambda a: _by_chain(K, *a), (noise, b)), (True, True)


def draw_f(key, lam, K, chol_K, y, gamma=1.0, prev=None, overrelax=0.0, pre=None,
           prev_white: Whitened | None = None) -> FDraw:
    r""":func:`sample_f` with its solver's record (:class:`FDraw`).

    ``K`` is dense, or (with ``pre``) its lower blocks
    (:class:`~ppl_bsvm.inference.mcmc.packed.Packed`).
    ``pre`` (:class:`~ppl_bsvm.inference.mcmc.pcg.Preconditioner`) solves ``(K + N) x = b``
    by preconditioned conjugate gradients to a backward error of
    :data:`~ppl_bsvm.inference.mcmc.pcg.TOL`; a solve that does not get there is replaced
    by the Cholesky solve, so the draw is always exact. None: the Cholesky factor of
    ``I + S K S`` (:func:`ppl_bsvm.inference.gaussian.factor`).

    The draw also gives its whitened coordinates ``w = L^{-1} f`` (``K = L L^T``) and prior
    quadratic form ``|w|^2 = f^T K^{-1} f`` with neither a triangular solve nor a product with
    ``L^T`` (:class:`Whitened`). ``L^{-1} f_0 = xi`` and ``L^{-1} K x = L^T x``, so the plain
    draw ``f = f_0 + K x`` has ``w = xi + L^T x``, kept as ``explicit = xi`` and ``pending =
    x``, and

    .. math:: |w|^2 = |\xi|^2 + 2 f_0^\top x + x^\top K x

    from ``f_0 = L xi`` and ``K x``, which the draw computes anyway. Adler's move ``f' = alpha
    f + beta f_0 + K x`` (:func:`sample_f`) has ``w' = alpha w + beta xi + L^T x``: given the
    previous draw's ``w = e + L^T s`` and ``|w|^2`` (``prev_white``), ``e' = alpha e + beta
    xi``, ``s' = alpha s + x`` and

    .. math:: |w'|^2 = \alpha^2 |w|^2 + \beta^2 |\xi|^2 + x^\top K x
              + 2 \alpha\beta\, (e^\top \xi + s^\top f_0) + 2 \alpha f^\top x
              + 2 \beta f_0^\top x ,

    using ``w^T xi = e^T xi + s^T L xi`` and ``w^T L^T x = (L w)^T x = f^T x``. The product
    ``x^T L`` this replaces read ``L``'s ``8 n^2`` bytes once more a sweep: 94 ms of a sweep of
    1,150 ms for 4 chains at ``n = 10^4`` (medians of 20 alternations in one process, the
    2-core AMD machine of 4 December 2026). The rounding ``|w|^2`` inherits shrinks by
    ``alpha^2`` a draw, ``pending`` and ``explicit`` by ``|alpha|``
    (``tests/inference/mcmc/test_mcmc.py`` checks both after 200 sweeps).
    """
    n = y.shape[0]
    xi = standard_normal(key, (2, n), K.dtype)
    noise = lam / gamma
    f0 = chol_K @ xi[0]
    f0_e = f0 + jnp.sqrt(noise) * xi[1]
    target = y * (1.0 + lam)
    plain = isinstance(overrelax, (int, float)) and overrelax == 0
    if plain:
        shrink = None
        base, b = f0, target - f0_e
    else:
        shrink = jnp.sqrt(1.0 - overrelax**2)
        base, b = overrelax * prev + shrink * f0, (1.0 - overrelax) * target - shrink * f0_e

    if pre is None:  # the fallback's code: a chain's draw does not depend on the path
        (x, Kx), iters, fallback = _by_chain(K, noise, b), 0, False
    else:
        cg = pcg.solve(pre, K, noise, b, pcg.TOL, pcg.MAX_ITER)
        x, Kx = _unless(cg.ok, lambda noise, b: _by_chain(K, noise, b), (cg.x, cg.Kx),
                        (noise, b))
        iters, fallback = cg.iters, ~cg.ok
    white = _whitened(xi[0], f0, x, Kx, prev, overrelax, shrink, prev_white)
    return FDraw(base + Kx, jnp.asarray(iters, jnp.int32), jnp.asarray(fallback, jnp.int32),
                 white)


def _whitened(xi, f0, x, Kx, prev, alpha, beta, prev_white) -> Whitened | None:
    """The draw's :class:`Whitened` (:func:`draw_f`'s doc) for Adler's coefficients ``alpha``
    and ``beta = sqrt(1 - alpha^2)`` (None: the plain draw), None when overrelaxed without the
    previous draw's."""
    if beta is None:
        return Whitened(xi, x, xi @ xi + 2.0 * (f0 @ x) + x @ Kx)
    if prev_white is None:
        return None
    e, s, quad = prev_white
    cross = e @ xi + s @ f0
    quad = (alpha**2 * quad + beta**2 * (xi @ xi) + x @ Kx + 2.0 * alpha * beta * cross
            + 2.0 * alpha * (prev @ x) + 2.0 * beta * (f0 @ x))
    return Whitened(alpha * e + beta * xi, alpha * s + x, quad)


def sample_f(key, lam, K, chol_K, y, gamma=1.0, prev=None, overrelax=0.0, pre=None):
    r"""``f | lam ~ N(K (K + N)^{-1} Y(1 + lam), K - K (K + N)^{-1} K)``, ``N = Lambda/gamma``.

    Matheron's rule (spec section 6): ``f = f0 + K (K + N)^{-1} (Y(1 + lam) - f0 - e)`` with
    ``f0 = chol_K xi_1 ~ N(0, K)`` and ``e ~ N(0, N)``: one solve with ``K + N``, through
    the Cholesky factor of ``I + S K S``, ``S = N^{-1/2}``
    (:func:`ppl_bsvm.inference.gaussian.factor`), or, given ``pre``, by preconditioned
    conjugate gradients to working precision (:mod:`ppl_bsvm.inference.mcmc.pcg`).

    With Adler's overrelaxation (:func:`overrelaxed`) the move
    ``mean + alpha (prev - mean) + sqrt(1 - alpha^2) (f0 - K (K + N)^{-1} (f0 + e))``, where
    ``mean = K (K + N)^{-1} Y(1 + lam)``, is linear in the solves, so it is one solve too:

    .. math:: f' = \alpha f + \beta f_0 + K (K + N)^{-1}
              \big((1 - \alpha) Y(1 + \lambda) - \beta (f_0 + e)\big),
              \quad \beta = \sqrt{1 - \alpha^2}.

    Parameters
    ----------
    key : PRNG key
    lam : array of shape (n,)
    K : array of shape (n, n)
        Prior covariance (jittered).
    chol_K : array of shape (n, n)
        Its lower Cholesky factor.
    y : array of shape (n,)
    gamma : float
    prev : array of shape (n,), optional
        The current ``f``; needed when ``overrelax != 0``.
    overrelax : float in (-1, 1), default=0.0
        Adler's coefficient (:func:`overrelaxed`).
    pre : Preconditioner, optional
        Solve by conjugate gradients with it (:func:`draw_f`).

    Returns
    -------
    f : array of shape (n,)
    """
    return draw_f(key, lam, K, chol_K, y, gamma, prev, overrelax, pre).f
