"""The line moves' learned directions: from a window's ``d x d`` sum of squared deviations,
or, beyond ``WINDOW_DRAWS`` dimensions, from its kept draws by an SVD (the same axes)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_bsvm.inference.mcmc import gibbs_kernel, sweep


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


@pytest.mark.parametrize("count, with_basis", [(5, False), (40, False), (200, False),
                                               (40, True)])
def test_kept_draws_give_the_axes_of_the_dense_covariance(count, with_basis, monkeypatch):
    """The same draws (no more than the ring holds) through both forms: the same shrunk
    eigenvalues and the same axes up to sign, with fewer draws than dimensions too, and
    within a subspace (both forms' axes then lie in it)."""
    d, k = 600, 10
    rng = np.random.default_rng(count)
    scales = np.linspace(3.0, 0.1, d)
    draws = rng.standard_normal((count, d)) * scales + 1.0
    basis = jnp.asarray(np.linalg.qr(rng.standard_normal((d, 48)))[0]) if with_basis else None
    kept = _window(_empty(k, d, True), draws)
    monkeypatch.setattr(sweep, "WINDOW_DRAWS", 10**6)  # the dense form at this d
    dense = _window(_empty(k, d, False), draws)
    np.testing.assert_allclose(kept.mean, dense.mean, rtol=1e-13)
    w_dense, E_dense = sweep._principal_axes(dense, k, basis)
    monkeypatch.undo()
    w_kept, E_kept = sweep._principal_axes(kept, k, basis)
    if with_basis:
        outside = np.asarray(E_kept) - np.asarray(basis @ (basis.T @ E_kept))
        assert np.abs(outside).max() < 1e-12
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


def test_gp_directions_are_learned_within_the_top_of_the_prior_spectrum():
    """A Gaussian posterior ``Sigma = (K^-1 + D)^-1`` of a smooth kernel, 50 draws: the top
    axis of the draws' covariance is mostly sampling noise in directions the prior all but
    rules out, so the line along it is far narrower than the posterior along it (the largest
    conditional variance along ``v``, ``1 / v^T Sigma^-1 v``, against its variance
    ``v^T Sigma v``: 1 for an exact principal axis); sought within the preconditioner's top
    eigenvectors (``_smooth_basis``) it is close to an exact one."""
    from ppl_bsvm import kernels
    from ppl_bsvm.inference._common import GPData
    from ppl_bsvm.inference.mcmc import pcg

    n, count, k = 500, 50, 10
    rng = np.random.default_rng(0)
    X = jnp.asarray(rng.standard_normal((n, 3)))
    kernel = kernels.RBF(lengthscale=1.5)
    K = np.asarray(kernels.gram(kernel, kernel.init_params(X), X, 1e-6))
    noise = rng.uniform(0.05, 2.0, n)
    precision = np.linalg.inv(K) + np.diag(1.0 / noise)
    sigma = np.linalg.inv(precision)
    sigma = 0.5 * (sigma + sigma.T)
    draws = rng.multivariate_normal(np.zeros(n), sigma, size=count, method="cholesky")
    data = GPData(jnp.asarray(K), jnp.ones(n), jnp.asarray(1.0),
                  pcg=pcg.preconditioner(jnp.asarray(K), rank=64, jitter=1e-6))
    moves = _window(_empty(k, n, False), draws)

    def narrowness(E):
        v = np.asarray(E)[:, 0]
        return float((v @ sigma @ v) * (v @ precision @ v))  # >= 1, 1 on an exact axis

    raw = narrowness(sweep._principal_axes(moves, k)[1])
    smooth = narrowness(sweep._principal_axes(moves, k, sweep._smooth_basis(data, k))[1])
    assert raw > 3.0 and smooth < 1.5, (raw, smooth)  # 4.8 and 1.25


@pytest.mark.parametrize("keep", [False, True])
def test_pooled_windows_give_the_axes_of_all_their_draws(keep, monkeypatch):
    """Vectorised chains learn from their windows together: the axes of two chains' windows
    (each its own Welford sums, or kept draws) are those of one window that saw every draw,
    and each chain gets them, with the pooled mean."""
    d, k, count = 600, 10, 40
    rng = np.random.default_rng(3)
    scales = np.linspace(3.0, 0.1, d)
    draws = rng.standard_normal((2, count, d)) * scales + np.array([[1.0], [-2.0]])[:, :, None]
    if not keep:
        monkeypatch.setattr(sweep, "WINDOW_DRAWS", 10**6)  # the dense form at this d
    each = [_window(_empty(k, d, keep), chain) for chain in draws]
    batched = jax.tree.map(lambda *xs: jnp.stack(xs), *each)
    whole = _window(_empty(k, d, keep), draws.reshape(2 * count, d))
    w_pooled, E_pooled = sweep._principal_axes(batched, k)
    w_whole, E_whole = sweep._principal_axes(whole, k)
    np.testing.assert_allclose(w_pooled, w_whole, rtol=1e-9)
    cos = np.abs(np.sum(np.asarray(E_pooled) * np.asarray(E_whole), axis=0))
    assert np.all(cos > 1 - 1e-8), cos
    data = sweep.LinearData(jnp.eye(d), jnp.asarray(1.0), jnp.asarray(1.0))
    learned = sweep._learn_pooled(batched, data)
    assert learned.V.shape == (2, k, d)
    np.testing.assert_allclose(learned.V[0], learned.V[1])
    U = np.asarray(learned.PU[0][:, :, 1])  # u = v / sd^2, beside P v
    np.testing.assert_allclose(learned.center[0], U @ draws.mean(axis=(0, 1)), rtol=1e-10)


def test_one_reading_of_the_directions_option_for_the_estimates_and_the_sampler():
    """``gibbs_kernel.direction_count`` (what the cost and memory estimates count) agrees with
    the sampler's own resolution of each form of the option."""
    n, p = 5000, 7
    assert gibbs_kernel.direction_count(None, False, n) == (gibbs_kernel.gp_directions(n), True)
    assert gibbs_kernel.direction_count(None, True, p) == (p, True)
    assert gibbs_kernel.direction_count("all", False, n) == (n, True)
    assert gibbs_kernel.direction_count(np.int64(3), True, p) == (3, True)
    assert gibbs_kernel.direction_count(0, False, n) == (0, False)
    assert gibbs_kernel.direction_count([[1.0] * p, [2.0] * p], True, p) == (2, False)
    for directions, linear, d in [(None, False, n), (None, True, p), ("all", True, p),
                                  (3, True, p)]:
        assert gibbs_kernel._resolve_for(directions, linear, d) == gibbs_kernel.direction_count(
            directions, linear, d)[0]
