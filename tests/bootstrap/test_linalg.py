"""The blocked Cholesky factorisation and triangular solve (``bootstrap/_linalg.py``) against
LAPACK through scipy, on matrices large enough to recurse twice."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.linalg import cholesky, solve_triangular

from ppl_bsvm.bootstrap import _linalg


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def _spd(rng, n, cond=1e6):
    Q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return (Q * np.geomspace(1.0, 1.0 / cond, n)) @ Q.T


@pytest.mark.parametrize("n", [_linalg.BLOCK, 2 * _linalg.BLOCK + 37])
def test_blocked_cholesky_and_solve_match_lapack(rng, n):
    A = _spd(rng, n)
    L = np.asarray(jax.jit(_linalg.cholesky)(jnp.asarray(A)))
    ref = cholesky(A, lower=True)
    assert np.max(np.abs(L - ref)) < 1e-12 * np.max(np.abs(ref))
    assert np.all(L[np.triu_indices(n, 1)] == 0.0)
    B = rng.standard_normal((n + 5, n))
    X = np.asarray(jax.jit(_linalg.solve_transposed)(jnp.asarray(ref), jnp.asarray(B)))
    X_ref = solve_triangular(ref, B.T, lower=True).T  # X L^T = B
    assert np.max(np.abs(X - X_ref)) < 1e-9 * np.max(np.abs(X_ref))
    assert np.max(np.abs(X @ ref.T - B)) < 1e-10 * np.max(np.abs(B))


def test_blocked_cholesky_of_an_indefinite_matrix_is_nan(rng):
    n = 2 * _linalg.BLOCK + 3
    A = _spd(rng, n)
    A[-1, -1] = -1.0  # the failure sits in the last block
    assert np.isnan(np.asarray(_linalg.cholesky(jnp.asarray(A)))).any()
