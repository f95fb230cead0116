r"""Inducing-point machinery shared by S-BSVM (Wenzel et al. 2017, section 4.2) and SVGP.

The sparse GP: inducing values ``u = f(Z)`` at ``m`` locations ``Z``, ``u ~ N(0, Kmm)``,
``p(f | u) = N(kappa u, Ktilde)`` with

.. math:: \kappa = K_{nm} K_{mm}^{-1}, \qquad \tilde K_{ii} = K_{ii} - \kappa_i K_{mn,i},

and a Gaussian ``q(u) = N(mu, Sigma)``, in natural parameters ``eta1 = Sigma^{-1} mu``,
``eta2 = -Sigma^{-1} / 2`` (``specs/bsvm_inference.md`` section 4). Under q the latent values
have marginals ``m_i = kappa_i mu`` and ``s_i = kappa_i Sigma kappa_i^T + Ktilde_ii``; nothing
here forms an ``n x n`` matrix, so memory is ``O(b m + m^2)`` for a batch of ``b`` rows.

Inducing locations: k-means with k-means++ seeding (default, :func:`kmeans`), a random subset of
the inputs, or given by the user (and optionally optimised with the hyperparameters by the
engines).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

from .. import _programs
from .._jax import key_from_seed, to_device
from .._checks import one_of, positive_int
from .._shapes import bucket_size, pad_rows
from ..data import check_X
from ..kernels import DEFAULT_JITTER, Kernel
from . import mvn

__all__ = [
    "INDUCING_METHODS",
    "INDUCING_KMEANS_TOL",
    "choose_inducing",
    "kmeans",
    "InducingPrior",
    "inducing_prior",
    "Projection",
    "project",
    "project_whitened",
    "marginals",
    "kl_to_prior",
]

INDUCING_METHODS = ("kmeans", "random")


KMEANS_MAX_POINTS = 20_000
"""k-means runs on a random subsample of at most ``max(KMEANS_MAX_POINTS, 100 m)`` rows."""


def choose_inducing(X, num_inducing: int, method: str = "kmeans", seed: int = 0,
                    max_points: int | None = None):
    """Inducing locations ``Z (m, d)`` from the training inputs.

    Parameters
    ----------
    X : ndarray (n, d)
    num_inducing : int
        ``m``; at most the number of distinct rows of ``X``.
    method : {"kmeans", "random"}
        ``"kmeans"``: the centres of :func:`kmeans` (greedy k-means++ seeding, then Lloyd's
        iterations until the potential falls by less than :data:`INDUCING_KMEANS_TOL` in
        one), fitted on at most ``max_points`` rows drawn without replacement;
        ``"random"``: ``m`` distinct rows of ``X``.
    seed : int
    max_points : int, optional
        Default ``max(KMEANS_MAX_POINTS, 100 m)``: at least a hundred rows per centre, and
        k-means on 5 x 10^6 rows costs well under a second instead of minutes. For m = 64 on
        10^6 standardised rows of the ``susy`` generator (2 cores, loaded): 1.9 s on a
        subsample of 50,000, 0.7 s on 20,000, 0.34 s on 10,000, with k-means potentials (mean
        squared distance to the nearest centre on 10^5 rows) of 6.81, 6.87 and 6.93; 200,000
        rows took 4.9 s.
    """
    X = check_X(X)
    m = positive_int("num_inducing", num_inducing)
    one_of("inducing", method, INDUCING_METHODS)
    n = X.shape[0]
    if m > n:
        raise ValueError(f"num_inducing={m} exceeds the number of training points n={n}")
    rng = np.random.default_rng(seed)
    if method == "random":
        return X[np.sort(rng.choice(n, m, replace=False))].copy()
    max_points = max(KMEANS_MAX_POINTS, 100 * m) if max_points is None else max_points
    sample = X if n <= max_points else X[rng.choice(n, max_points, replace=False)]
    if m == sample.shape[0]:
        return sample.copy()
    return kmeans(sample, m, seed, tol=INDUCING_KMEANS_TOL)


KMEANS_MAX_ITER = 100
"""Lloyd iterations of :func:`kmeans` at most (it stops earlier once no point changes cluster)."""

INDUCING_KMEANS_TOL = 1e-3
"""Relative decrease of the k-means potential below which :func:`choose_inducing` stops
Lloyd's iterations.

Inducing locations need a good cover of the inputs, not the exact local optimum: on 10^4 and
2 x 10^4 standardised rows of the ``susy`` generator (m = 64) the potential of held-out rows
stopped improving after 3-5 iterations, while the training potential kept falling by
0.1-0.3 % per iteration for dozens more (100 iterations to convergence). With this tolerance
k-means took 0.09 s instead of 0.31 s on 10^4 rows and 0.44 s instead of 2.7 s on 2 x 10^4
(one run, 2 cores under load 9), and S-BSVM's test errors on 10^4 and 10^5 points stayed
within their standard error (0.1985 against 0.1975, 0.1948 against 0.1940; 50,000 test
points, standard error 0.0018)."""


def kmeans(X, m: int, seed: int = 0, max_iter: int = KMEANS_MAX_ITER,
           tol: float = 0.0) -> np.ndarray:
    r"""k-means: greedy k-means++ seeding, then Lloyd's iterations; the centres ``(m, d)``.

    Seeding (Arthur & Vassilvitskii 2007, with the greedy refinement scikit-learn uses): the
    first centre is a uniformly drawn point; each next one is the best, by the resulting
    potential :math:`\sum_i \min_j |x_i - c_j|^2`, of ``2 + floor(log m)`` candidates drawn with
    probability proportional to the current squared distance. Lloyd's iterations then alternate
    the assignment to the nearest centre (distances by one matrix product) and the means, until
    no point changes cluster, the potential falls by at most ``tol`` times itself in one
    iteration, or ``max_iter``; an emptied cluster keeps its centre.

    One compiled program per ``m`` and padded shape: the rows are padded to
    ``_shapes.bucket_size`` with weight 0, so data sets of nearby sizes share it, and it
    replaces scikit-learn's ``KMeans`` here only to spare a fit the import of scikit-learn and
    SciPy's statistics (1.5 s of a new process).

    Parameters
    ----------
    X : ndarray (n, d)
    m : int
        Number of centres (``<= n``).
    seed : int
    max_iter : int, default=KMEANS_MAX_ITER
    tol : float, default=0.0
        Relative decrease of the potential below which the iterations stop; 0 runs them to
        the fixed point (every centre the mean of its points).
    """
    X = np.asarray(X, dtype=np.float64)
    # k-means moves with its data: centred, an offset shared by the inputs (X + 1e8) cannot
    # swamp the distances' expansion in _sq_distances
    offset = X.mean(0)
    n = X.shape[0]
    rows = bucket_size(n)
    weight = np.zeros(rows)
    weight[:n] = 1.0
    with jax.enable_x64(True):
        key = key_from_seed(int(seed))
        centres = _kmeans(key, to_device(pad_rows(X - offset, rows)), to_device(weight), m,
                          2 + int(np.log(m)), to_device(max_iter, np.int64),
                          to_device(tol, np.float64))
        return np.asarray(centres, dtype=np.float64) + offset


def _sq_distances(X, C):
    """``|x_i - c_j|^2`` for the rows of ``X (n, d)`` and ``C (k, d)``, clipped at 0."""
    return jnp.maximum(
        jnp.sum(X**2, axis=1)[:, None] - 2.0 * X @ C.T + jnp.sum(C**2, axis=1)[None, :], 0.0
    )


@functools.partial(_programs.Program, static_argnums=(3, 4))
def _kmeans(key, X, weight, m: int, trials: int, max_iter, tol):
    n, d = X.shape
    k_first, k_rest = jax.random.split(key)
    first = jax.random.choice(k_first, n, p=weight / jnp.sum(weight))
    centres = jnp.zeros((m, d), X.dtype).at[0].set(X[first])
    closest = _sq_distances(X, X[first][None])[:, 0] * weight

    def seed_one(j, carry):
        centres, closest = carry
        p = closest / jnp.sum(closest)
        cand = jax.random.choice(jax.random.fold_in(k_rest, j), n, (trials,), p=p)
        d2 = jnp.minimum(closest[:, None], _sq_distances(X, X[cand]) * weight[:, None])
        best = jnp.argmin(jnp.sum(d2, axis=0))
        return centres.at[j].set(X[cand[best]]), d2[:, best]

    centres, _ = jax.lax.fori_loop(1, m, seed_one, (centres, closest))

    def assign(centres):
        d2 = _sq_distances(X, centres)
        labels = jnp.argmin(d2, axis=1)
        return labels, jnp.sum(jnp.take_along_axis(d2, labels[:, None], axis=1)[:, 0] * weight)

    def lloyd(carry):
        it, centres, labels, potential, _ = carry
        counts = jax.ops.segment_sum(weight, labels, num_segments=m)
        sums = jax.ops.segment_sum(X * weight[:, None], labels, num_segments=m)
        centres = jnp.where(counts[:, None] > 0, sums / jnp.maximum(counts, 1.0)[:, None], centres)
        new, new_potential = assign(centres)
        moving = jnp.any((new != labels) & (weight > 0)) & (
            potential - new_potential > tol * potential)
        return it + 1, centres, new, new_potential, moving

    labels, potential = assign(centres)
    carry = (jnp.zeros((), jnp.int32), centres, labels, potential, jnp.asarray(True))
    _, centres, _, _, _ = jax.lax.while_loop(lambda c: (c[0] < max_iter) & c[4], lloyd, carry)
    return centres


class InducingPrior(NamedTuple):
    """``p(u) = N(0, Kmm)`` with ``Kmm`` jittered and factorised.

    Attributes
    ----------
    Z : (m, d)
    Kmm : (m, m)
    chol : (m, m)
        Lower Cholesky factor of ``Kmm``.
    """

    Z: jnp.ndarray
    Kmm: jnp.ndarray
    chol: jnp.ndarray


# jitted: also called outside the engines' compiled steps, where each operation would
# compile alone
@functools.partial(jax.jit, static_argnums=0)
def inducing_prior(kernel: Kernel, params, Z, jitter: float = DEFAULT_JITTER) -> InducingPrior:
    """``Kmm + jitter * mean(diag Kmm) I`` and its Cholesky factor (jittable)."""
    Kmm = kernel.K(params, Z, Z)
    Kmm = Kmm + jitter * jnp.mean(jnp.diag(Kmm)) * jnp.eye(Z.shape[0], dtype=Kmm.dtype)
    return InducingPrior(Z, Kmm, jnp.linalg.cholesky(Kmm))


class Projection(NamedTuple):
    """The conditional ``p(f_b | u) = N(kappa u, diag(ktilde))`` for a batch of rows.

    Attributes
    ----------
    kappa : (b, m)
        ``K_bm Kmm^{-1}``.
    ktilde : (b,)
        ``K_ii - kappa_i K_mi`` (>= 0).
    """

    kappa: jnp.ndarray
    ktilde: jnp.ndarray


@functools.partial(jax.jit, static_argnums=0)
def project(kernel: Kernel, params, prior: InducingPrior, Xb) -> Projection:
    """``kappa`` and ``ktilde`` for the rows ``Xb`` (two triangular solves, no inverse)."""
    Kmb = kernel.K(params, prior.Z, Xb)
    A = solve_triangular(prior.chol, Kmb, lower=True)  # L^{-1} K_mb
    kappa = solve_triangular(prior.chol.T, A, lower=False).T  # K_bm Kmm^{-1}
    ktilde = jnp.maximum(kernel.diag(params, Xb) - jnp.sum(A**2, axis=0), 0.0)
    return Projection(kappa, ktilde)


def project_whitened(kernel: Kernel, params, prior: InducingPrior, Xb) -> Projection:
    r"""The projection in whitened coordinates ``v = L^{-1} u`` (``L L^T = Kmm``, ``v ~ N(0, I)``).

    ``p(f_b | v) = N(Psi v, diag(ktilde))`` with ``Psi = K_bm L^{-T}`` (returned in the
    ``kappa`` field; ``kappa = Psi L^{-1}``). One triangular solve; no ``Kmm^{-1}``, whose
    condition number is the square of ``L``'s. Reads only ``prior.Z`` and ``prior.chol``.
    """
    Kmb = kernel.K(params, prior.Z, Xb)
    A = solve_triangular(prior.chol, Kmb, lower=True)  # L^{-1} K_mb
    ktilde = jnp.maximum(kernel.diag(params, Xb) - jnp.sum(A**2, axis=0), 0.0)
    return Projection(A.T, ktilde)


def marginals(proj: Projection, mu, Sigma):
    """Mean ``kappa mu`` and variance ``kappa Sigma kappa^T + ktilde`` of ``f`` under q."""
    mean = proj.kappa @ mu
    var = jnp.sum((proj.kappa @ Sigma) * proj.kappa, axis=1) + proj.ktilde
    return mean, var


def kl_to_prior(mu, Sigma, prior: InducingPrior):
    r"""``KL(N(mu, Sigma) || N(0, Kmm))`` (``mvn.kl`` with the prior's Cholesky factor).

    .. math:: \tfrac12 \left[\mathrm{tr}(K_{mm}^{-1}\Sigma) + \mu^\top K_{mm}^{-1}\mu - m
              + \log|K_{mm}| - \log|\Sigma|\right]
    """
    return mvn.kl(mu, jnp.linalg.cholesky(Sigma), chol1=prior.chol)
