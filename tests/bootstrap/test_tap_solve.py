"""Where the replica-TAP solver starts (``tap_solve``): the coarse problem's extension by
Eq. 19 against the cavity of a point added without a site, cold and warm starts against the
fixed point reached from the start of spec 5.3."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ppl_bsvm import bootstrap, datasets, kernels
from ppl_bsvm.bootstrap import tap, tap_newton, tap_solve


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def _kernel_matrix(X, lengthscale=3.0):
    k = kernels.RBF(lengthscale=lengthscale)
    return np.asarray(kernels.gram(k, k.init_params(X), jnp.asarray(X, jnp.float64), 1e-6))


def _sites(state):
    return np.concatenate([np.asarray(state.Lambda), np.asarray(state.gamma), np.asarray(state.lam)])


@pytest.mark.parametrize("model", ["hard", "soft"])
def test_extension_is_the_cavity_of_a_point_added_without_a_site(model):
    X, y = datasets.load("crabs", standardize=True)
    K = _kernel_matrix(X)
    order = tap_solve.boundary_order(K, y, model)
    subset, rest = np.sort(order[:40]), np.sort(order[40:])
    config = tap.TAPConfig(model, 0 if model == "hard" else 30)
    coarse = tap_solve.solve_ratio(K[np.ix_(subset, subset)], y[subset], config, 0.5, 1.0, 1.0,
                                   tol=1e-9, max_iter=500).run.state
    sites = (coarse.Lambda, coarse.gamma, coarse.lam)
    outer = tap_solve.extend(
        config, tap_solve.tap_data(K[np.ix_(subset, subset)], y[subset], model, 0.5, 1.0, 1.0),
        sites, jnp.asarray(K[np.ix_(subset, rest)]), jnp.asarray(np.diag(K)[rest]),
        tap_solve.tap_data(np.zeros((0, 0)), y[rest], model, 0.5, 1.0, 1.0),
    )
    for pos in (0, 17, len(rest) - 1):
        j = rest[pos]
        idx = np.append(subset, j)
        zero = jnp.zeros(1)
        moments, fac, G, binv = tap.model_moments(
            jnp.asarray(K[np.ix_(idx, idx)]),
            *(jnp.concatenate([s, zero]) for s in sites),
        )
        cav = tap.cavity(moments, fac, G, binv, jnp.concatenate([coarse.lam, zero]))
        one = tap.Cavity(*(c[-1:] for c in cav))
        _, expected = tap.tilted_and_sites(
            config, one, tap_solve.tap_data(np.eye(1), y[[j]], model, 0.5, 1.0, 1.0)
        )
        for got, want in zip(outer, expected):
            np.testing.assert_allclose(float(got[pos]), float(want[0]), rtol=1e-8,
                                       atol=1e-12 * abs(float(want[0])) + 1e-300)


def test_cold_start_from_a_coarse_problem_reaches_the_fixed_point_of_the_spec_start():
    """520 Wisconsin points: the coarse problem has 256 (one level); the fixed point is the
    one reached from the uniform start of spec 5.3, with fewer factorisations of the full
    problem."""
    X, y = datasets.load("wisconsin", standardize=True)
    idx = np.random.default_rng(0).permutation(len(y))[:520]
    K, y = _kernel_matrix(X[idx]), y[idx]
    config = tap.TAPConfig("hard")
    assert tap_solve.coarse_size(len(y)) == 256
    cold = tap_solve.solve_ratio(K, y, config, 1.0, 1.0, 1.0, tol=1e-10, max_iter=500)
    spec = tap_solve.solve_ratio(
        K, y, config, 1.0, 1.0, 1.0, tol=1e-10, max_iter=500,
        start=tap.init(None, None, tap_solve.tap_data(K, y, "hard", 1.0, 1.0, 1.0)),
    )
    assert cold.run.stop_reason == spec.run.stop_reason == "tol"
    assert cold.coarse_iter > 0 and spec.coarse_iter == 0
    a, b = _sites(spec.run.state), _sites(cold.run.state)
    assert np.max(np.abs(a - b) / (np.abs(a) + 1e-8 * np.max(np.abs(a)))) < 1e-6
    assert cold.run.n_iter < spec.run.n_iter


def test_a_learning_curve_reaches_the_fixed_points_of_single_ratios():
    """Warm starts along the curve (the Newton predictor from the ratio below) change the
    path, not the fixed point."""
    X, y = datasets.load("crabs", standardize=True)
    k = kernels.RBF(lengthscale=3.0)
    curve = bootstrap.replica_tap(X, y, k, [0.5, 0.8, 1.0, 1.5], tol=1e-10)
    for i, ratio in enumerate(curve.sample_ratio):
        alone = bootstrap.replica_tap(X, y, k, float(ratio), tol=1e-10)
        assert curve.error[i] == pytest.approx(alone.error[0], abs=1e-9)
        np.testing.assert_allclose(curve.oob_mean[i], alone.oob_mean[0], atol=1e-7)
        np.testing.assert_allclose(curve.oob_var[i], alone.oob_var[0], rtol=1e-6)
    assert curve.n_iter[1:].max() < curve.n_iter[0]  # the warm starts pay


def test_the_warm_ladder_doubles_the_ratio_up_to_the_target():
    assert tap_solve.warm_ladder(1.0, 30.0) == [2.0, 4.0, 8.0, 16.0, 30.0]
    assert tap_solve.warm_ladder(1.0, 2.0) == [2.0]  # within WARM_RATIO: the target alone
    assert tap_solve.warm_ladder(0.5, 0.7) == [0.7]
    assert tap_solve.warm_ladder(1.0, 4.0) == [2.0, 4.0]
