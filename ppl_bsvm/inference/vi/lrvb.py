r"""Linear-response covariances of the Bayesian SVM's mean-field VI (LRVB).

Giordano, Broderick and Jordan, "Covariances, robustness and variational Bayes" (JMLR 19,
2018), eq. 5 and section 3; ``specs/lrvb.md``. Tilt the log joint by a linear term in the
Gaussian block ``x`` (``beta``, ``f`` or the whitened ``v``):
``log p_t = log p + t^T x``. For the exact posterior ``d E_t[x] / dt |_{t=0} = Cov(x)``; LRVB
takes the same derivative of the *variational* mean at the converged fixed point. Mean-field
VI underestimates ``Cov(x)`` because ``q(x) q(lam)`` ignores how ``x`` and ``lam`` move
together; the response of the fixed point to the tilt restores that coupling.

**Implicit differentiation.** Let ``theta* = G(theta*, 0)`` be the fixed point of one
coordinate-ascent sweep ``G`` (the tilt enters the natural parameter of ``q(x)``:
``eta1 += t``). Differentiating ``theta*(t) = G(theta*(t), t)`` gives

.. math::

    \frac{d\theta^*}{dt} = (I - \partial_\theta G)^{-1}\, \partial_t G, \qquad
    \mathrm{Cov}_{LR}(x) = \frac{d\, \mathrm{mean}(\theta^*(t))}{dt}\Big|_{t=0},

symmetrised (:func:`response`; Jacobians by ``jax.jvp`` column blocks, no finite
differences). When ``(I - dG/dtheta)`` is singular or the result is not positive definite,
or the fixed point is not converged, :func:`accept` warns and the mean-field covariance is
kept (never a NaN).

**The Gaussian-sites sweep** (:func:`sites_map`): the linear model (``Z`` rows
``z_i = y_i x_i``, prior precision ``I / s^2``), and S-BSVM in whitened coordinates share

.. math::

    \alpha_i = (1 - z_i^\top\mu)^2 + z_i^\top\Sigma z_i + c_i,\quad
    \Sigma' = (\gamma Z^\top A^{-1/2} Z + P_0)^{-1},\quad
    \mu' = \Sigma'(\gamma Z^\top (1 + \alpha^{-1/2}) + t)

(Wenzel et al. 2017, eq. 14; ``c_i = 0`` for the linear model). The state is
``theta = (mu, vech Sigma)`` of dimension ``P = p + p (p + 1) / 2``, so the solve is
``O(P^3)`` and the Jacobian one data pass per direction, ``O(n p^2 P)``: cheap for the
linear model's few features and independent of how ``n`` compares with ``p``.

**The GP sweep** (B-BSVM, :func:`gp_response`): ``q(f) = N(mu, Sigma)``,
``Sigma = (K^{-1} + W)^{-1}``, ``W = diag(w)``, ``w = gamma alpha^{-1/2}``. With
``r = 1 - y * mu``, ``H = Y Sigma Y``, ``g = gamma alpha^{-3/2} / 2`` the Jacobians of the
sweep ``alpha -> alpha'`` are ``dA/dalpha = (2 D_r H D_r + H o H) D_g``, ``dA/dt = -2 D_r Y
Sigma``, ``dmu/dalpha = -Sigma Y D_r D_g``, ``dmu/dt = Sigma``, whence

.. math::

    \mathrm{Cov}_{LR}(f) = \Sigma + \Sigma E \Sigma, \qquad
    E = 2\, Y D_r \big(D_g^{-1} - 2 D_r H D_r - H \circ H\big)^{-1} D_r Y,

one symmetric ``n x n`` solve (``D_g (I - J)^{-1} = (D_g^{-1} - J D_g^{-1})^{-1}``), ``O(n^3)``
like a sweep. (Differentiating the ``n x n`` Cholesky factorisation forward in ``n`` directions
would cost ``O(n^4)``; the test checks these Jacobians against ``jax.jacfwd`` of the sweep.)
``Cov_LR = K - K D K`` with ``D = (K + N)^{-1} - G^T E G``, ``G = I - K (K + N)^{-1}``, which
the predictive uses without inverting ``K``.

**The Gaussian-sites closed form** (S-BSVM: :class:`SitesMoments`, :func:`sites_precision_factor`,
:func:`sites_dense_factor`).
The same derivation for :func:`sites_map` (``Y`` replaced by ``Z``, ``H = Z Sigma Z^T``,
``r = 1 - Z mu``; the offsets ``c_i`` drop out of every derivative) gives
``Cov_LR = Sigma + Sigma E Sigma`` with ``E = 2 Z^T D_r (D_g^{-1} - 2 D_r H D_r - H o H)^{-1}
D_r Z``. With ``Sigma = S S^T``, ``W = Z S`` (rows ``w_i = S^T z_i``) the matrix in the middle
is ``D_g^{-1} - U U^T`` of rank ``P = p (p + 3) / 2`` (the ``P`` above):
``U = [vechs(w_i w_i^T), sqrt(2) r_i w_i]`` row by row, ``vechs`` the upper triangle with the
off-diagonal entries times ``sqrt(2)`` (so that ``vechs(a a^T)^T vechs(b b^T) = (a^T b)^2``,
``H o H = V V^T``). Woodbury's identity and ``G (I - G)^{-1} = (I - G)^{-1} - I`` collapse
``Sigma + Sigma E Sigma`` to

.. math::

    \mathrm{Cov}_{LR} = S \big[(I_P - G)^{-1}\big]_{xx} S^\top, \qquad
    G = U^\top D_g U = \sum_i g_i\, u_i u_i^\top \quad (P \times P),

``[.]_{xx}`` the trailing ``p x p`` block (the mean's). ``G``'s nonzero eigenvalues are those of
the sweep's Jacobian ``dA/dalpha = U U^T D_g``, below 1 at a stable fixed point, so ``I - G``
is positive definite and has a Cholesky factor ``R``; the trailing block of ``(I - G)^{-1}``
is the inverse of the Schur complement ``R_xx R_xx^T`` of the quadratic block. With ``S =
P_L^{-T}`` (``P_L P_L^T = Sigma^{-1}``) the linear-response precision is therefore
``(P_L R_xx)(P_L R_xx)^T``, lower-triangular factor ``P_L R_xx``: no inverse beyond the
Cholesky factorisation, and never narrower than mean-field (``R_xx R_xx^T <= I``).

``G`` is a sum over the data, accumulated in chunks of rows by :class:`SitesMoments`: its
quadratic block holds the fourth moments ``sum_i g_i w_ia w_ib w_ic w_id``, of which only
``p^4 / 24`` are distinct, and the accumulator forms each about once by matrix products
(``U^T U`` would form ``p^4 / 4``), then gathers ``G`` from them; the factorisation costs
``P^3 / 3 = O(p^6 / 24)``. The covariance depends on every one of those moments, so a pass of
``O(n p^4 / 24)`` is the floor of this route: it is not ``O(p^3)``, nor free of ``n``. With fewer
rows than about ``P`` the ``n x n`` form is cheaper (:func:`sites_dense_factor`:
``[(I - G)^{-1}]_xx = I + 2 W^T D_r M^{-1} D_r W``, ``M = D_g^{-1} - 2 D_r H D_r - H o H``,
``O(n^2 p + n^3 / 3)``). The ``jvp`` route (:func:`response`) computes the same response
column by column, ``P`` passes of ``O(n p^2)``; the tests check the three against each other.

**The Schur route** (:class:`SchurSums`, :func:`quad_apply_add`, :func:`series_error`). Only
the trailing block is wanted, the inverse of the Schur complement
``C = I - G_xx - G_xq (I - G_qq)^{-1} G_qx``. ``G_qq = sum_i g_i q_i q_i^T``,
``q_i = vechs(w_i w_i^T)``, is positive semi-definite, and its product with a ``Pq x k`` matrix
``B`` needs no fourth moments: ``q_i^T B_j = w_i^T V_j w_i`` (``V_j`` the symmetric matrix of
column ``j``), so ``G_qq B = sum_i g_i q_i (q_i^T B)``, ``O(p^2 k)`` a row. With
``B_0 = G_qx`` and ``B_j = G_qq B_{j-1}``, ``B_0^T (I - G_qq)^{-1} B_0 = sum_t B_0^T G_qq^t B_0``
and ``K`` products give the terms through ``t = 2 K`` (``B_j^T B_j`` and ``B_j^T B_{j+1}``).
``G_qq``'s largest eigenvalue is at most that of the ``p x p`` matrix
``sum_i g_i |w_i|^2 w_i w_i^T`` (:func:`quad_norm_bound`), which certifies the truncation
(:func:`series_error`). Each product
costs ``3 p^3 / 2`` a row and the memory is ``O(p^3)``, against ``p^4 / 18`` and ``3 P^2``.
"""

from __future__ import annotations

import warnings
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve, solve_triangular

from ...exceptions import ConvergenceWarning
from .. import gaussian
from ..mvn import cov_factor
from .fixed_point import ANDERSON_DEPTH, anderson, pack, unpack

__all__ = [
    "RESIDUAL_TOL",
    "Sites",
    "sites_map",
    "pack",
    "unpack",
    "response",
    "sites_response",
    "sites_linear_response",
    "MOMENT_FLOATS",
    "uses_dense",
    "moments_chunk",
    "response_chunk",
    "polish",
    "relative_change",
    "POLISH_ITER",
    "ANDERSON_DEPTH",
    "gp_response",
    "SitesMoments",
    "moment_blocks",
    "moments_init",
    "moments_add",
    "moments_add_single",
    "in_single",
    "moments_gram",
    "SchurSums",
    "schur_init",
    "schur_add",
    "vechs",
    "unvechs",
    "vechs_rows",
    "quad_operand",
    "quad_apply_add",
    "quad_norm_bound",
    "series_error",
    "series_flops",
    "sites_precision_factor",
    "sites_factors",
    "sites_dense_factor",
    "moments_flops",
    "dense_flops",
    "accept",
]

RESIDUAL_TOL = 1e-6
"""Largest relative residual ``|G(theta) - theta| / |theta|`` (max norms) of a fixed point
whose linear response is trusted: the error of the response is about the residual divided by
``1 - ||dG/dtheta||``."""

_JVP_BUDGET = 2**23
"""Floats the Jacobian's block of ``jvp`` directions may hold at once (``n p`` per direction)."""


class Sites(NamedTuple):
    """The Gaussian-sites coordinate ascent (module doc): ``Z (n, p)``, prior precision
    ``prior_prec (p, p)``, ``gamma ()`` and the fixed part ``offset`` of ``alpha`` (``(n,)`` or
    ``()``: S-BSVM's ``Ktilde_ii``, 0 for the linear model)."""

    Z: jnp.ndarray
    prior_prec: jnp.ndarray
    gamma: jnp.ndarray
    offset: jnp.ndarray


def sites_map(sites: Sites, theta, t):
    """One sweep of the Gaussian-sites ascent with tilt ``t`` (module doc): ``theta -> theta'``."""
    p = sites.Z.shape[1]
    mu, Sigma = unpack(theta, p)
    Z = sites.Z
    alpha = (1.0 - Z @ mu) ** 2 + jnp.sum((Z @ Sigma) * Z, axis=1) + sites.offset
    w = sites.gamma / jnp.sqrt(alpha)
    chol = jnp.linalg.cholesky((Z.T * w) @ Z + sites.prior_prec)
    mu_new = cho_solve((chol, True), Z.T @ (sites.gamma + w) + t)
    Sigma_new = cho_solve((chol, True), jnp.eye(p, dtype=Z.dtype))
    return pack(mu_new, 0.5 * (Sigma_new + Sigma_new.T))


def _columns(f, x, size: int, chunk: int):
    """The Jacobian ``df/dx`` (``(out, dim x)``) by ``jax.jvp`` in blocks of ``chunk``
    directions (memory bounded, one compiled block)."""
    dim = x.shape[0]
    blocks = -(-dim // chunk)
    basis = jnp.eye(blocks * chunk, dim, dtype=x.dtype).reshape(blocks, chunk, dim)
    cols = jax.lax.map(lambda B: jax.vmap(lambda v: jax.jvp(f, (x,), (v,))[1])(B), basis)
    return cols.reshape(blocks * chunk, size)[:dim].T


def response(fixed_map, theta, tilt_dim: int, num_mean: int, chunk: int):
    r"""``d mean(theta*)/dt`` at ``t = 0`` by implicit differentiation (module doc).

    Parameters
    ----------
    fixed_map : callable ``(theta, t) -> theta``
        One sweep, the tilt ``t`` of shape ``(tilt_dim,)``.
    theta : (P,)
        The fixed point.
    num_mean : int
        The mean is ``theta[:num_mean]``.
    chunk : int
        ``jvp`` directions per block.

    Returns
    -------
    cov : (num_mean, tilt_dim)
        ``[(I - dG/dtheta)^{-1} dG/dt]_{:num_mean}``, symmetrised when square.
    residual : ()
        ``|G(theta, 0) - theta|_inf / |theta|_inf``.
    """
    P = theta.shape[0]
    t0 = jnp.zeros(tilt_dim, theta.dtype)
    image = fixed_map(theta, t0)
    J = _columns(lambda th: fixed_map(th, t0), theta, P, chunk)
    Jt = _columns(lambda t: fixed_map(theta, t), t0, P, min(chunk, tilt_dim))
    dtheta = jnp.linalg.solve(jnp.eye(P, dtype=theta.dtype) - J, Jt)
    cov = dtheta[:num_mean]
    if num_mean == tilt_dim:
        cov = 0.5 * (cov + cov.T)
    return cov, relative_change(theta, image)


def _chunk(n: int, p: int, P: int) -> int:
    return int(max(1, min(P, _JVP_BUDGET // max(n * p, 1))))


POLISH_ITER = 2000
"""Sweeps at most that :func:`polish` takes from where an engine stopped towards the fixed
point (until the relative change of a sweep is at most :data:`POLISH_TOL`)."""

POLISH_TOL = 1e-11
"""Relative change of a sweep (max norms) at which :func:`polish` stops."""


def relative_change(th, new):
    """``|new - th|_inf / |th|_inf``: a sweep's relative change, the fixed point's residual."""
    return jnp.max(jnp.abs(new - th)) / jnp.maximum(jnp.max(jnp.abs(th)), 1e-300)


def polish(fixed_map, theta, max_iter: int, depth: int = ANDERSON_DEPTH,
           tol: float = POLISH_TOL):
    """Iterate ``theta <- fixed_map(theta)`` until ``|change|_inf <= tol |theta|_inf`` (default
    :data:`POLISH_TOL`) or ``max_iter`` sweeps (one compiled ``while_loop``):
    ``(theta, sweeps)``.

    With ``depth > 0`` (the default) the iteration is Anderson-accelerated
    (:func:`~ppl_bsvm.inference.vi.fixed_point.anderson`, Walker and Ni 2011); the fixed point
    is the same, only the number of sweeps changes.
    """
    out = anderson(lambda x: (fixed_map(x), None), theta, max_iter,
                   lambda x, gx, _: relative_change(x, gx), lambda s: s.res <= tol,
                   depth=depth)
    return out.x, out.k


@partial(jax.jit, static_argnames=("chunk", "max_iter"))
def _sites_response(sites: Sites, mu, Sigma, chunk: int, max_iter: int):
    p = mu.shape[0]
    fixed_map = partial(sites_map, sites)
    theta, _ = polish(lambda th: fixed_map(th, jnp.zeros(p, th.dtype)), pack(mu, Sigma),
                      max_iter)
    cov, residual = response(fixed_map, theta, p, p, chunk)
    return cov, residual, unpack(theta, p)[1]


def sites_response(sites: Sites, mu, Sigma, max_iter: int | None = None):
    """The linear-response covariance ``(p, p)`` of ``q(x)`` at the fixed point of
    :func:`sites_map` reached from ``N(mu, Sigma)`` (at most ``max_iter`` sweeps, default
    :data:`POLISH_ITER`), the fixed point's relative residual and its mean-field ``Sigma``."""
    n, p = sites.Z.shape
    P = p + p * (p + 1) // 2
    max_iter = POLISH_ITER if max_iter is None else max_iter
    return _sites_response(sites, mu, Sigma, _chunk(n, p, P), max_iter)


MOMENT_FLOATS = 2**22
"""Floats of each ``(p (p + 1) / 2, rows)`` product in a chunk of :func:`moments_add` rows
(32 MB)."""


def uses_dense(rows: int, p: int) -> bool:
    """Whether the ``n x n`` form (:func:`sites_dense_factor`) costs fewer operations than
    the moments for ``rows`` (padded) rows of ``p`` columns."""
    return dense_flops(rows, p) < moments_flops(rows, p)


def moments_chunk(rows: int, p: int) -> int:
    """Rows per chunk of the moments pass: at most :data:`MOMENT_FLOATS` floats in each of
    the chunk's ``(p (p + 1) / 2, rows)`` products of ``w``'s entries."""
    return int(max(1, min(rows, MOMENT_FLOATS // _tri(p))))


def response_chunk(rows: int, p: int) -> int:
    """What the closed-form responses are compiled for: 0 for the ``n x n`` form
    (:func:`uses_dense`), else the moments pass's :func:`moments_chunk`."""
    return 0 if uses_dense(rows, p) else moments_chunk(rows, p)


@partial(jax.jit, static_argnames=("chunk", "max_iter"))
def _sites_closed_form(sites: Sites, mu, Sigma, chunk: int, max_iter: int):
    p = mu.shape[0]
    fixed_map = partial(sites_map, sites)
    zero = jnp.zeros(p, mu.dtype)
    theta, _ = polish(lambda th: fixed_map(th, zero), pack(mu, Sigma), max_iter)
    residual = relative_change(theta, fixed_map(theta, zero))
    mu, Sigma = unpack(theta, p)
    Z = sites.Z
    n = Z.shape[0]
    r = 1.0 - Z @ mu
    alpha = r**2 + jnp.sum((Z @ Sigma) * Z, axis=1) + sites.offset
    # the fixed point's precision, whose factor P_L gives S = P_L^{-T} (module doc)
    chol_prec = jnp.linalg.cholesky((Z.T * (sites.gamma / jnp.sqrt(alpha))) @ Z
                                    + sites.prior_prec)
    W = Z @ cov_factor(chol_prec)
    g = 0.5 * sites.gamma * alpha**-1.5
    if chunk == 0:
        factor = sites_dense_factor(chol_prec, W, r, g, jnp.ones(n, bool))
    else:
        blocks = -(-n // chunk)
        pad = blocks * chunk - n
        Wp, rp, gp = (jnp.pad(a, ((0, pad),) + ((0, 0),) * (a.ndim - 1)) for a in (W, r, g))

        def add(i, acc):
            rows = lambda a: jax.lax.dynamic_slice_in_dim(a, i * chunk, chunk)  # noqa: E731
            return moments_add(acc, rows(Wp), rows(rp), rows(gp))  # padding: g = 0

        acc = jax.lax.fori_loop(0, blocks, add, moments_init(p, mu.dtype))
        factor = sites_precision_factor(chol_prec, moments_gram(acc))
    cov = cho_solve((factor, True), jnp.eye(p, dtype=mu.dtype))
    return 0.5 * (cov + cov.T), residual, Sigma


def sites_linear_response(sites: Sites, mu, Sigma, max_iter: int | None = None):
    """:func:`sites_response` by the closed form (module doc): the ``n x n`` form
    (:func:`sites_dense_factor`) or the moments (:func:`sites_precision_factor`), whichever
    costs fewer operations, instead of ``P`` Jacobian passes and a ``P x P`` solve. At
    ``n = 750``, ``p = 101`` (``P = 5,252``) the Jacobian route took 10 s; the same
    covariance to rounding (tested)."""
    n, p = sites.Z.shape
    max_iter = POLISH_ITER if max_iter is None else max_iter
    return _sites_closed_form(sites, mu, Sigma, response_chunk(n, p), max_iter)


@jax.jit
def gp_response(K, fac: gaussian.NoisyFactor, mu, y, alpha, gamma):
    """B-BSVM's linear response (module doc): ``(cov, D, residual)``, ``cov = K - K D K`` the
    LR covariance of ``f`` at the training inputs, ``D (n, n)`` for the predictive and the
    relative residual ``|alpha' - alpha|_inf / |alpha|_inf`` of the sweep at ``alpha``."""
    n = K.shape[0]
    Sigma = gaussian.posterior_cov(K, fac)
    Sigma = 0.5 * (Sigma + Sigma.T)
    r = 1.0 - y * mu
    H = y[:, None] * Sigma * y[None, :]
    g = 0.5 * gamma * alpha ** -1.5
    middle = jnp.diag(1.0 / g) - 2.0 * r[:, None] * H * r[None, :] - H * H
    E = 2.0 * (y * r)[:, None] * jnp.linalg.solve(middle, jnp.diag(y * r))
    E = 0.5 * (E + E.T)
    cov = Sigma + Sigma @ E @ Sigma
    # (K + N)^{-1} K and G = I - K (K + N)^{-1}, so that Sigma = K G^T = G K
    KN_K = gaussian.solve(fac, K)
    G = jnp.eye(n, dtype=K.dtype) - KN_K.T
    KN = gaussian.solve(fac, jnp.eye(n, dtype=K.dtype))
    D = KN - G.T @ E @ G
    new = r**2 + jnp.diag(Sigma)
    residual = jnp.max(jnp.abs(new - alpha)) / jnp.max(jnp.abs(alpha))
    return 0.5 * (cov + cov.T), 0.5 * (D + D.T), residual


class SitesMoments(NamedTuple):
    """The sums behind ``G = sum_i g_i u_i u_i^T`` (module doc), accumulated over chunks of
    rows by :func:`moments_add` and assembled by :func:`moments_gram`.

    ``blocks[k]`` holds the fourth moments ``sum_i g_i w_ia w_ib w_ic w_id`` for the pairs
    ``a <= b`` with ``b`` in the ``k``-th of :func:`moment_blocks` ranges (rows, ordered by
    ``b`` then ``a``) and the pairs ``b_k <= c <= d`` (columns, ordered by ``c`` then ``d``;
    ``b_k`` the range's start): every multiset ``{a <= b <= c <= d}`` is there once with
    ``b``'s range, so the blocks hold about ``1 / K`` more than the ``p^4 / 24`` distinct
    fourth moments where ``U^T U`` would compute ``p^4 / 4``. ``quad_lin (Pq, p)`` and
    ``lin (p, p)`` are the blocks ``G_{qx}``, ``G_{xx}`` (``Pq = p (p + 1) / 2``).
    """

    blocks: tuple
    quad_lin: jnp.ndarray
    lin: jnp.ndarray


def moment_blocks(p: int) -> np.ndarray:
    """Bounds of the ranges of ``b`` in :class:`SitesMoments` (``K + 1`` values): one range
    below 48 and 4 below 96 (equal products then run faster as one), 8 beyond (measured on
    2 cores, chunks of 1024-2048 rows: at ``p = 64`` 4 ranges took 217 ms against 343 ms for
    ``U^T U``, at ``p = 100`` 8 ranges 373 ms against 1106 ms)."""
    K = 1 if p < 48 else 4 if p < 96 else 8
    return np.linspace(0, p, K + 1).astype(int)


def _tri(b):
    return b * (b + 1) // 2


def _row_major(c, p: int):
    """Position of the pair ``(c, c)`` among the pairs ``i <= j`` ordered by ``i`` then ``j``."""
    return c * p - c * (c - 1) // 2


def _by_second(p: int):
    """The pairs ``a <= b`` ordered by ``b`` then ``a``."""
    b = np.repeat(np.arange(p), np.arange(1, p + 1))
    return np.concatenate([np.arange(k + 1) for k in range(p)]), b


def _nt(A, B):
    """``A B^T`` (both stored row-major: a contiguous slice of rows is a block)."""
    return jax.lax.dot_general(A, B, (((1,), (1,)), ((), ())))


def moments_init(p: int, dtype) -> SitesMoments:
    bounds = moment_blocks(p)
    Pq = _tri(p)
    blocks = tuple(jnp.zeros((_tri(b1) - _tri(b0), Pq - _row_major(b0, p)), dtype)
                   for b0, b1 in zip(bounds[:-1], bounds[1:]))
    return SitesMoments(blocks, jnp.zeros((Pq, p), dtype), jnp.zeros((p, p), dtype))


def _mean_blocks(by_first, W, r, g):
    """The chunk's ``G_{qx} (Pq, p)`` and ``G_{xx} (p, p)`` from its products ``w_a w_b``
    (``by_first (Pq, rows)``, pairs ``a <= b`` ordered by ``a``)."""
    quad_lin = _nt(_vechs_scale(W.shape[1], W.dtype)[:, None] * by_first * (2.0**0.5 * g * r),
                   W.T)
    return quad_lin, 2.0 * (W.T * (g * r * r)) @ W


def moments_add(acc: SitesMoments, W, r, g) -> SitesMoments:
    """Add the rows ``w_i`` (``W (b, p)``) with their ``r_i`` and weights ``g_i`` (0 for a
    row that must not count)."""
    p = W.shape[1]
    bounds = moment_blocks(p)
    Wt = W.T
    i, j = np.triu_indices(p)
    a, b = _by_second(p)
    by_first = Wt[i] * Wt[j]  # (Pq, rows): w_i w_j, pairs ordered by i
    by_second = Wt[a] * Wt[b] * g  # ordered by b
    blocks = tuple(old + _nt(by_second[_tri(b0):_tri(b1)], by_first[_row_major(b0, p):])
                   for old, b0, b1 in zip(acc.blocks, bounds[:-1], bounds[1:]))
    quad_lin, lin = _mean_blocks(by_first, W, r, g)
    return SitesMoments(blocks, acc.quad_lin + quad_lin, acc.lin + lin)


def in_single(add, acc, *rows):
    """``add`` applied to a zero accumulator and ``rows`` in single precision, its sums then
    added to ``acc`` in ``acc``'s own precision (a chunk's products in float32, their running
    total in float64)."""
    zero = jax.tree.map(lambda a: jnp.zeros(a.shape, jnp.float32), acc)
    part = add(zero, *(a.astype(jnp.float32) for a in rows))
    return jax.tree.map(lambda a, b: a + b.astype(a.dtype), acc, part)


def moments_add_single(acc: SitesMoments, W, r, g) -> SitesMoments:
    """:func:`moments_add` with the chunk's products in single precision, added to ``acc`` in
    its own (double): about 1.8 times faster (``m = 64``, 36,288 rows in chunks of 2,016, 2
    cores: 2.3-3.0 s -> 1.3-1.5 s). Each entry of a chunk's sum then carries a relative error
    of about ``sqrt(rows) u``, ``u = 2^-24`` (2.7e-6 at 2,016 rows; 2.3e-7 measured over
    36,288), which ``(I - G)^{-1}`` amplifies by at most ``1 / (1 - ||G||)``: for a
    subsample's moments, whose Monte-Carlo error is larger (``sbsvm_response._sampled_pass``),
    not for an exact sum."""
    return in_single(moments_add, acc, W, r, g)


def moments_gram(acc: SitesMoments):
    """``G (P, P)``: the quadratic block (pairs ``i <= j`` ordered by ``i``, off-diagonal
    pairs scaled by ``sqrt(2)``, :func:`sites_map`'s ``vechs``) gathered from the blocks, then
    the mean's."""
    p = acc.lin.shape[0]
    bounds = moment_blocks(p)
    flat = jnp.concatenate([blk.ravel() for blk in acc.blocks])
    starts = np.cumsum([0] + [blk.size for blk in acc.blocks])[:-1]
    b0 = bounds[:-1]
    i, j = np.triu_indices(p)
    scale = np.where(i == j, 1.0, np.sqrt(2.0))

    def row(args):
        i1, j1, s1 = args
        # the sorted multiset {w <= x <= y <= z} of the two pairs, split as (w, x), (y, z)
        w, z = jnp.minimum(i1, i), jnp.maximum(j1, j)
        x, y = jnp.minimum(jnp.maximum(i1, i), jnp.minimum(j1, j)), \
            jnp.maximum(jnp.maximum(i1, i), jnp.minimum(j1, j))
        k = jnp.searchsorted(bounds[1:], x, side="right")
        start, first = jnp.asarray(starts)[k], jnp.asarray(b0)[k]
        cols = _tri(p) - _row_major(first, p)
        at = (start + (_tri(x) - _tri(first) + w) * cols
              + _row_major(y, p) + (z - y) - _row_major(first, p))
        return flat[at] * s1 * scale

    quad = jax.lax.map(row, (jnp.asarray(i), jnp.asarray(j), jnp.asarray(scale)),
                       batch_size=64)
    top = jnp.concatenate([quad, acc.quad_lin], axis=1)
    bottom = jnp.concatenate([acc.quad_lin.T, acc.lin], axis=1)
    return jnp.concatenate([top, bottom], axis=0)


class SchurSums(NamedTuple):
    """The sums behind the Schur complement of ``I - G``'s quadratic block (:func:`schur_add`,
    module doc): ``quad_lin = G_{qx} (Pq, p)``, ``lin = G_{xx} (p, p)`` as in
    :class:`SitesMoments`, and ``bound = sum_i g_i |w_i|^2 w_i w_i^T (p, p)``, whose largest
    eigenvalue bounds ``G_{qq}``'s (:func:`quad_norm_bound`)."""

    quad_lin: jnp.ndarray
    lin: jnp.ndarray
    bound: jnp.ndarray


def schur_init(p: int, dtype) -> SchurSums:
    return SchurSums(jnp.zeros((_tri(p), p), dtype), jnp.zeros((p, p), dtype),
                     jnp.zeros((p, p), dtype))


def schur_add(acc: SchurSums, W, r, g) -> SchurSums:
    """Add rows ``w_i`` (``W (b, p)``) with their ``r_i`` and weights ``g_i`` to ``acc``:
    ``O(p^3 / 2)`` a row (the ``Pq x p`` block), where :func:`moments_add` costs ``O(p^4 / 18)``
    to ``O(p^4 / 4)``."""
    i, j = np.triu_indices(W.shape[1])
    quad_lin, lin = _mean_blocks(W.T[i] * W.T[j], W, r, g)
    bound = (W.T * (g * jnp.sum(W * W, axis=1))) @ W
    return SchurSums(acc.quad_lin + quad_lin, acc.lin + lin, acc.bound + bound)


def _vechs_scale(p: int, dtype):
    """``vechs``'s weights on the pairs ``a <= b`` ordered by ``a``: 1 on the diagonal,
    ``sqrt(2)`` off it, in ``dtype`` (a numpy float64 would promote single-precision rows)."""
    i, j = np.triu_indices(p)
    return np.where(i == j, 1.0, np.sqrt(2.0)).astype(dtype)


def vechs(Y):
    """``vechs`` of a symmetric ``Y (p, p)``: its pairs ``a <= b`` ordered by ``a``,
    off-diagonal entries times ``sqrt(2)`` (so that ``vechs(A)^T vechs(B) = tr(A B)``)."""
    i, j = np.triu_indices(Y.shape[-1])
    return Y[..., i, j] * _vechs_scale(Y.shape[-1], Y.dtype)


def unvechs(q):
    """Inverse of :func:`vechs` over the last axis of ``q (..., Pq)``: ``(..., p, p)``."""
    p = int(round((np.sqrt(8 * q.shape[-1] + 1) - 1) / 2))
    i, j = np.triu_indices(p)
    U = jnp.zeros(q.shape[:-1] + (p, p), q.dtype).at[..., i, j].set(
        q / _vechs_scale(p, q.dtype))
    return U + jnp.swapaxes(U, -1, -2) - U * jnp.eye(p, dtype=q.dtype)


def vechs_rows(W):
    """``vechs(w_i w_i^T)`` for each row of ``W (b, p)``: ``(b, Pq)``, pairs ``a <= b``
    ordered by ``a``, off-diagonal products times ``sqrt(2)``."""
    i, j = np.triu_indices(W.shape[1])
    return W[:, i] * W[:, j] * _vechs_scale(W.shape[1], W.dtype)


def quad_operand(B):
    """The columns of ``B (Pq, k)`` as symmetric ``p x p`` matrices ``V_j`` (:func:`unvechs`),
    laid out ``(p, k p)`` for :func:`quad_apply_add`'s product."""
    V = unvechs(B.T)
    k, p = V.shape[:2]
    return jnp.transpose(V, (1, 0, 2)).reshape(p, k * p)


def quad_apply_add(acc, W, g, operand):
    """``acc + sum_i g_i q_i q_i^T B`` over the rows of ``W``, ``q_i = vechs(w_i w_i^T)``,
    ``operand = quad_operand(B)``: ``q_i^T B_j = w_i^T V_j w_i`` (``p^3`` a row for the
    ``k = p`` columns), then the sum (``p^3 / 2``). ``G_{qq} B`` without forming ``G_{qq}``."""
    b, p = W.shape
    k = operand.shape[1] // p
    c = jnp.einsum("ikb,ib->ik", (W @ operand).reshape(b, k, p), W)
    return acc + vechs_rows(W).T @ (g[:, None] * c)


def quad_norm_bound(sums: SchurSums):
    """A bound on the largest eigenvalue of ``G_{qq} = sum_i g_i q_i q_i^T``: for symmetric
    ``V`` with ``|vechs V| = |V|_F = 1``, ``vechs(V)^T G_{qq} vechs(V) = sum_i g_i (w_i^T V
    w_i)^2 <= sum_i g_i |w_i|^2 w_i^T V^2 w_i = tr(V^2 H) <= lambda_max(H)`` (Cauchy-Schwarz,
    ``V^2`` positive semi-definite with trace 1), ``H = sums.bound``."""
    return jnp.linalg.eigvalsh(0.5 * (sums.bound + sums.bound.T))[-1]


def series_error(lam, passes, C, M0):
    """Bound on the relative error of ``C^{-1}`` when the Schur complement ``C`` took the
    series of ``(I - G_{qq})^{-1}`` through ``G_{qq}^{2 K}`` (``K = passes``): the remainder
    ``T = B_0^T G_{qq}^{2K+1} (I - G_{qq})^{-1} B_0`` lies between 0 and ``eps B_0^T B_0``,
    ``eps = lam^{2K+1} / (1 - lam)`` (``G_{qq}`` positive semi-definite with norm at most
    ``lam``), so with ``kappa = lambda_max(C^{-1} M_0)``, ``M_0 = B_0^T B_0``, the true
    ``C - T`` has ``|C^{1/2} ((C - T)^{-1} - C^{-1}) C^{1/2}| <= eps kappa / (1 - eps kappa)``.
    Infinite where ``lam >= 1``, ``C`` is not positive definite or ``eps kappa >= 1``."""
    lam = jnp.asarray(lam, C.dtype)
    eps = lam ** (2 * passes + 1) / jnp.where(lam < 1.0, 1.0 - lam, 1.0)
    L = jnp.linalg.cholesky(0.5 * (C + C.T))
    A = solve_triangular(L, solve_triangular(L, M0, lower=True).T, lower=True)
    kappa = jnp.linalg.eigvalsh(0.5 * (A + A.T))[-1]
    bound = eps * kappa / (1.0 - eps * kappa)
    ok = (lam < 1.0) & (eps * kappa < 1.0) & jnp.isfinite(bound)
    return jnp.where(ok, jnp.maximum(bound, 0.0), jnp.inf)


def series_flops(n: int, p: int, passes: int) -> float:
    """Multiply-adds of the Schur route over ``n`` rows with ``passes`` products by
    ``G_{qq}`` (:func:`schur_add`, :func:`quad_apply_add`)."""
    Pq = _tri(p)
    return float(n) * (Pq * p + 2 * p * p + passes * (p**3 + Pq * p))


def sites_precision_factor(chol_prec, G):
    """Lower Cholesky factor ``P_L R_xx`` of the linear-response precision (module doc) from
    the mean-field precision's factor ``P_L`` and ``G = sum_i u_i u_i^T`` formed with
    ``S = P_L^{-T}``; NaN where ``I - G`` is not positive definite."""
    return sites_factors(chol_prec, G)[0]


def sites_factors(chol_prec, G):
    """:func:`sites_precision_factor` and the lower Cholesky factor ``R`` of ``I - G`` it is
    taken from (for more solves with ``I - G``)."""
    m, P = chol_prec.shape[0], G.shape[0]
    R = jnp.linalg.cholesky(jnp.eye(P, dtype=G.dtype) - 0.5 * (G + G.T))
    return chol_prec @ R[P - m:, P - m:], R


def sites_dense_factor(chol_prec, W, r, g, own):
    """:func:`sites_precision_factor` through the ``n x n`` system instead (module doc):
    ``[(I - G)^{-1}]_xx = I + 2 W^T D_r M^{-1} D_r W``, ``M = D_g^{-1} - 2 D_r H D_r - H o H``,
    ``H = W W^T``: ``O(n^2 p + n^3 / 3)``, cheaper than ``G`` when ``n`` is below about ``P``.
    Rows where ``own`` is False (padding) are identity rows of ``M`` and drop out."""
    p = W.shape[1]
    W = W * own[:, None]
    rW = r[:, None] * W
    H = W @ W.T
    M = jnp.diag(jnp.where(own, 1.0 / g, 1.0)) - 2.0 * rW @ rW.T - H * H
    X = solve_triangular(jnp.linalg.cholesky(0.5 * (M + M.T)), rW, lower=True)
    inner = jnp.eye(p, dtype=W.dtype) + 2.0 * X.T @ X
    inverse = cho_solve((jnp.linalg.cholesky(inner), True), jnp.eye(p, dtype=W.dtype))
    return chol_prec @ jnp.linalg.cholesky(0.5 * (inverse + inverse.T))


def moments_flops(n: int, p: int) -> float:
    """Multiply-adds of :class:`SitesMoments` over ``n`` rows and of the factorisation of
    ``I - G``."""
    bounds = moment_blocks(p)
    Pq = _tri(p)
    blocks = sum((_tri(b1) - _tri(b0)) * (Pq - _row_major(b0, p))
                 for b0, b1 in zip(bounds[:-1], bounds[1:]))
    P = Pq + p
    return float(n) * (blocks + Pq * p + p * p) + P**3 / 3.0


def dense_flops(n: int, p: int) -> float:
    """Multiply-adds of :func:`sites_dense_factor` on ``n`` rows."""
    return float(n) * n * (p + n / 3.0) + float(n) * n * p


def _rejection(cov, residual: float, tol: float, semidefinite: bool) -> str | None:
    """Why :func:`accept` rejects ``cov``, or None."""
    if not np.isfinite(residual) or residual > tol:
        return (f"the fixed point is not converged (relative residual {residual:.2g} > "
                f"{tol:g}); raise max_iter or lower tol")
    if not np.all(np.isfinite(cov)):
        return "the linear-response system is singular (non-finite covariance)"
    try:
        np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        eig = np.linalg.eigvalsh(cov)
        if not semidefinite or eig[0] < -1e-9 * max(abs(eig[-1]), 1e-300):
            return ("the linear-response covariance is not positive definite (eigenvalue "
                    f"{eig[0]:.3g})")
    return None


def accept(cov, mean_field_cov, residual, what: str, *, semidefinite: bool = False,
           stacklevel: int = 3, tol: float = RESIDUAL_TOL, failure: str | None = None):
    """Check a linear-response covariance on the host: ``(cov, status)``.

    ``status`` is ``"linear response"`` when ``cov`` is finite and positive definite
    (``semidefinite``: positive semi-definite up to rounding, smallest eigenvalue at least
    ``-1e-9`` times the largest, as the covariance of ``f`` under a singular ``K`` is) and the
    fixed point's residual is at most ``tol`` (:data:`RESIDUAL_TOL`; S-BSVM's subsampled
    response trusts a larger one, ``sbsvm_response.SAMPLED_POLISH_TOL``); otherwise a
    ``ConvergenceWarning`` says why and the mean-field covariance comes back with the status
    ``"mean-field (...)"``. ``failure``: a reason the caller already has (the check fails
    with it).
    """
    cov = np.asarray(cov, dtype=np.float64)
    residual = float(residual)
    reason = failure or _rejection(cov, residual, tol, semidefinite)
    if reason is None:
        return cov, "linear response"
    warnings.warn(
        f"{what}: linear_response=True but {reason}; the mean-field covariance is used instead",
        ConvergenceWarning, stacklevel=stacklevel,
    )
    fallback = None if mean_field_cov is None else np.asarray(mean_field_cov, dtype=np.float64)
    return fallback, "mean-field (" + reason.split(";")[0] + ")"
