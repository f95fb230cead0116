r"""The GP conditional of ``f`` given ``lam`` solved by preconditioned conjugate gradients.

Matheron's draw of :func:`~ppl_bsvm.inference.mcmc.conditionals.sample_f` needs one solve
``(K + N) x = b`` per sweep, ``N = diag(lam) / gamma``. A Cholesky factor of ``I + S K S``
costs ``n^3 / 3`` flops; at ``n = 1000`` that is most of the sweep. But ``K`` is the same in
every sweep, and a smooth kernel's spectrum falls to its floor (the jitter) after a few dozen
eigenvalues. With ``K = U diag(d) U^T`` computed once (:func:`preconditioner`), ``d``
ascending, and ``c = d_1`` its smallest eigenvalue, the matrix

.. math:: P = N + U_r \operatorname{diag}(d_r) U_r^\top + c\,(I - U_r U_r^\top)
            = G^{-1} + W W^\top, \quad G = (N + c I)^{-1},\ W = U_r \operatorname{diag}(d_r - c)^{1/2}

is ``K + N`` with the spectrum of ``K`` below its top ``r`` eigenvalues flattened to ``c``.
It is solved in ``O(n r^2)`` by Woodbury's identity,

.. math:: P^{-1} v = G v - G W M^{-1} W^\top G v, \quad M = I_r + W^\top G W ,

one ``r x r`` Cholesky factor per sweep, and it is a near-perfect preconditioner: ``K + N - P
= U_t \operatorname{diag}(d_t - c) U_t^\top \succeq 0`` over the tail ``t``, so the
eigenvalues of ``P^{-1}(K + N)`` lie in ``[1, 1 + max_t (d_t - c) / (c + nu_min)]`` and all but
the few that belong to points of noise below ``d_{r+1} - c`` are within
``(d_{r+1} - c) / nu`` of 1. Conjugate gradients (:func:`solve`) then converge in a handful of
matrix products with ``K`` (2 to 4 on the Banana benchmark at ``n = 300`` and ``1000``, about
6 to 8 at ``n = 300`` when a sixth of the points have noise 1e-12).

**Exactness.** The iteration stops on the *true* normwise backward error

.. math:: \eta = \frac{\lVert b - (K + N) x \rVert_2}{\lVert K + N\rVert_2 \lVert x \rVert_2
          + \lVert b \rVert_2} \le \text{TOL} ,

with ``||K + N||_2`` replaced by its lower bound ``max(d_n, max nu)`` (so ``eta`` is
overestimated): ``x`` solves ``(K + N + E) x = b`` exactly for some ``||E|| <= TOL ||K + N||``,
the kind of guarantee the Cholesky solve gives (its backward error is bounded by a small
multiple of ``n`` times the unit roundoff). :data:`TOL` is ``2^-50 = 8.9e-16``, four units of
roundoff, so the iteration runs until the residual is at rounding level: on the benchmark's
systems the Cholesky path measures about 3e-17 and conjugate gradients stop between 3e-17 and
2e-16, about one iteration after a tolerance of 1e-13 would have stopped them, and the two draws are
equally close to a refined dense solve (``tests/inference/mcmc/test_pcg.py``). A solve that
has not reached the tolerance after :data:`MAX_ITER` iterations is not used: the caller draws
``f`` by the Cholesky factor instead (:func:`~ppl_bsvm.inference.mcmc.conditionals.draw_f`),
so no draw is ever inexact, and counts it (``cg_fallback``).

**Rank and path.** :func:`pcg_rank` keeps the eigenvalues above ``c + tau``, ``tau = 1e-4 /
gamma^2`` (a ten-thousandth of the noise ``lam / gamma`` of a point on the margin, where
``lam ~ Gamma(1/2, rate gamma/2)``), rounds ``r`` up to a multiple of 16 (so that data sets of
similar spectra share compiled programs), and chooses this path only when its flop count,
``n r^2 + r^3/3`` plus :data:`ITER_GUESS` iterations of ``n^2 + 4 n r``, is below the Cholesky
factor's ``n^3 / 3``: at small ``n`` or for a rough kernel (``r`` near ``n``) the sweep keeps
the Cholesky factor. On the Banana benchmark this gives ``r = 32`` at ``n = 300`` (3
iterations per sweep) and ``r = 48`` at ``n = 1000`` (2); ranks from 16 to 64 cost within 40%
of each other there (larger ranks take fewer iterations, each dearer to set up).
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve

__all__ = ["Preconditioner", "preconditioner", "pcg_rank", "solve", "TOL", "MAX_ITER"]

TOL = 2.0**-50
"""Largest normwise backward error of an accepted solve (about 8.9e-16: four units of
roundoff)."""

MAX_ITER = 64
"""Most conjugate-gradient iterations of one solve; beyond it the Cholesky draw is used."""

TAIL_TOL = 1e-4
"""``tau * gamma^2``: eigenvalues within ``tau`` of the smallest are flattened (module doc)."""

ITER_GUESS = 6
"""Iterations the cost rule of :func:`pcg_rank` assumes (2 to 4 measured, 8 with badly
conditioned noise). With it the rule takes this path from ``n`` of about 90 on the Banana
kernel, where the sweep measures as fast either way near ``n = 65`` and 1.7x faster by
conjugate gradients at ``n = 120``."""

RANK_STEP = 16
"""The preconditioner's rank is rounded up to a multiple of this."""


class Preconditioner(NamedTuple):
    """What the solves of a GP sweep share, computed once from ``K = U diag(d) U^T``.

    Attributes
    ----------
    W : (n, r)
        ``U_r diag(d_r - c)^{1/2}``: the top ``r`` eigenvectors scaled by the square root of
        their eigenvalue above the floor.
    c : ()
        The floor: ``K``'s smallest eigenvalue (at least ``1e-13`` times its largest).
    norm : ()
        ``K``'s largest eigenvalue, ``||K||_2``.
    """

    W: jnp.ndarray
    c: jnp.ndarray
    norm: jnp.ndarray


def _tail_floor(d):
    """``c``: the smallest eigenvalue, kept above rounding level of the largest."""
    return max(float(d[0]), 1e-13 * float(d[-1]))


def pcg_rank(eigenvalues, gamma: float = 1.0) -> int:
    """Rank of the preconditioner for a kernel matrix with these eigenvalues, or 0 when the
    Cholesky factor is cheaper (module doc).

    Parameters
    ----------
    eigenvalues : array of shape (n,)
        Of ``K`` (the jittered prior covariance).
    gamma : float
        The pseudo-likelihood temperature (the noise ``lam / gamma`` scales with ``1/gamma^2``
        on the margin).
    """
    d = np.sort(np.asarray(eigenvalues, dtype=float))
    n = d.shape[0]
    c = _tail_floor(d)
    r = int(np.sum(d > c + TAIL_TOL / gamma**2))
    r = min(n, RANK_STEP * max(1, -(-r // RANK_STEP)))
    pcg_flops = n * r**2 + r**3 / 3 + ITER_GUESS * (n**2 + 4 * n * r)
    return r if pcg_flops < n**3 / 3 else 0


def preconditioner(K, gamma: float = 1.0, rank: int | None = None) -> Preconditioner | None:
    """The :class:`Preconditioner` of ``K`` (concrete, ``(n, n)``), or None when
    :func:`pcg_rank` prefers the Cholesky factor. One eigendecomposition of ``K``, by JAX on
    the device that holds the data (on a GPU the host's LAPACK would be the sampler's slowest
    step; on the CPU it is the same LAPACK); only the eigenvalues come back to choose the
    rank. ``rank`` overrides the rule (the tests' way to put a small problem on this path)."""
    K = jnp.asarray(K, dtype=jnp.float64)
    d_dev, U = _eigh(K)
    d = np.asarray(d_dev)
    r = pcg_rank(d, gamma) if rank is None else int(rank)
    if r == 0:
        return None
    c = _tail_floor(d)
    return Preconditioner(_scaled_top(U, d_dev, r, c), jnp.asarray(c), jnp.asarray(d[-1]))


@jax.jit
def _eigh(K):
    return jnp.linalg.eigh(K, symmetrize_input=False)


@partial(jax.jit, static_argnums=2)
def _scaled_top(U, d, r: int, c):
    """``W = U_r diag(d_r - c)^{1/2}`` over the top ``r`` eigenpairs."""
    return U[:, -r:] * jnp.sqrt(jnp.maximum(d[-r:] - c, 0.0))


class Solve(NamedTuple):
    """Outcome of :func:`solve`: ``x``, ``K x`` (computed directly, not by recurrence), the
    iterations used and whether the backward error reached :data:`TOL`."""

    x: jnp.ndarray
    Kx: jnp.ndarray
    iters: jnp.ndarray
    ok: jnp.ndarray


def solve(pre: Preconditioner, K, noise, b, tol: float = TOL, max_iter: int = MAX_ITER) -> Solve:
    r"""``(K + diag(noise))^{-1} b`` by conjugate gradients preconditioned with ``P`` (module
    doc), until the normwise backward error is at most ``tol``.

    Parameters
    ----------
    pre : Preconditioner
    K : (n, n)
    noise : (n,), > 0
    b : (n,)
    tol : float
    max_iter : int

    Returns
    -------
    Solve
        ``ok`` is false if the iteration stopped at ``max_iter``; the caller must then not use
        ``x``.

    Notes
    -----
    The recurrence's residual stops the loop once it is below ``tol / 4`` in backward-error
    terms; the true residual ``b - K x - noise * x`` is then computed once (with the product
    ``K x`` the draw needs anyway) and decides ``ok``. Under ``vmap`` the loop runs until
    every chain has stopped, and finished chains are frozen by the batching rule of
    ``while_loop``.
    """
    g = 1.0 / (noise + pre.c)
    GW = g[:, None] * pre.W
    M = jnp.eye(pre.W.shape[1], dtype=K.dtype) + pre.W.T @ GW
    L = jax.lax.linalg.cholesky(M, symmetrize_input=False)

    def apply_pinv(v):
        return g * v - GW @ cho_solve((L, True), GW.T @ v)

    norm_A = jnp.maximum(pre.norm, jnp.max(noise))  # a lower bound of ||K + N||_2
    norm_b = jnp.linalg.norm(b)

    def small(r, x, factor):
        return jnp.linalg.norm(r) <= factor * tol * (norm_A * jnp.linalg.norm(x) + norm_b)

    def cond(carry):
        x, r, _, _, _, k = carry
        return ~small(r, x, 0.25) & (k < max_iter)

    def body(carry):
        x, r, p, z, rz, k = carry
        Ap = K @ p + noise * p
        alpha = rz / (p @ Ap)
        x = x + alpha * p
        r = r - alpha * Ap
        z = apply_pinv(r)
        rz_new = r @ z
        p = z + (rz_new / rz) * p
        return x, r, p, z, rz_new, k + 1

    z0 = apply_pinv(b)
    init = (jnp.zeros_like(b), b, z0, z0, b @ z0, jnp.zeros((), jnp.int32))
    x, _, _, _, _, k = jax.lax.while_loop(cond, body, init)
    Kx = K @ x
    ok = small(b - Kx - noise * x, x, 1.0)
    return Solve(x, Kx, k, ok)
