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

**Spectrum.** Up to :data:`EXACT_MAX` points the eigenpairs come from one eigendecomposition
of ``K`` (``c = d_1``). Beyond, an eigendecomposition (about ``9 n^3`` flops: 90 s at
``n = 10^4`` on 2 cores) would cost more than the sampling, and only the top
:data:`RANK_MAX` pairs are needed: a randomized range finder with one power iteration
(Halko, Martinsson & Tropp 2011, algorithm 4.4 with ``q = 1``, then the Rayleigh-Ritz step
of their algorithm 5.3) finds them from ``s = RANK_MAX +`` :data:`OVERSAMPLE` products with
``K``, in ``6 n^2 s`` flops (2.2 s at ``n = 5000``, against 11 s for the eigendecomposition).
Its Ritz values ``theta_j <= d_j`` stand for the top of the spectrum, and the floor is the
jitter, ``c = jitter * mean(diag K) / (1 + jitter) <= d_1``. On the ``susy`` generator at
``n = 5000`` (``d = 18``, RBF at the median heuristic) the iterations per solve are those of
the exact eigenpairs (23, 13 and 8-9 at ranks 128, 256 and 512). Which eigenpairs the
preconditioner holds changes how many iterations a solve takes, never its answer.

**Rank and path.** :func:`pcg_rank` chooses the rank ``r`` (a multiple of :data:`RANK_STEP`,
so that data sets of similar spectra share compiled programs, at most :data:`RANK_MAX`) that
minimises the predicted flops of a solve per chain, ``n r^2 + r^3 / 3`` to set up the
preconditioner and :func:`predicted_iterations` of ``n^2 + 4 n r``, and keeps the Cholesky
factor (rank 0) when its ``n^3 / 3`` is cheaper, and below :data:`MIN_N` points. The
iterations grow with the flattened tail against the smallest noises (``lam / gamma``, of
order ``1 / gamma^2`` on the margin): ``4 + 30 gamma sqrt(d_{r+1} - c)`` fits the measured
counts on ``susy`` at ``n = 2000`` (53, 32, 18, 11, 7 at ranks 32 to 512, the fit 53, 35,
19, 11, 7) and 5000 (23, 13, 8 at 128 to 512; fit 27, 16, 9) and is a little pessimistic on
Banana (2 to 4 measured at ``n = 300`` and 1000). On ``susy`` at the median-heuristic
lengthscale the rule picks ``r = 128``, 192 and 256 at ``n = 2000``, 5000 and ``10^4``; the
old rule, which kept every eigenvalue more than ``1e-4 / gamma^2`` above the floor, took the
Cholesky path at 2000 (386 ms per sweep of 4 chains) and rank 2448 at 5000.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import cho_solve

from . import packed

__all__ = ["Preconditioner", "Spectrum", "preconditioner", "spectrum", "from_spectrum",
           "weak_share",
           "pcg_rank", "chosen_rank", "predicted_iterations", "spectrum_iterations",
           "solve_flops", "solve", "TOL", "MAX_ITER"]

TOL = 2.0**-50
"""Largest normwise backward error of an accepted solve (about 8.9e-16: four units of
roundoff)."""

MAX_ITER = 64
"""Most conjugate-gradient iterations of one solve; beyond it the Cholesky draw is used."""

RANK_STEP = 16
"""The preconditioner's rank is a multiple of this."""

RANK_MAX = 512
"""Largest rank :func:`pcg_rank` considers: beyond, the set-up's ``n r^2`` per chain and sweep
outgrows what fewer iterations save (at ``n = 10^4``, 512 already costs as much as 256)."""

EXACT_MAX = 2048
"""Up to this many points the spectrum comes from a full eigendecomposition of ``K`` (0.7 s at
``n = 2000``); beyond, from the randomized range finder (module doc)."""

OVERSAMPLE = 64
"""Columns the range finder draws beyond :data:`RANK_MAX`."""

MIN_N = 65
"""Below this many points the Cholesky path whatever the spectrum: the sweep measured as fast
either way near ``n = 65`` on Banana (the loop's overhead against an ``n^3 / 3`` factor)."""

ITER_BASE, ITER_SLOPE = 4.0, 30.0
""":func:`predicted_iterations`: ``ITER_BASE + ITER_SLOPE gamma sqrt(tail)`` (module doc)."""


def predicted_iterations(tail, gamma: float = 1.0):
    """Conjugate-gradient iterations a solve is expected to take when the preconditioner
    flattens ``K``'s spectrum beyond a top eigenvalue ``tail`` above the floor (module doc:
    fitted to measured counts; it chooses the rank, and exactness never depends on it)."""
    return ITER_BASE + ITER_SLOPE * gamma * np.sqrt(np.maximum(tail, 0.0))


def solve_flops(n: int, rank: int, iterations: float) -> float:
    """Flops of one chain's solve: the Cholesky factor (``rank`` 0), or the preconditioner's
    set-up and ``iterations`` of conjugate gradients."""
    if rank <= 0:
        return n**3 / 3.0
    return n * rank**2 + rank**3 / 3.0 + iterations * (n**2 + 4.0 * n * rank)


class Preconditioner(NamedTuple):
    """What the solves of a GP sweep share, computed once from ``K``'s top eigenpairs
    ``U_r diag(d_r) U_r^T`` (module doc).

    Attributes
    ----------
    W : (n, r)
        ``U_r diag(d_r - c)^{1/2}``: the top ``r`` eigenvectors scaled by the square root of
        their eigenvalue above the floor.
    c : ()
        The floor: ``K``'s smallest eigenvalue, or a lower bound of it (the jitter) when only
        the top of the spectrum was computed; at least ``1e-13`` times the largest.
    norm : ()
        ``K``'s largest eigenvalue, ``||K||_2`` (a lower bound of it from the range finder).
    """

    W: jnp.ndarray
    c: jnp.ndarray
    norm: jnp.ndarray


class Spectrum(NamedTuple):
    """The top of ``K``'s spectrum: ascending eigenvalues ``d`` (all ``n``, or the ``s``
    largest Ritz values), their eigenvectors ``U`` (on the device), the floor ``c`` and
    ``K``'s trace."""

    d: np.ndarray
    U: jnp.ndarray
    c: float
    trace: float


def weak_share(spec: Spectrum, gamma: float = 1.0) -> float:
    """The share of ``K``'s trace in eigenvalues at most ``1 / gamma``: the prior's variance in
    directions where the data's noise ``lam / gamma`` (``lam`` of order 1) is no smaller than
    it, so that ``f``'s conditional given ``lam`` is about as wide as its posterior there
    (``gibbs_kernel.default_overrelax``). From the range finder's Ritz values (lower bounds
    of the top eigenvalues, and only ``s`` of them) it is an upper bound."""
    d = np.asarray(spec.d, dtype=float)
    strong = float(np.sum(d[d > 1.0 / float(gamma)]))
    return float(min(max(1.0 - strong / spec.trace, 0.0), 1.0))


def _tail_floor(d):
    """``c``: the smallest eigenvalue, kept above rounding level of the largest."""
    return max(float(d[0]), 1e-13 * float(d[-1]))


def pcg_rank(eigenvalues, gamma: float = 1.0, n: int | None = None,
             floor: float | None = None) -> int:
    """Rank of the preconditioner that minimises the predicted flops of a solve, or 0 when the
    Cholesky factor is cheaper (module doc).

    Parameters
    ----------
    eigenvalues : array of shape (n,) or (s,)
        Of ``K`` (the jittered prior covariance): all of them, or its ``s`` largest.
    gamma : float
        The pseudo-likelihood temperature (the noise ``lam / gamma`` scales with ``1/gamma^2``
        on the margin).
    n : int, optional
        ``K``'s order when ``eigenvalues`` are only its largest.
    floor : float, optional
        The floor ``c``; by default the smallest eigenvalue given (module doc).
    """
    d = np.sort(np.asarray(eigenvalues, dtype=float))
    n = d.shape[0] if n is None else int(n)
    if n < MIN_N:
        return 0
    c = _tail_floor(d) if floor is None else max(float(floor), 1e-13 * float(d[-1]))
    best_rank, best = 0, solve_flops(n, 0, 0.0)
    for r in range(RANK_STEP, min(RANK_MAX, n - 1, d.shape[0] - 1) + 1, RANK_STEP):
        cost = solve_flops(n, r, float(predicted_iterations(d[-r - 1] - c, gamma)))
        if cost < best:
            best_rank, best = r, cost
    return best_rank


def spectrum(K, jitter: float = 0.0, key=None) -> Spectrum:
    """:class:`Spectrum` of ``K`` (concrete, ``(n, n)``): every eigenpair up to
    :data:`EXACT_MAX` points, beyond them the ``RANK_MAX + OVERSAMPLE`` largest by the
    randomized range finder (module doc), with the floor from the relative ``jitter`` that
    :func:`~ppl_bsvm.kernels.gram` added. By JAX on the device that holds the data (on a GPU
    the host's LAPACK would be the sampler's slowest step); only the eigenvalues come back."""
    K = jnp.asarray(K, dtype=jnp.float64)
    n = K.shape[0]
    if n <= EXACT_MAX:
        d_dev, U = _eigh(K)
        d = np.asarray(d_dev)
        return Spectrum(d, U, _tail_floor(d), float(np.sum(d)))
    key = jax.random.key(0) if key is None else key
    theta, U = _range_finder(K, key, RANK_MAX + OVERSAMPLE)
    d = np.asarray(theta)
    mean_diag = float(jnp.mean(jnp.diagonal(K)))
    floor = float(jitter) / (1.0 + float(jitter)) * mean_diag
    return Spectrum(d, U, max(floor, 1e-13 * float(d[-1])), n * mean_diag)


def preconditioner(K, gamma: float = 1.0, rank: int | None = None,
                   jitter: float = 0.0) -> Preconditioner | None:
    """The :class:`Preconditioner` of ``K`` (concrete, ``(n, n)``, with relative ``jitter`` on
    its diagonal), or None when :func:`pcg_rank` prefers the Cholesky factor. ``rank``
    overrides the rule (the tests' way to put a small problem on this path)."""
    spec = spectrum(K, jitter)
    return from_spectrum(spec, chosen_rank(spec, gamma) if rank is None else int(rank))


def chosen_rank(spec: Spectrum, gamma: float = 1.0) -> int:
    """:func:`pcg_rank` of a :class:`Spectrum`."""
    return pcg_rank(spec.d, gamma, spec.U.shape[0], spec.c)


def spectrum_iterations(spec: Spectrum, rank: int, gamma: float = 1.0) -> float:
    """:func:`predicted_iterations` of a solve preconditioned at ``rank`` (0: none, the
    Cholesky path)."""
    return float(predicted_iterations(spec.d[-rank - 1] - spec.c, gamma)) if rank else 0.0


def from_spectrum(spec: Spectrum, rank: int) -> Preconditioner | None:
    """The rank-``rank`` :class:`Preconditioner` of a :class:`Spectrum` (None at rank 0)."""
    if rank == 0:
        return None
    d_top = jnp.asarray(spec.d[-rank:])
    return Preconditioner(_scaled_top(spec.U, d_top, rank, spec.c), jnp.asarray(spec.c),
                          jnp.asarray(spec.d[-1]))


@jax.jit
def _eigh(K):
    return jnp.linalg.eigh(K, symmetrize_input=False)


@partial(jax.jit, static_argnums=2)
def _range_finder(K, key, s: int):
    r"""The ``s`` largest Ritz pairs of ``K`` from a range finder with one power iteration:
    ``Q = orth(K orth(K Omega))``, ``Omega`` Gaussian ``(n, s)``, then ``Q^T K Q = V diag(theta)
    V^T`` and the pairs ``(theta, Q V)`` (Halko et al. 2011, algorithms 4.4 and 5.3)."""
    omega = jax.random.normal(key, (K.shape[0], s), K.dtype)
    Q, _ = jnp.linalg.qr(K @ omega)
    Q, _ = jnp.linalg.qr(K @ Q)
    B = Q.T @ (K @ Q)
    theta, V = jnp.linalg.eigh(0.5 * (B + B.T))
    return theta, Q @ V


@partial(jax.jit, static_argnums=2)
def _scaled_top(U, d_top, r: int, c):
    """``W = U_r diag(d_r - c)^{1/2}`` over the top ``r`` eigenpairs (``d_top`` their
    eigenvalues)."""
    return U[:, -r:] * jnp.sqrt(jnp.maximum(d_top - c, 0.0))


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
    K : (n, n) or packed.Packed
        Dense, or its lower blocks (:mod:`~ppl_bsvm.inference.mcmc.packed`: the products
        read half the bytes).
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
    # W^T G W as A^T A, A = G^{1/2} W: XLA's CPU backend forms the product of a matrix with
    # itself in about three quarters of the time of W^T (G W) (69 against 92 ms for 4 chains
    # at n = 10^4, r = 208), the largest of a sweep's costs after the products with K
    A = jnp.sqrt(g)[:, None] * pre.W
    M = jnp.eye(pre.W.shape[1], dtype=K.dtype) + A.T @ A
    L = jax.lax.linalg.cholesky(M, symmetrize_input=False)

    def apply_pinv(v):
        # G W (M^-1 (G W)^T v) with W, not G W, in the products: with vectorised chains they
        # share W, so each iteration reads n r numbers once rather than once per chain
        gv = g * v
        return gv - g * (pre.W @ cho_solve((L, True), pre.W.T @ gv))

    norm_A = jnp.maximum(pre.norm, jnp.max(noise))  # a lower bound of ||K + N||_2
    norm_b = jnp.linalg.norm(b)

    def small(r, x, factor):
        return jnp.linalg.norm(r) <= factor * tol * (norm_A * jnp.linalg.norm(x) + norm_b)

    def cond(carry):
        x, r, _, _, _, k = carry
        return ~small(r, x, 0.25) & (k < max_iter)

    # p K rather than K p (K is symmetric): with vectorised chains XLA's CPU backend computes
    # the (chains, n) x (n, n) product in 38 ms at n = 10^4 and 4 chains, the (n, n) x
    # (n, chains) one in 49 ms (72.6 and 88.5 ms on the development machine of December 2026,
    # whose memory is slower: the product reads K's 800 MB, so 8 chains took 76 ms), and these
    # products are most of the sweep; a packed K reads half the bytes (38 ms a product at
    # n = 10^4 against 70 ms, module packed). The machine of 2 December 2026 measured the
    # opposite order: 67 ms for this form, 34 ms for K p and 53-63 ms packed (module packed)
    def body(carry):
        x, r, p, z, rz, k = carry
        Ap = packed.times(K, p) + noise * p
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
    Kx = packed.times(K, x)
    ok = small(b - Kx - noise * x, x, 1.0)
    return Solve(x, Kx, k, ok)
