r"""Latent marginals of S-BSVM's sparse GP under ``q(v)``, ``v = L^{-1} u`` (``sbsvm.py``).

For rows ``x_i`` with kernel columns ``k_i = K_{m i}`` and ``psi_i = L^{-1} k_i``
(``L L^T = K_mm``), ``q(v) = N(m_v, P^{-1})`` gives ``q(f_i) = N(psi_i^T m_v,
|P_L^{-1} psi_i|^2 + k_ii - |psi_i|^2)`` (spec section 5). This module computes them for a
batch (two forms, :func:`_psi_form` and :func:`_kernel_form`), for all training rows in one
compiled pass of chunks (the ELBO, the final marginals), for predictions (a registered
latent-predictive family) and as draws of ``f``; and ``q(u) = L q(v)`` at the end of a run.
Memory is ``O(chunk m)`` whatever the number of rows.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.linalg import solve_triangular

from ... import _programs
from ..._serial import latent_family
from ..._shapes import CHUNK, pad_rows, padded_size
from ..inducing import InducingPrior, project_whitened
from ..latent import Latent
from ..mvn import cov_factor, gaussian_from_precision, kl_precision
from . import elbo as elbo_mod


def _project(kernel, params, Z, chol_Kmm, Xb):
    return project_whitened(kernel, params, InducingPrior(Z, None, chol_Kmm), Xb)


def _chunks(n: int, chunk: int):
    """Number of chunks and the (static) chunk length for ``n`` rows."""
    size = min(chunk, n)
    return -(-n // size), size


def _chunk_start(i, size, N):
    """First row of chunk ``i`` of ``size`` rows out of ``N``: ``min(i size, N - size)`` (the
    last chunk overlaps its predecessor instead of being padded)."""
    return jnp.minimum(i * size, N - size)


def _chunk_rows(X, y, i, size, n):
    """Chunk ``i``: rows ``[start, start + size)`` from :func:`_chunk_start` and the mask of the
    rows it owns among the first ``n`` (the rest is padding or its predecessor's)."""
    start = _chunk_start(i, size, X.shape[0])
    Xc = jax.lax.dynamic_slice_in_dim(X, start, size)
    yc = jax.lax.dynamic_slice_in_dim(y, start, size)
    rows = start + jnp.arange(size)
    return Xc, yc, (rows >= i * size) & (rows < n)


def full_elbo(kernel, params, Z, chol_Kmm, eta1, prec, data, chunk: int = CHUNK):
    """Collapsed ELBO over all ``n`` points, accumulated chunk by chunk (``O(chunk m)`` memory)."""
    mean, chol_P = gaussian_from_precision(eta1, prec)
    n_chunks, size = _chunks(data.X.shape[0], chunk)

    def body(i, acc):
        Xc, yc, own = _chunk_rows(data.X, data.y, i, size, data.n)
        m, s = _batch_marginals(kernel, params, Z, chol_Kmm, mean, chol_P, Xc)
        terms = elbo_mod.collapsed_data_term(m, s, yc, data.gamma)
        return acc + jnp.sum(jnp.where(own, terms, 0.0))

    total = jax.lax.fori_loop(0, n_chunks, body, jnp.zeros((), mean.dtype))
    return total - kl_precision(mean, chol_P)


PASS_CHUNK = 16384
"""Rows per chunk of the final pass over the training data (``O(PASS_CHUNK m)`` memory)."""


class _TrainingMarginals(NamedTuple):
    """``q(f_i)``'s mean and variance, the optimal ``alpha_i`` (eq. 11) and the data term of
    the collapsed ELBO at every training row (padding rows included, to be trimmed)."""

    f_mean: jnp.ndarray
    f_var: jnp.ndarray
    alpha: jnp.ndarray
    terms: jnp.ndarray


def _no_marginals(rows: int, dtype) -> _TrainingMarginals:
    """Zeros for :func:`_put_marginals` to fill."""
    return _TrainingMarginals(*(jnp.zeros(rows, dtype) for _ in range(4)))


def _put_marginals(out: _TrainingMarginals, start, m, s, yc, gamma) -> _TrainingMarginals:
    """``out`` with the rows ``[start, start + len(m))`` set from their latent marginals."""
    part = (m, s, elbo_mod.optimal_alpha(m, s, yc), elbo_mod.collapsed_data_term(m, s, yc, gamma))
    return _TrainingMarginals(*(jax.lax.dynamic_update_slice_in_dim(o, p, start, 0)
                                for o, p in zip(out, part)))


@functools.partial(_programs.Program, static_argnames=("kernel",))
def _training_marginals(kernel, params, Z, chol_Kmm, mean, chol_P, data):
    """One compiled pass over the training rows in chunks of :data:`PASS_CHUNK` (the last
    overlapping its predecessor), instead of a Python loop of small chunks."""
    N = data.X.shape[0]
    n_chunks, size = _chunks(N, PASS_CHUNK)

    def body(i, out):
        Xc, yc, _ = _chunk_rows(data.X, data.y, i, size, data.n)
        m, s = _batch_marginals(kernel, params, Z, chol_Kmm, mean, chol_P, Xc)
        return _put_marginals(out, _chunk_start(i, size, N), m, s, yc, data.gamma)

    return jax.lax.fori_loop(0, n_chunks, body, _no_marginals(N, data.X.dtype))


GEMM_MIN_RATIO = 4
"""Rows per inducing point from which latent marginals are computed by matrix products with
explicit inverses instead of triangular solves (:func:`_psi_form`, :func:`_kernel_form`)."""


def _psi_form(kernel, params, Z, chol_Kmm, mean, chol_P, Xb):
    """``Psi_b^T = L^{-1} K_mb`` (m, b) and the latent marginals ``m_i = psi_i^T m_v``,
    ``s_i = |P_L^{-1} psi_i|^2 + ktilde_i`` (``ktilde_i = k_ii - |psi_i|^2``, clipped at 0)
    of the rows ``Xb`` under ``q(v) = N(m_v, P^{-1})``.

    With many more rows than inducing points (:func:`_uses_gemm`) the two triangular solves
    become products with the explicit inverses ``L^{-1}`` and ``P_L^{-1}`` (``m^3 / 3`` each,
    small against the ``b m^2`` products): matrix products run at several times the speed of
    triangular solves with many right-hand sides, and on every core (XLA's own threads) where
    the solves use one BLAS thread (``_runtime``). Fewer rows keep the solves, which are then
    cheaper than the inverses.
    """
    PsiT, ktilde = _projections(kernel, params, Z, chol_Kmm, Xb)
    m_f, s_f = _marginals_of(PsiT, ktilde, mean, chol_P)
    return PsiT, m_f, s_f


def _projections(kernel, params, Z, chol_Kmm, Xb):
    """``Psi_b^T = L^{-1} K_mb`` and ``ktilde_i = k_ii - |psi_i|^2`` (clipped at 0) of the
    rows ``Xb`` (:func:`_psi_form`)."""
    Kmb = kernel.K(params, Z, Xb)
    if _uses_gemm(Xb.shape[0], Z.shape[0]):
        eye = jnp.eye(Z.shape[0], dtype=Kmb.dtype)
        PsiT = solve_triangular(chol_Kmm, eye, lower=True) @ Kmb
    else:
        PsiT = solve_triangular(chol_Kmm, Kmb, lower=True)
    return PsiT, jnp.maximum(kernel.diag(params, Xb) - jnp.sum(PsiT**2, axis=0), 0.0)


def _marginals_of(PsiT, ktilde, mean, chol_P):
    """The latent marginals ``(m_i, s_i)`` of rows with projections ``Psi^T`` and
    ``ktilde`` (:func:`_projections`) under ``q(v) = N(mean, P^{-1})``, in the precision of
    ``Psi^T`` (``s_i`` in ``ktilde``'s): ``P_L^{-1} Psi^T`` as a product with the explicit
    inverse for many rows (:func:`_psi_form`)."""
    m, dtype = PsiT.shape[0], PsiT.dtype
    if _uses_gemm(PsiT.shape[1], m):  # one pass over Psi for the means and V
        inverse = solve_triangular(chol_P, jnp.eye(m, dtype=chol_P.dtype), lower=True)
        out = jnp.concatenate([inverse, mean[None]]).astype(dtype) @ PsiT
        V, m_f = out[:m], out[m]
    else:
        V = solve_triangular(chol_P.astype(dtype), PsiT, lower=True)
        m_f = PsiT.T @ mean.astype(dtype)
    return m_f.astype(ktilde.dtype), jnp.sum(V**2, axis=0).astype(ktilde.dtype) + ktilde


def _kernel_form(kernel, params, Z, chol_Kmm, mean, chol_P, Xb):
    r"""The latent marginals of :func:`_psi_form` in the basis of the kernel columns ``k_i``,
    with one ``m x m x b`` product instead of two:

    .. math:: m_i = k_i^\top L^{-\top} m_v, \qquad
              s_i = k_{ii} + k_i^\top B\, k_i, \quad
              B = C^\top C - L^{-\top} L^{-1}, \; C = P_L^{-1} L^{-1}

    (``|P_L^{-1} psi_i|^2 = k_i^T C^T C k_i``, ``|psi_i|^2 = k_i^T L^{-T} L^{-1} k_i``), clipped
    at 0 against round-off. For the passes that need only the marginals (the final pass over
    the training rows, predictions, the exact ELBO). The steps keep :func:`_psi_form`: their
    statistics need ``Psi`` itself, and sums formed in this basis and whitened afterwards
    carry round-off amplified by the conditioning of ``K_mm`` (two devices then disagreed with
    one at 1e-9 instead of below 1e-10).
    """
    m = Z.shape[0]
    Kmb = kernel.K(params, Z, Xb)
    eye = jnp.eye(m, dtype=Kmb.dtype)
    Linv = solve_triangular(chol_Kmm, eye, lower=True)
    C = solve_triangular(chol_P, Linv, lower=True)
    B = C.T @ C - Linv.T @ Linv
    s = kernel.diag(params, Xb) + jnp.sum(Kmb * (B @ Kmb), axis=0)
    return Kmb.T @ (Linv.T @ mean), jnp.maximum(s, 0.0)


def _uses_gemm(rows: int, m: int) -> bool:
    """Whether ``rows`` rows are many enough (``GEMM_MIN_RATIO`` per inducing point, ``m``)
    for products with explicit inverses to beat triangular solves."""
    return rows >= GEMM_MIN_RATIO * m


def _batch_marginals(kernel, params, Z, chol_Kmm, mean, chol_P, Xb):
    """Latent marginals ``(m, s)`` of the rows ``Xb`` under ``q(v)``: :func:`_kernel_form`
    for at least ``GEMM_MIN_RATIO m`` rows, else :func:`_psi_form`'s solves."""
    if _uses_gemm(Xb.shape[0], Z.shape[0]):
        return _kernel_form(kernel, params, Z, chol_Kmm, mean, chol_P, Xb)
    return _psi_form(kernel, params, Z, chol_Kmm, mean, chol_P, Xb)[1:]


class _Posterior(NamedTuple):
    """The fitted ``q`` and what predictions need (device arrays)."""

    params: dict
    Z: jnp.ndarray
    chol_Kmm: jnp.ndarray
    mean_v: jnp.ndarray
    chol_P: jnp.ndarray


@latent_family
@functools.partial(jax.jit, static_argnames=("kernel",))
def _latent_chunk(kernel, post: _Posterior, Xc):
    return _batch_marginals(kernel, post.params, post.Z, post.chol_Kmm, post.mean_v, post.chol_P,
                            Xc)


@functools.partial(jax.jit, static_argnames=("kernel",))
def _f_draws_chunk(kernel, post: _Posterior, Xc, v_draws, key):
    proj = _project(kernel, post.params, post.Z, post.chol_Kmm, Xc)
    eps = jax.random.normal(key, (v_draws.shape[0], Xc.shape[0]), dtype=Xc.dtype)
    return v_draws @ proj.kappa.T + jnp.sqrt(proj.ktilde) * eps


class _FinalQ(NamedTuple):
    """``q(v)`` at the end of a run, ``q(u) = L q(v)`` and draws of both."""

    mean_v: jnp.ndarray  # (m,)
    chol_P: jnp.ndarray  # (m, m) Cholesky factor of q(v)'s precision P
    kl: jnp.ndarray  # () KL(q(v) || N(0, I))
    u_mean: jnp.ndarray  # (m,) L m_v
    u_cov: jnp.ndarray  # (m, m)
    v_draws: jnp.ndarray  # (num_draws, m)
    u_draws: jnp.ndarray  # (num_draws, m)


@functools.partial(_programs.Program, static_argnames=("num_draws",))
def _final_q(st, key, num_draws: int) -> _FinalQ:
    """q(u) = L q(v): ``u_mean = L m_v``, ``u_cov = (L P_L^{-T})(L P_L^{-T})^T``, ``P = P_L P_L^T``."""
    mean_v, chol_P = gaussian_from_precision(st.eta1, st.prec)
    m = mean_v.shape[0]
    cov_factor_v = cov_factor(chol_P)
    cov_factor_u = st.chol_Kmm @ cov_factor_v
    v_draws = mean_v + jax.random.normal(key, (num_draws, m), dtype=mean_v.dtype) @ cov_factor_v.T
    return _FinalQ(mean_v, chol_P, kl_precision(mean_v, chol_P), st.chol_Kmm @ mean_v,
                   cov_factor_u @ cov_factor_u.T, v_draws, v_draws @ st.chol_Kmm.T)


def _f_draws(kernel, post: _Posterior, X, v_draws, key) -> np.ndarray:
    """Draws ``(S, n)`` of ``f`` at the rows of ``X``: ``psi_i v_s + sqrt(ktilde_i) e``, by
    chunks of ``CHUNK`` rows padded like the predictions' (``_shapes.padded_size``)."""
    n = X.shape[0]
    keys = jax.random.split(key, -(-n // CHUNK))
    parts = []
    for i, start in enumerate(range(0, n, CHUNK)):
        rows = min(CHUNK, n - start)
        chunk = pad_rows(np.asarray(X[start:start + rows]), padded_size(rows))
        parts.append(np.asarray(_f_draws_chunk(kernel, post, chunk, v_draws, keys[i]))[:, :rows])
    return np.concatenate(parts, axis=1)


def latent(kernel, post: _Posterior, X):
    """Latent predictive mean and variance at the rows of ``X`` (spec section 5), by chunks:

    ``q(f*) = N(kappa_* mu, K_** - kappa_* K_m* + kappa_* zeta kappa_*^T)``, i.e. in whitened
    form ``N(psi_* m_v, K_** - psi_*^T psi_* + psi_*^T S psi_*)``.
    """
    return Latent(_latent_chunk, kernel, post)(X)
