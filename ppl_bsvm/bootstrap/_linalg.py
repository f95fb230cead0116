"""Blocked Cholesky factorisation and triangular solve whose bulk is matrix products.

On CPU, JAX hands ``cholesky`` and ``triangular_solve`` to LAPACK/BLAS with one thread (the
library's thread rule, :mod:`ppl_bsvm._runtime`), while its matrix products run on XLA's own
thread pool; the triangular solve is also the slowest of the three per flop. Splitting the
matrix in halves down to :data:`BLOCK` rows moves three quarters of the flops of both into
products (the recursive formulation of LAPACK's blocked algorithms, same rounding behaviour).
Measured on 2 cores (a loaded machine, so roughly), N = 683: triangular solve with N
right-hand sides 20 ms -> 11 ms, Cholesky 11 ms -> 6 ms, for blocks of 128 or 256 rows alike;
256 gives fewer operations to compile. The recursion happens at trace time (static shapes).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

__all__ = ["BLOCK", "cholesky", "solve_transposed"]

BLOCK = 256
"""Largest block handed to LAPACK/BLAS directly."""


def solve_transposed(L, B):
    """``X = B L^{-T}`` (``X L^T = B``) for lower-triangular ``L``, by halves: with
    ``L = [[L11, 0], [L21, L22]]``, ``X1 = B1 L11^{-T}`` and
    ``X2 = (B2 - X1 L21^T) L22^{-T}``."""
    n = L.shape[0]
    if n <= BLOCK:
        return lax.linalg.triangular_solve(L, B, left_side=False, lower=True, transpose_a=True)
    h = n // 2
    X1 = solve_transposed(L[:h, :h], B[:, :h])
    X2 = solve_transposed(L[h:, h:], B[:, h:] - X1 @ L[h:, :h].T)
    return jnp.concatenate([X1, X2], axis=1)


def cholesky(A):
    """Lower Cholesky factor of a symmetric positive definite ``A``, by halves:
    ``L11 = chol(A11)``, ``L21 = A21 L11^{-T}``, ``L22 = chol(A22 - L21 L21^T)``. Like
    ``jnp.linalg.cholesky``, NaN where ``A`` is not positive definite."""
    n = A.shape[0]
    if n <= BLOCK:
        return jnp.linalg.cholesky(A)
    h = n // 2
    L11 = cholesky(A[:h, :h])
    L21 = solve_transposed(L11, A[h:, :h])
    L22 = cholesky(A[h:, h:] - L21 @ L21.T)
    top = jnp.concatenate([L11, jnp.zeros((h, n - h), A.dtype)], axis=1)
    return jnp.concatenate([top, jnp.concatenate([L21, L22], axis=1)], axis=0)
