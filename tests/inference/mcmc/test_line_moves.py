"""The line moves' learned directions: from a window's ``d x d`` sum of squared deviations,
or, beyond ``WINDOW_DRAWS`` dimensions, from its kept draws by an SVD (the same axes)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_bsvm.inference.mcmc import sweep


@pytest.fixture(autouse=True)
def float64():
    with jax.enable_x64(True):
        yield


def _window(moves, draws):
    for z in draws:
        moves = sweep._accumulate(moves, jnp.asarray(z))
    return moves


def _empty(k, d, keep):
    window = (sweep.WINDOW_DRAWS, d) if keep else (d, d)
    return sweep.LineMoves(jnp.zeros((k, d)), None, None, None, None, None, None, jnp.zeros(()),
                           jnp.zeros((d,)), jnp.zeros(window))


@pytest.mark.parametrize("count", [5, 40, 200])
def test_kept_draws_give_the_axes_of_the_dense_covariance(count, monkeypatch):
    """The same draws (no more than the ring holds) through both forms: the same shrunk
    eigenvalues and the same axes up to sign, with fewer draws than dimensions too."""
    d, k = 600, 10
    rng = np.random.default_rng(count)
    scales = np.linspace(3.0, 0.1, d)
    draws = rng.standard_normal((count, d)) * scales + 1.0
    kept = _window(_empty(k, d, True), draws)
    monkeypatch.setattr(sweep, "WINDOW_DRAWS", 10**6)  # the dense form at this d
    dense = _window(_empty(k, d, False), draws)
    np.testing.assert_allclose(kept.mean, dense.mean, rtol=1e-13)
    w_dense, E_dense = sweep._principal_axes(dense, k)
    monkeypatch.undo()
    w_kept, E_kept = sweep._principal_axes(kept, k)
    np.testing.assert_allclose(w_kept, w_dense, rtol=1e-9)
    separated = np.abs(np.diff(np.asarray(w_dense))) > 1e-6 * float(w_dense[0])
    cos = np.abs(np.sum(np.asarray(E_kept) * np.asarray(E_dense), axis=0))
    assert np.all(cos[:-1][separated] > 1 - 1e-8), cos


def test_the_ring_keeps_the_last_draws_and_the_window_is_small():
    d, k, count = 2000, 10, 700
    draws = np.arange(count * d, dtype=float).reshape(count, d)
    moves = _window(_empty(k, d, True), draws)
    assert moves.m2.shape == (sweep.WINDOW_DRAWS, d)  # 8 MB, not the 32 MB of d x d
    assert float(moves.count) == count
    kept = {int(row[0]) // d for row in np.asarray(moves.m2)}
    assert kept == set(range(count - sweep.WINDOW_DRAWS, count))
    np.testing.assert_allclose(moves.mean, draws.mean(axis=0), rtol=1e-12)
